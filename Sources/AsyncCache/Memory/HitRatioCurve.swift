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
/// traces guesses wrong. The watches are weighed so that the share of them whose key's next
/// lookup was a repeated hit (on an entry asked for or hit before) is the share of the layer's
/// lookups, which it counts exactly: the sample's luck of the draw moves the curve less. Over the
/// ARC paper's OLTP and P3 traces the curve stays within 2 points of an exact LRU simulation at
/// every size (the `memory.curve` benchmark prints both).
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
    var reuseTimes: [Double]
    var modelled: [Double]

    init(share: Double, reuseTimes: [Double], modelled: [Double]) {
      self.share = share
      self.reuseTimes = reuseTimes
      self.modelled = modelled
    }

    init(share: Double, reuseTimes: [Int], modelled: [Int]) {
      self.init(share: share, reuseTimes: reuseTimes.map(Double.init), modelled: modelled.map(Double.init))
    }
  }

  /// The curve for a layer of `capacity` entries, from its `segments`' reuse times, the
  /// `distances` counted in the layer's ``KeySample`` (in keys of the layer), and the watches
  /// that ended without a reuse (dropped, or still waiting: counted as never reused), each count
  /// weighed by the lookups its watch stands for; `sampledLookups` watches in all.
  ///
  /// A segment's reuse times are in its own lookups: divided by its share, they are in the
  /// layer's. Shares differ when a segment holds popular keys (under a Zipf workload, from 0.6
  /// to 3 times the mean over 32 segments), so every segment's histogram is moved to the
  /// layer's time before the layer's eviction time is found. O(segments × buckets).
  init?(
    capacity: Int, segments: [SegmentReuse], distances: [Double], unresolved: Double, sampledLookups: Int
  ) {
    let samples = segments.reduce(unresolved) { $0 + $1.reuseTimes.reduce(0, +) }
    guard samples > 0, capacity > 0 else { return nil }
    self.sampledLookups = sampledLookups
    let segments = segments.filter { $0.share > 0 }
    var layerTimes = [Double](repeating: 0, count: ReuseHistogram.bucketCount)
    for segment in segments {
      for index in segment.reuseTimes.indices where segment.reuseTimes[index] != 0 {
        let (lower, width) = ReuseHistogram.span(of: index)
        Self.spread(
          segment.reuseTimes[index], over: lower / segment.share, to: (lower + width) / segment.share,
          into: &layerTimes)
      }
    }
    points = Self.scales.map { scale in
      let entries = Int(clamping: UInt64(Swift.min((Double(capacity) * scale).rounded(), 0x1p62)))
      let eviction = Self.evictionTime(entries: Double(entries), reuseTimes: layerTimes, samples: samples)
      var hits = Self.count(below: Double(entries), in: distances)
      for segment in segments { hits += Self.count(below: eviction * segment.share, in: segment.modelled) }
      return Point(scale: scale, capacity: entries, hitRatio: Swift.min(Swift.max(hits / samples, 0), 1))
    }
  }

  /// Adds `count` values spread evenly over `lower ..< upper` to `histogram` (counts by
  /// ``ReuseHistogram`` bucket), each bucket its share of the range; values past the last
  /// bucket's start count in the last.
  static func spread(_ count: Double, over lower: Double, to upper: Double, into histogram: inout [Double]) {
    let last = histogram.count - 1
    guard lower >= 0, upper.isFinite else { return }
    let lastStart = ReuseHistogram.span(of: last).lower
    guard lower < lastStart, upper > lower else {
      histogram[ReuseHistogram.bucket(of: lower)] += count
      return
    }
    var index = ReuseHistogram.bucket(of: lower)
    while index <= last {
      let (start, width) = ReuseHistogram.span(of: index)
      let end = index == last ? Double.infinity : start + width
      let overlap = Swift.min(upper, end) - Swift.max(lower, start)
      if overlap > 0 { histogram[index] += count * overlap / (upper - lower) }
      if end >= upper { break }
      index += 1
    }
  }

  /// How long an entry stays in an LRU cache of `entries`, by the average eviction time model:
  /// the time `T` at which the integral of P(reuse time > t) from 0 reaches `entries`; a lookup
  /// whose reuse time is shorter hits. `reuseTimes` counts by ``ReuseHistogram`` bucket (a
  /// bucket's values spread evenly over it) of `samples`, the rest never reused. Infinite when
  /// the integral never reaches `entries`: every reuse recorded hits.
  static func evictionTime(entries: Double, reuseTimes: [Double], samples: Double) -> Double {
    var above = samples  // samples whose reuse time is past the current bucket's start
    var remaining = entries
    for index in reuseTimes.indices {
      let count = reuseTimes[index]
      let (lower, width) = ReuseHistogram.span(of: index)
      let start = above / samples
      let drop = count / samples
      let area = width * (start - drop / 2)
      if area >= remaining {
        // Where in the bucket the integral reaches `entries`: P falls linearly across it, so
        // `start x - drop x² / (2 width) = remaining`, solved in the form that does not cancel
        // when `drop` is tiny next to `start`.
        let discriminant = Swift.max(start * start - 2 * drop * remaining / width, 0)
        return lower + 2 * remaining / (start + discriminant.squareRoot())
      }
      remaining -= area
      above -= count
    }
    return .infinity
  }

  /// The values of `histogram` (counts by ``ReuseHistogram`` bucket) below `limit`, a bucket's
  /// values spread evenly over it.
  static func count(below limit: Double, in histogram: [Double]) -> Double {
    var count = 0.0
    for index in histogram.indices where histogram[index] != 0 {
      let (lower, width) = ReuseHistogram.span(of: index)
      if lower >= limit { break }
      count += histogram[index] * Swift.min((limit - lower) / width, 1)
    }
    return count
  }
}

