/// Durations in a fixed-size log-linear histogram: the count, total, extremes and percentiles
/// of a cache's load times (see ``LoadingCache/Statistics-swift.struct/loadTime``).
///
/// Each power of two is split into 8 buckets, so a percentile is accurate to within 12.5% (it
/// reports its bucket's upper end, never more than the largest duration recorded); durations
/// under 16 ns are exact. The histogram takes the same 488 counters whatever it records.
///
/// ```swift
/// let loads = cache.statistics.loadTime
/// print("\(loads.count) loads, median \(loads.percentile(0.5) ?? .zero), p99 \(loads.percentile(0.99) ?? .zero)")
/// ```
public struct LoadTimeHistogram: Sendable, Hashable, CustomStringConvertible {
  /// Buckets per power of two, as a shift: 2^3 = 8.
  static var subBucketBits: Int { 3 }
  static var subBuckets: Int { 1 << subBucketBits }
  /// Exact buckets for 0..<8 ns, then 8 per power of two from 2^3 to 2^62.
  static var bucketCount: Int { subBuckets + (63 - subBucketBits) * subBuckets }

  /// The number of durations recorded.
  public private(set) var count = 0
  private var totalNanoseconds: Int64 = 0
  private var minimumNanoseconds = Int64.max
  private var maximumNanoseconds: Int64 = 0
  private var counts: [Int] = []

  /// An empty histogram.
  public init() {}

  /// The sum of the durations recorded (at most `Int64.max` nanoseconds).
  public var total: Duration { .nanoseconds(totalNanoseconds) }
  /// The shortest duration recorded; `nil` when none was.
  public var minimum: Duration? { count == 0 ? nil : .nanoseconds(minimumNanoseconds) }
  /// The longest duration recorded; `nil` when none was.
  public var maximum: Duration? { count == 0 ? nil : .nanoseconds(maximumNanoseconds) }
  /// The mean duration; `nil` when none was recorded.
  public var mean: Duration? { count == 0 ? nil : .nanoseconds(totalNanoseconds / Int64(count)) }

  /// An empty histogram whose counters are already allocated, for ``copyContents(of:)``.
  static func allocated() -> LoadTimeHistogram {
    var histogram = LoadTimeHistogram()
    histogram.counts = Array(repeating: 0, count: bucketCount)
    return histogram
  }

  /// Makes this histogram equal to `other` without sharing its storage, copying the counters
  /// into storage this one owns (from ``allocated()``): no allocation.
  ///
  /// A statistics snapshot is taken this way under the cache's lock. Were the storage shared,
  /// the next load would copy it while holding that lock; this way only the snapshot pays, with
  /// a 4 KB copy and no allocation under the lock.
  mutating func copyContents(of other: LoadTimeHistogram) {
    count = other.count
    totalNanoseconds = other.totalNanoseconds
    minimumNanoseconds = other.minimumNanoseconds
    maximumNanoseconds = other.maximumNanoseconds
    guard !other.counts.isEmpty, counts.count == other.counts.count else {
      // Nothing recorded (no counters, equal to an empty histogram), or storage not from
      // `allocated()`.
      counts = other.counts.isEmpty ? [] : other.counts.withUnsafeBufferPointer { Array($0) }
      return
    }
    counts.withUnsafeMutableBufferPointer { mine in
      other.counts.withUnsafeBufferPointer { _ = mine.update(fromContentsOf: $0) }
    }
  }

  /// Whether this histogram and `other` share their counters' storage. For tests.
  func sharesStorage(with other: LoadTimeHistogram) -> Bool {
    guard !counts.isEmpty, !other.counts.isEmpty else { return false }
    return counts.withUnsafeBufferPointer { mine in
      other.counts.withUnsafeBufferPointer { $0.baseAddress == mine.baseAddress }
    }
  }

  /// Records `duration` (a negative one, from a clock that went back, as zero).
  public mutating func record(_ duration: Duration) {
    let nanoseconds = Swift.max(duration.saturatingNanoseconds, 0)
    if counts.isEmpty { counts = Array(repeating: 0, count: Self.bucketCount) }
    counts[Self.bucket(of: nanoseconds)] += 1
    count += 1
    let (sum, overflow) = totalNanoseconds.addingReportingOverflow(nanoseconds)
    totalNanoseconds = overflow ? .max : sum
    minimumNanoseconds = Swift.min(minimumNanoseconds, nanoseconds)
    maximumNanoseconds = Swift.max(maximumNanoseconds, nanoseconds)
  }

