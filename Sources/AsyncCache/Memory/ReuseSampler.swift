// What more memory would buy: each segment samples about one lookup in a hundred and times how
// long its key takes to be looked up again. `HitRatioCurve` turns those reuse times into the hit
// ratios an LRU cache of other sizes would have.
//
// Why lookups, and not keys as SHARDS samples: the hit ratio is a mean over lookups, and a few
// keys carry many of them (in the ARC paper's OLTP trace, 100 of 186,880 blocks carry 14% of the
// requests). One key in a hundred holds one of those 100 or none, so SHARDS' estimate at 1% moved
// by up to 14 points from one hash seed to the next on that trace; a lookup in a hundred, drawn
// at random, samples a hot key as often as it is asked for (within 2.3 points on the same runs).
// The reuse times go through the average eviction time model (AET: Hu et al., "Kinetic Modeling
// of Data Eviction in Cache", USENIX ATC 2016), which needs no stack of keys.

/// The reuse-time sampling of one memory segment: which of its lookups are watched, when each
/// began, and the histogram of the reuse times measured. Not thread-safe: under the segment's
/// lock.
///
/// Time is the segment's own lookup count (hits and misses). Keys are spread over the segments
/// by hash, so a segment's lookups are a spatial sample of the layer's: a reuse time in the
/// segment's lookups, times the segment count, estimates it in the layer's.
@usableFromInline
struct ReuseSampler<Key: Hashable> {
  /// Lookups until the next one is watched; `Int.max` when the sampler is off, which a lookup
  /// counts down from for ever (2^63 lookups).
  @usableFromInline var countdown = Int.max
  /// The watched keys, and the lookup count when each was watched.
  @usableFromInline var watches: [Key: Int] = [:]
  /// The watches in the order they began (some since resolved, or begun again: a watch is current
  /// when `watches` holds its time), so that the oldest is dropped first.
  var order: [(key: Key, time: Int)] = []
  /// Where the oldest element of `order` not yet dropped is.
  var orderStart = 0
  /// The reuse times measured.
  var histogram = ReuseHistogram()
  /// Watches dropped unresolved: older than the horizon, or pushed out by newer ones.
  var dropped = 0
  /// The random state that spaces the watched lookups (xorshift64*).
  var random: UInt64 = 0

  /// The mean number of lookups between two watched ones: 102, so that at most 1% are watched
  /// (the count over 900k lookups stays 6 standard deviations below 1%).
  static var meanGap: Int { 102 }

  @usableFromInline
  init() {}

  /// Starts sampling, its gaps drawn from `seed`.
  mutating func start(seed: UInt64) {
    random = seed | 1
    countdown = nextGap()
  }

  var isOn: Bool { random != 0 }

  /// 52 to 152 (``meanGap`` ± 50), uniformly: a watched lookup is never predictable from the last,
  /// and the count of watched lookups varies little.
  mutating func nextGap() -> Int {
    random ^= random >> 12
    random ^= random << 25
    random ^= random >> 27
    let drawn = (random &* 0x2545_F491_4F6C_DD1D) >> 33
    return Self.meanGap - 50 + Int(drawn % 101)
  }

  /// Watches at most, and the age (in lookups) past which a watch is dropped, for a segment
  /// holding `count` entries: a reuse longer than 64 times the segment's entries is past what a
  /// cache four times as large would keep unless it misses less than 1 lookup in 16, and a quarter
  /// of the entries bounds the watches' memory (a few bytes per entry) in a scan.
  static func limits(forEntries count: Int) -> (watches: Int, horizon: Int) {
    let entries = Swift.max(count, 256)
    return (entries / 4, entries.multipliedReportingOverflow(by: 64).overflow ? .max : entries * 64)
  }

  /// Begins watching `key`, looked up at `time`.
  mutating func watch(_ key: Key, at time: Int) {
    watches[key] = time
    order.append((key, time))
  }

  /// Ends the watch of `key`, looked up again at `time`, if it is watched; returns whether it was.
  @discardableResult
  mutating func resolve(_ key: Key, at time: Int) -> Bool {
    guard let began = watches.removeValue(forKey: key) else { return false }
    histogram.record(time &- began)
    return true
  }

  /// Drops the watches older than the horizon, and the oldest while there are more than the limit
  /// allows, for a segment of `count` entries at lookup `time`.
  mutating func dropOld(at time: Int, entries count: Int) {
    let (limit, horizon) = Self.limits(forEntries: count)
    while orderStart < order.count {
      let oldest = order[orderStart]
      let current = watches[oldest.key] == oldest.time
      if current, time &- oldest.time <= horizon, watches.count <= limit { break }
      if current {
        watches[oldest.key] = nil
        dropped &+= 1
      }
      orderStart &+= 1
    }
    // Compact once the dropped prefix is half of the array, and keep only the current watches
    // once the ended ones behind a long one are more than the limit: `order` holds at most about
    // twice as many as `watches`.
    if order.count - orderStart > 2 * limit + 64 {
      order = order[orderStart...].filter { watches[$0.key] == $0.time }
      orderStart = 0
    } else if orderStart > 64, orderStart * 2 > order.count {
      order.removeFirst(orderStart)
      orderStart = 0
    }
  }
}

/// Reuse times, counted in buckets that are exact up to 31 and then 8 to each power of two (each
/// within 1/8 of its values), up to 2^48 (the last bucket counts all above).
struct ReuseHistogram: Sendable, Hashable {
  /// The counts by bucket; empty until the first reuse is recorded.
  var counts: [UInt32] = []
  /// How many reuse times were recorded.
  var total = 0

  static var exactLimit: Int { 32 }
  static var subBuckets: Int { 8 }
  static var bucketCount: Int { exactLimit + (48 - 5) * subBuckets }

  static func bucket(of value: Int) -> Int {
    guard value >= exactLimit else { return Swift.max(value, 0) }
    let exponent = Int.bitWidth - 1 - value.leadingZeroBitCount
    let sub = (value >> (exponent - 3)) & (subBuckets - 1)
    return Swift.min(exactLimit + (exponent - 5) * subBuckets + sub, bucketCount - 1)
  }

  /// The values bucket `index` counts: `lower ..< lower + width`.
  static func range(of index: Int) -> (lower: Int, width: Int) {
    guard index >= exactLimit else { return (index, 1) }
    let exponent = (index - exactLimit) / subBuckets + 5
    let sub = (index - exactLimit) % subBuckets
    return ((subBuckets + sub) << (exponent - 3), 1 << (exponent - 3))
  }

  mutating func record(_ value: Int) {
    if counts.isEmpty { counts = Array(repeating: 0, count: Self.bucketCount) }
    let index = Self.bucket(of: value)
    if counts[index] == .max { halve() }
    counts[index] += 1
    total += 1
  }

  /// Halves every count, keeping their proportions, when one would overflow (after 2^32 reuses
  /// in one bucket).
  mutating func halve() {
    total = 0
    for index in counts.indices {
      counts[index] /= 2
      total += Int(counts[index])
    }
  }
}
