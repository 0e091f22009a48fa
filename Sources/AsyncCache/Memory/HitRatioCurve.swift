/// What more memory would buy: the hit ratio a memory layer estimates an LRU cache would have at
/// a quarter, half, once, twice and four times its capacity, over the lookups it has seen.
///
/// The layer measures it as it serves: about one lookup in a hundred, drawn at random, is
/// watched, and the next lookup of its key records how many lookups came between (its reuse
/// time). The average eviction time model (Hu et al., USENIX ATC 2016) turns those reuse times
/// into the hit ratio of an LRU cache of any size. Sampling lookups rather than keys (as SHARDS
/// does, Waldspurger et al., FAST 2015) samples a popular key as often as it is asked for, so a
/// few hot keys cannot tip the estimate. In a layer of 51,200 entries or more, a reuse whose
/// window held at least 2,048 keys of a spatial sample of one key in a hundred or fewer (SHARDS') is
/// judged by that count of distinct keys instead of the model, which over long windows of real
/// traces guesses wrong. Over the ARC paper's OLTP and P3 traces the curve stays within 2 points
/// of an exact LRU simulation at every size (the `memory.curve` benchmark prints both).
///
/// The curve is LRU's, whatever the layer's ``EvictionPolicy``: read it for the shape, what
/// doubling the capacity adds. The layer's own hit ratio, beside it in ``MemoryLayer/Statistics``,
/// is what its policy makes of the capacity it has; the adaptive default usually beats LRU's
/// curve at `1×`.
///
/// ```swift
/// if let curve = memory.statistics.hitRatioCurve {
///   for point in curve.points {
///     print("\(point.scale)× (\(point.capacity) entries): \(point.hitRatio)")
///   }
/// }
/// ```
public struct HitRatioCurve: Sendable, Hashable {
  /// The estimate at one capacity.
  public struct Point: Sendable, Hashable {
    /// The capacity, as a multiple of the layer's: 0.25, 0.5, 1, 2 or 4.
    public var scale: Double
    /// The capacity, in entries.
    public var capacity: Int
    /// The fraction of lookups an LRU cache of ``capacity`` entries would have answered, 0 to 1.
    public var hitRatio: Double
  }

  /// The multiples of the layer's capacity the curve is estimated at.
  public static let scales: [Double] = [0.25, 0.5, 1, 2, 4]

  /// The estimates, one for each of ``scales``, smallest first.
  public var points: [Point]

  /// The lookups watched so far: the estimate's sample. Below a few thousand (a few hundred
  /// thousand lookups), the curve is rough. (A layer that has watched 20,000 watches fewer,
  /// each standing for more lookups: this counts watches, not what they weigh.)
  public var sampledLookups: Int

  /// The estimate at `scale` times the layer's capacity (one of ``scales``), or `nil`.
  public func hitRatio(atScale scale: Double) -> Double? {
    points.first { $0.scale == scale }?.hitRatio
  }
}

extension HitRatioCurve {
  /// One segment's part of the curve: its reuse times (counts by ``ReuseHistogram`` bucket, in
  /// the segment's own lookups: `reuseTimes` all of them, `modelled` those the model judges),
  /// and its share of the layer's lookups.
  struct SegmentReuse {
    var share: Double
    var reuseTimes: [Int]
    var modelled: [Int]
  }

