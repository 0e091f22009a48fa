/// What more memory would buy: the hit ratio a memory layer estimates an LRU cache would have at
/// a quarter, half, once, twice and four times its capacity, over the lookups it has seen.
///
/// The layer measures it as it serves: about one lookup in a hundred, drawn at random, is
/// watched, and the next lookup of its key records how many lookups came between (its reuse
/// time). The average eviction time model (Hu et al., USENIX ATC 2016) turns those reuse times
/// into the hit ratio of an LRU cache of any size. Sampling lookups rather than keys (as SHARDS
/// does, Waldspurger et al., FAST 2015) samples a popular key as often as it is asked for, so a
/// few hot keys cannot tip the estimate. In a layer of 51,200 entries or more, a reuse whose
/// window held at least 2,048 keys of a spatial sample of one key in a hundred (SHARDS') is
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
  /// thousand lookups), the curve is rough. (A layer that has watched 40,000 watches fewer,
  /// each standing for more lookups: this counts watches, not what they weigh.)
  public var sampledLookups: Int

  /// The estimate at `scale` times the layer's capacity (one of ``scales``), or `nil`.
  public func hitRatio(atScale scale: Double) -> Double? {
    points.first { $0.scale == scale }?.hitRatio
  }
}

extension HitRatioCurve {
  /// The curve for a layer of `capacity` entries in `segments` segments, from its segments'
  /// reuse times (counts by ``ReuseHistogram`` bucket, in each segment's lookups: `reuseTimes`
  /// all of them, `modelled` those the model judges), the `distances` counted in the layer's
  /// ``KeySample`` (in keys of the layer), and the watches that ended without a reuse (dropped,
  /// or still waiting: counted as never reused), each count weighed by the lookups its watch
  /// stands for; `sampledLookups` watches in all.
  init?(
    capacity: Int, segments: Int, reuseTimes: [Int], modelled: [Int], distances: [Int], unresolved: Int,
    sampledLookups: Int
  ) {
    let samples = reuseTimes.reduce(0, +) + unresolved
    guard samples > 0, capacity > 0 else { return nil }
    self.sampledLookups = sampledLookups
    points = Self.scales.map { scale in
      let entries = Int(clamping: UInt64(Swift.min((Double(capacity) * scale).rounded(), 0x1p62)))
      let eviction = Self.evictionTime(
        entries: Double(entries) / Double(segments), reuseTimes: reuseTimes, samples: samples)
      let hits = Self.count(below: eviction, in: modelled) + Self.count(below: Double(entries), in: distances)
      return Point(scale: scale, capacity: entries, hitRatio: Swift.min(Swift.max(hits / Double(samples), 0), 1))
    }
  }

  /// How long an entry stays in an LRU cache of `entries` (in one segment's share), by the
  /// average eviction time model: the time `T` at which the integral of P(reuse time > t) from 0
  /// reaches `entries`; a lookup whose reuse time is shorter hits. A bucket's reuse times count
  /// as spread evenly over it. Infinite when the integral never reaches `entries`: every reuse
  /// recorded hits.
  static func evictionTime(entries: Double, reuseTimes: [Int], samples: Int) -> Double {
    let total = Double(samples)
    var above = total  // samples whose reuse time is past the current bucket's start
    var remaining = entries
    for index in reuseTimes.indices {
      let count = Double(reuseTimes[index])
      let (lower, width) = ReuseHistogram.range(of: index)
      let start = above / total
      let drop = count / total
      let area = Double(width) * (start - drop / 2)
      if area >= remaining {
        // Where in the bucket the integral reaches `entries`: P falls linearly across it.
        guard drop != 0 else { return Double(lower) + remaining / start }
        let discriminant = Swift.max(start * start - 2 * drop * remaining / Double(width), 0)
        return Double(lower) + (start - discriminant.squareRoot()) * Double(width) / drop
      }
      remaining -= area
      above -= count
    }
    return .infinity
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