  /// The duration that `fraction` of the recorded durations do not exceed (0.5 for the median,
  /// 0.99 for the 99th percentile), to within 12.5%; `nil` when none was recorded. `fraction`
  /// is clamped to 0...1: 0 gives the minimum, 1 the maximum.
  public func percentile(_ fraction: Double) -> Duration? {
    guard count > 0 else { return nil }
    let clamped = fraction.isNaN ? 0 : Swift.min(Swift.max(fraction, 0), 1)
    if clamped == 0 { return minimum }
    // The rank of the duration wanted, 1-based: the smallest that covers `clamped` of all. The
    // product is nudged down so that a rounding error (0.07 * 100 = 7.000000000000001) does not
    // skip a rank.
    let rank = Swift.max(Int((clamped * Double(count) * (1 - 1e-12)).rounded(.up)), 1)
    var seen = 0
    for (index, bucketCount) in counts.enumerated() where bucketCount > 0 {
      seen += bucketCount
      if seen >= rank {
        let upper = Self.upperBound(ofBucket: index)
        return .nanoseconds(Swift.min(Swift.max(upper, minimumNanoseconds), maximumNanoseconds))
      }
    }
    return maximum
  }

  /// A bucket of the histogram: the durations from `lowerBound` through `upperBound`, and how
  /// many of the recorded ones fell in it.
  public struct Bucket: Sendable, Hashable {
    /// The shortest duration in the bucket.
    public var lowerBound: Duration
    /// The longest duration in the bucket.
    public var upperBound: Duration
    /// How many recorded durations fell in the bucket.
    public var count: Int

    /// Creates a bucket.
    public init(lowerBound: Duration, upperBound: Duration, count: Int) {
      self.lowerBound = lowerBound
      self.upperBound = upperBound
      self.count = count
    }
  }

  /// The buckets that hold at least one duration, shortest first; the empty ones are left out.
  /// Each power of two of nanoseconds is split into 8 buckets (at most 488). O(488).
  ///
  /// To fill a histogram of your own bounds (Prometheus's `le` buckets, say), add each bucket's
  /// count to the first of your bounds at or above its `upperBound`: the counts are exact up to
  /// this histogram's resolution, 12.5%.
  public var buckets: [Bucket] {
    counts.indices.compactMap { index in
      guard counts[index] > 0 else { return nil }
      let lower = index == 0 ? 0 : Self.upperBound(ofBucket: index - 1) + 1
      return Bucket(
        lowerBound: .nanoseconds(lower), upperBound: .nanoseconds(Self.upperBound(ofBucket: index)),
        count: counts[index])
    }
  }

  /// Adds the durations `other` recorded.
  public mutating func merge(_ other: LoadTimeHistogram) {
    guard other.count > 0 else { return }
    if counts.isEmpty { counts = Array(repeating: 0, count: Self.bucketCount) }
    for index in other.counts.indices { counts[index] += other.counts[index] }
    count += other.count
    let (sum, overflow) = totalNanoseconds.addingReportingOverflow(other.totalNanoseconds)
    totalNanoseconds = overflow ? .max : sum
    minimumNanoseconds = Swift.min(minimumNanoseconds, other.minimumNanoseconds)
    maximumNanoseconds = Swift.max(maximumNanoseconds, other.maximumNanoseconds)
  }

  /// The bucket of a duration of `nanoseconds` (0 or more).
  static func bucket(of nanoseconds: Int64) -> Int {
    let value = UInt64(nanoseconds)
    if value < UInt64(subBuckets) { return Int(value) }
    let exponent = 63 - value.leadingZeroBitCount  // at least subBucketBits
    let mantissa = Int(value >> UInt64(exponent - subBucketBits)) & (subBuckets - 1)
    return subBuckets + (exponent - subBucketBits) * subBuckets + mantissa
  }

  /// The largest duration, in nanoseconds, that falls into bucket `index`.
  static func upperBound(ofBucket index: Int) -> Int64 {
    if index < subBuckets { return Int64(index) }
    let exponent = (index - subBuckets) / subBuckets + subBucketBits
    let mantissa = Int64((index - subBuckets) % subBuckets)
    let width = Int64(1) << Int64(exponent - subBucketBits)
    let lower = (Int64(subBuckets) + mantissa) * width
    // The top bucket's end does not fit in Int64.
    let (upper, overflow) = lower.addingReportingOverflow(width - 1)
    return overflow ? .max : upper
  }

  public var description: String {
    guard count > 0 else { return "no loads" }
    let median = percentile(0.5) ?? .zero
    let p99 = percentile(0.99) ?? .zero
    return
      "\(count) loads, total \(total.readable), mean \((mean ?? .zero).readable), median \(median.readable), "
      + "p99 \(p99.readable), max \((maximum ?? .zero).readable)"
  }

  public static func == (lhs: LoadTimeHistogram, rhs: LoadTimeHistogram) -> Bool {
    lhs.count == rhs.count && lhs.totalNanoseconds == rhs.totalNanoseconds
      && (lhs.count == 0
        || (lhs.minimumNanoseconds == rhs.minimumNanoseconds
          && lhs.maximumNanoseconds == rhs.maximumNanoseconds && lhs.counts == rhs.counts))
  }

  public func hash(into hasher: inout Hasher) {
    hasher.combine(count)
    hasher.combine(totalNanoseconds)
    if count > 0 { hasher.combine(counts) }
  }
}