  /// The curve for a layer of `capacity` entries, from its `segments`' reuse times, the
  /// `distances` counted in the layer's ``KeySample`` (in keys of the layer), and the watches
  /// that ended without a reuse (dropped, or still waiting: counted as never reused), each count
  /// weighed by the lookups its watch stands for; `sampledLookups` watches in all.
  ///
  /// A segment's reuse times are in its own lookups: divided by its share, they are in the
  /// layer's. Shares differ when a segment holds popular keys (under a Zipf workload, from 0.6
  /// to 3 times the mean over 32 segments), so the layer's eviction time is found over every
  /// segment's times converted, not over their sum.
  init?(
    capacity: Int, segments: [SegmentReuse], distances: [Int], unresolved: Int, sampledLookups: Int
  ) {
    let samples = segments.reduce(unresolved) { $0 + $1.reuseTimes.reduce(0, +) }
    guard samples > 0, capacity > 0 else { return nil }
    self.sampledLookups = sampledLookups
    let segments = segments.filter { $0.share > 0 }
    points = Self.scales.map { scale in
      let entries = Int(clamping: UInt64(Swift.min((Double(capacity) * scale).rounded(), 0x1p62)))
      let eviction = Self.evictionTime(entries: Double(entries), segments: segments, samples: samples)
      var hits = Self.count(below: Double(entries), in: distances)
      for segment in segments { hits += Self.count(below: eviction * segment.share, in: segment.modelled) }
      return Point(scale: scale, capacity: entries, hitRatio: Swift.min(Swift.max(hits / Double(samples), 0), 1))
    }
  }

  /// How long an entry stays in an LRU cache of `entries`, in the layer's lookups, by the
  /// average eviction time model: the time `T` at which the integral of P(reuse time > t) from 0
  /// reaches `entries`; a lookup whose reuse time is shorter hits. A reuse time of a segment is
  /// its time in the segment's lookups over the segment's share; a bucket's reuse times count as
  /// spread evenly over it, and the `samples` not in any segment's histogram as never reused.
  /// Infinite when the integral never reaches `entries`: every reuse recorded hits.
  static func evictionTime(entries: Double, segments: [SegmentReuse], samples: Int) -> Double {
    // Each segment's nonzero buckets: their lower bound, width and count.
    let buckets = segments.map { segment in
      segment.reuseTimes.indices.compactMap { index -> (lower: Double, width: Double, count: Double)? in
        guard segment.reuseTimes[index] != 0 else { return nil }
        let (lower, width) = ReuseHistogram.range(of: index)
        return (Double(lower), Double(width), Double(segment.reuseTimes[index]))
      }
    }
    let recorded = buckets.reduce(0.0) { $0 + $1.reduce(0) { $0 + $1.count } }
    let neverReused = Double(samples) - recorded
    let target = entries * Double(samples)
    /// The integral, times `samples`, up to `time`: a bucket's part is that of the share of
    /// its values above each t, falling linearly across the bucket.
    func area(until time: Double) -> Double {
      var area = neverReused * time
      for (segment, buckets) in zip(segments, buckets) {
        let time = time * segment.share
        var part = 0.0
        for bucket in buckets {
          let end = bucket.lower + bucket.width
          let covered =
            time <= bucket.lower
            ? time
            : time < end
              ? time - (time - bucket.lower) * (time - bucket.lower) / (2 * bucket.width)
              : bucket.lower + bucket.width / 2
          part += bucket.count * covered
        }
        area += part / segment.share
      }
      return area
    }
    guard target > 0 else { return 0 }
    var (low, high) = (0.0, 1.0)
    while area(until: high) < target {
      (low, high) = (high, high * 2)
      if high > 0x1p62 { return .infinity }
    }
    // The area grows with the time: halve the interval until it is within a millionth.
    while high - low > Swift.max(high * 1e-6, 1e-6) {
      let middle = (low + high) / 2
      if area(until: middle) < target { low = middle } else { high = middle }
    }
    return (low + high) / 2
  }

  /// The values of `histogram` (counts by ``ReuseHistogram`` bucket) below `limit`, a bucket's
  /// values spread evenly over it.
  static func count(below limit: Double, in histogram: [Int]) -> Double {
    var count = 0.0
    for index in histogram.indices where histogram[index] != 0 {
      let (lower, width) = ReuseHistogram.range(of: index)
      if Double(lower) >= limit { break }
      count += Double(histogram[index]) * Swift.min((limit - Double(lower)) / Double(width), 1)
    }
    return count
  }
}