extension HitRatioCurve {
  /// What each watch weighs in the curve, by whether the lookup that ended it was a repeated
  /// hit (a hit on an entry asked for or hit before), so that the watches' share of repeated
  /// hits is the share the layer counted among all its lookups (post-stratification).
  ///
  /// Why: the curve's error is mostly which lookups the sample drew. On the ARC paper's OLTP
  /// trace, whose 9,000 watches are its whole sample, an estimate moved by up to 2.3 points from
  /// one run to the next, every size together. Whether a key's next lookup hits in an LRU cache
  /// of the curve's sizes goes with whether it hit in the layer: when the sample drew more
  /// lookups of that kind than the layer saw, it drew more short reuses too. The layer counts
  /// its repeated hits exactly (its lookups less its misses and the first hits of entries
  /// inserted unasked for), and each watch knows whether the lookup that ended it was one, so
  /// the two strata are weighed to the layer's counts. Over 100 replays of OLTP at each of 1k,
  /// 2k, 5k and 10k entries, the largest gap over the five sizes fell from 0.68–0.77 points on
  /// average to 0.50–0.59, and the worst from 1.4–2.2 to 1.2–1.3 (each replay read both ways).
  ///
  /// A repeated hit is a hit on an entry whose key's lookup before it the layer counted: the
  /// entry was inserted to fill a miss of its key (one of its segment's latest 8), or has been
  /// hit since it was inserted. The first hit of an entry inserted unasked for (written before
  /// it was read, restored) may be its key's first lookup, so it is not one, and one bit of the
  /// node marks such an entry (``MemoryNode/isUnasked``). Whether a fill is recognized changes
  /// how well the strata predict a reuse, not what they count: the watches and the layer's
  /// count use the same bit. A watch dropped before its key's next lookup came (the oldest of
  /// too many) counts as not ended by a repeated hit, which it seldom would have been.
  struct StratumWeights: Equatable {
    /// The weight of a watch whose next lookup was not a repeated hit, or is still awaited, or
    /// was dropped.
    var other: Double
    /// The weight of a watch whose next lookup was a repeated hit.
    var repeated: Double

    /// Every watch as it is.
    static let unweighed = StratumWeights(other: 1, repeated: 1)

    /// The fewest watches each stratum must hold to be weighed.
    static let minimumWatches = 32

    /// The weights allowed: a stratum weighed more than 5 times, or less than a fifth, says the
    /// sample is not of the lookups the layer counted. (At the edge: a layer whose lookups were
    /// 99.5% repeated hits, and a sample with 98%, weighs the other watches 0.25.)
    static let allowedWeights = 0.2...5.0

    /// Weights for `samples` (watches, each by the lookups it stands for), `repeatedSamples` of
    /// them ended by a repeated hit, given the layer's `lookups` of which `repeatedHits` were; ``unweighed`` unless each stratum has
    /// ``minimumWatches`` of `watches` (counted once each, `repeatedWatches` of them repeated),
    /// its share is neither 0 nor 1 on both sides, and both weights are ``allowedWeights``.
    init(
      lookups: Double, repeatedHits: Double, samples: Double, repeatedSamples: Double, watches: Int,
      repeatedWatches: Int
    ) {
      let share = lookups > 0 ? repeatedHits / lookups : 0
      let sampleShare = samples > 0 ? repeatedSamples / samples : 0
      guard repeatedWatches >= Self.minimumWatches, watches - repeatedWatches >= Self.minimumWatches,
        share > 0, share < 1, sampleShare > 0, sampleShare < 1
      else {
        self = .unweighed
        return
      }
      let (other, repeated) = ((1 - share) / (1 - sampleShare), share / sampleShare)
      guard Self.allowedWeights.contains(other), Self.allowedWeights.contains(repeated) else {
        self = .unweighed
        return
      }
      self.init(other: other, repeated: repeated)
    }

    init(other: Double, repeated: Double) {
      self.other = other
      self.repeated = repeated
    }

    /// `all` (counts by ``ReuseHistogram`` bucket), of which `repeated` were ended by a repeated
    /// hit, weighed.
    func weigh(_ all: [Double], repeated: [Double]) -> [Double] {
      guard self != .unweighed else { return all }
      // `repeated` is part of `all` bucket by bucket (the sampler halves them together).
      return zip(all, repeated).map { all, repeated in
        other * Swift.max(all - repeated, 0) + self.repeated * repeated
      }
    }
  }
}
