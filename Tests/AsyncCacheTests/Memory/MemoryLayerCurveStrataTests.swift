import AsyncCacheTesting
import Testing

@testable import AsyncCache

/// The hit-ratio curve's strata: each watch is weighed by whether the lookup that ended it was a
/// repeated hit (a hit on an entry asked for or hit before), so that the sample's share of them
/// is the share the layer counted (`HitRatioCurve.StratumWeights`).
@Suite("MemoryLayer hit-ratio curve strata")
struct MemoryLayerCurveStrataTests {
  typealias Curve = MemoryLayerHitRatioCurveTests

  /// The counts of segment 0's sampler: lookups, misses, hits on entries inserted unasked for,
  /// and repeated hits.
  static func counts(of layer: MemoryLayer<Int, Int>) -> (
    lookups: UInt64, misses: UInt64, unasked: UInt64, repeated: UInt64
  ) {
    layer.store.segments.withLock(0) { segment in
      let sampler = segment.sampler
      return (
        sampler.lookups(countdown: segment.sampleCountdown), sampler.misses, sampler.unaskedHits,
        sampler.repeatedHits(countdown: segment.sampleCountdown)
      )
    }
  }

  @Test("the weights give each stratum the layer's share, and leave a thin or empty stratum alone")
  func weights() throws {
    typealias Weights = HitRatioCurve.StratumWeights
    // The layer: 60% repeated hits; the sample: 50%.
    let weights = Weights(
      lookups: 10_000, repeatedHits: 6_000, samples: 100, repeatedSamples: 50, watches: 100, repeatedWatches: 50)
    #expect(abs(weights.repeated - 1.2) < 1e-12 && abs(weights.other - 0.8) < 1e-12)
    // Weighed, the sample's share is the layer's, and its total is unchanged.
    let weighed = weights.weigh([30, 70], repeated: [20, 30])
    try #require(weighed.count == 2)
    #expect(abs(weighed[0] - (0.8 * 10 + 1.2 * 20)) < 1e-12 && abs(weighed[1] - (0.8 * 40 + 1.2 * 30)) < 1e-12)
    #expect(abs(weighed.reduce(0, +) - 100) < 1e-9)
    // A count below its repeated part (which the sampler's halving together prevents) weighs as none.
    #expect(weights.weigh([1], repeated: [3]) == [3 * 1.2])
    // Unweighed, the counts are all the reuses, as they are.
    #expect(Weights.unweighed.weigh([1, 5], repeated: [3, 2]) == [1, 5])
    // A weight over 5, or under a fifth, says the sample is not of the layer's lookups.
    #expect(
      Weights(
        lookups: 1_000, repeatedHits: 900, samples: 1_000, repeatedSamples: 150, watches: 1_000, repeatedWatches: 150)
        == .unweighed)

    for (repeatedWatches, watches) in [(31, 100), (69, 100), (0, 100), (100, 100)] {
      let thin = Weights(
        lookups: 10_000, repeatedHits: 6_000, samples: 100, repeatedSamples: Double(repeatedWatches),
        watches: watches, repeatedWatches: repeatedWatches)
      #expect(thin == .unweighed, "\(repeatedWatches) of \(watches) watches repeated")
    }
    for repeatedHits in [0.0, 10_000] {
      let pure = Weights(
        lookups: 10_000, repeatedHits: repeatedHits, samples: 100, repeatedSamples: 50, watches: 100,
        repeatedWatches: 50)
      #expect(pure == .unweighed, "the layer counted \(repeatedHits) repeated hits of 10,000")
    }
    #expect(
      Weights(lookups: 0, repeatedHits: 0, samples: 100, repeatedSamples: 50, watches: 100, repeatedWatches: 50)
        == .unweighed)
  }

  @Test(
    "a hit is repeated when its entry filled a miss of its key or was hit before; not the first hit of one inserted unasked"
  )
  func repeatedHitsAreCounted() throws {
    let layer = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 1_000, segmentCount: 1, evictionPolicy: .leastRecentlyUsed, admissionSeed: 1))
    // Half the keys looked up, then inserted (a miss's fill); the other half inserted unasked.
    for key in 0..<50 { try Curve.access(key, in: layer) }
    for key in 50..<100 { try layer.insert(key, for: key) }
    for _ in 0..<3 {
      for key in 0..<100 { #expect(layer.value(for: key) == key) }
    }
    var counts = Self.counts(of: layer)
    #expect(counts.lookups == 350 && counts.misses == 50)
    #expect(counts.unasked == 50, "the first hit of each key inserted unasked")
    #expect(counts.repeated == 250)

    // Removed and inserted again unasked: its next hit is not repeated, the one after is.
    layer.removeValue(for: 60)
    try layer.insert(60, for: 60)
    #expect(layer.value(for: 60) == 60)
    #expect(layer.value(for: 60) == 60)
    // Removed, missed, filled: asked for.
    layer.removeValue(for: 10)
    try Curve.access(10, in: layer)
    #expect(layer.value(for: 10) == 10)
    counts = Self.counts(of: layer)
    #expect(counts.lookups == 354 && counts.misses == 51)
    #expect(counts.unasked == 51 && counts.repeated == 252)
    #expect(layer.store.segments.withLock(0) { segment in (0..<100).allSatisfy { !segment.nodeIsUnasked($0) } })
  }

  @Test(
    "with every lookup watched, the watches a repeated hit ended are the layer's repeated hits, whatever wrote, removed or expired the entries"
  )
  func everyLookupWatched() throws {
    let clock = ManualClock()
    let layer = try MemoryLayer<Int, Int>(
      configuration: .init(
        countLimit: 1_000, segmentCount: 1, evictionPolicy: .leastRecentlyUsed, admissionSeed: 4, clock: clock))
    func access(_ key: Int) throws {
      Curve.watch(after: 1, in: layer)
      if layer.value(for: key) == nil { try layer.insert(key, for: key) }
    }
    // At most 40 + 12 watches wait at once (one per key, and a burst's), below the 65 a segment
    // of up to 256 entries keeps: none is dropped for room, which the equality below needs.
    var draws = SplitMix64(seed: 5)
    for step in 0..<4_000 where !Task.isCancelled {
      let key = Int.random(in: 0..<40, using: &draws)
      switch Int.random(in: 0..<20, using: &draws) {
      case 0: try layer.insert(key, for: key)  // written before it is read: unasked
      case 1: layer.removeValue(for: key)
      case 2: try layer.insert(key, for: key, timeToLive: .seconds(1))
      case 3: clock.advance(by: .milliseconds(300))
      default: try access(key)
      }
      if step == 2_000 { layer.removeAll() }
      // Now and then, more misses at once than the segment remembers, then their fills, a hit
      // on each (the first 4 unasked), and their removal (which ends the watches the hits began).
      if step % 500 == 0 {
        let burst = (1_000..<1_012).map { $0 + step }
        for key in burst {
          Curve.watch(after: 1, in: layer)
          _ = layer.value(for: key)
        }
        for key in burst { try layer.insert(key, for: key) }
        for key in burst { try access(key) }
        for key in burst { layer.removeValue(for: key) }
      }
    }
    let sampler = layer.store.segments.withLock(0) { $0.sampler }
    let counts = Self.counts(of: layer)
    #expect(sampler.watched == Int(counts.lookups), "every lookup watched")
    #expect(counts.unasked > 30 && counts.repeated > 1_000 && counts.misses > 100, "\(counts)")
    #expect(UInt64(sampler.repeatedWatches) == counts.repeated)
  }

  @Test("the histograms halve together: repeated reuses stay the same share of all reuses past 2^32 in a bucket")
  func histogramsHalveTogether() throws {
    var sampler = ReuseSampler()
    _ = sampler.start(seed: 1, segments: 1)
    sampler.thinningStart = .max
    for index in 0..<6_000 {
      sampler.gapWeight = 1 << 20
      sampler.watch(hash: index + 1, at: 10 * index, keys: 0, entries: 1 << 24)
      sampler.resolve(hash: index + 1, at: 10 * index + 6, sample: nil, repeated: index % 3 == 0)
    }
    let bucket = ReuseHistogram.bucket(of: 5)
    try #require(
      sampler.histogram.counts.indices.contains(bucket) && sampler.repeated.modelled.counts.indices.contains(bucket))
    let (all, repeated) = (Double(sampler.histogram.counts[bucket]), Double(sampler.repeated.modelled.counts[bucket]))
    // 6,000 reuses of 2^20: the bucket halved once, before the 4,096th, which 1,905 more followed.
    #expect(all == 4_095 * Double(1 << 19) + 1_905 * Double(1 << 20), "\(all)")
    #expect(abs(repeated / all - 1.0 / 3) < 0.01, "\(repeated) of \(all)")
  }

  @Test("an insert fills one of the segment's latest 8 misses; an older miss is forgotten")
  func recentMissesAreBounded() throws {
    let layer = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 1_000, segmentCount: 1, evictionPolicy: .leastRecentlyUsed, admissionSeed: 1))
    // Nine misses, then their nine fills: the first miss is no longer remembered.
    for key in 0..<9 { #expect(layer.value(for: key) == nil) }
    for key in 0..<9 { try layer.insert(key, for: key) }
    let unasked = layer.store.segments.withLock(0) { segment in (0..<9).filter { segment.nodeIsUnasked($0) } }
    #expect(unasked == [0])
    // A fill takes its miss: a second insert of the key, removed in between, is unasked.
    #expect(layer.value(for: 100) == nil)
    try layer.insert(100, for: 100)
    layer.removeValue(for: 100)
    try layer.insert(100, for: 100)
    #expect(layer.store.segments.withLock(0) { $0.nodeIsUnasked(100) })
  }

  @Test("through a LoadingCache, every load fills the request's miss: no hit is unasked")
  func loadsAreAskedFor() async throws {
    let memory = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 1_000, segmentCount: 1, admissionSeed: 2))
    let cache = try LoadingCache(layers: [memory], origin: ClosureFetcher { (key: Int) in key })
    for _ in 0..<2 {
      for key in 0..<300 { #expect(try await cache.value(for: key) == key) }
    }
    let counts = Self.counts(of: memory)
    #expect(counts.lookups == 600 && counts.misses == 300, "the requests, not the loads' second looks")
    #expect(counts.unasked == 0 && counts.repeated == 300)
  }

  @Test("a sample that drew mostly a hot key's lookups is weighed back to the layer's counts")
  func skewedSampleIsWeighedBack() throws {
    let layer = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 600, segmentCount: 1, evictionPolicy: .leastRecentlyUsed, admissionSeed: 3))
    // A loop over 1,000 keys with a hot key between every two: an LRU cache of 2 to 999 entries
    // hits the hot key only, half the lookups.
    let hot = 1_000_000
    var keys: [Int] = []
    for _ in 0..<20 {
      for key in 0..<1_000 { keys += [key, hot] }
    }
    // The test chooses the watched lookups: 120 of the hot key's and 40 of the loop's, spread
    // over the trace (a random sample would draw about as many of each).
    let watched = Set((0..<120).map { 200 + 300 * $0 + 1 } + (0..<40).map { 200 + 900 * $0 })
    Curve.watch(after: .max, in: layer)
    for (index, key) in keys.enumerated() {
      if watched.contains(index) { Curve.watch(after: 1, in: layer) }
      try Curve.access(key, in: layer)
      if watched.contains(index) { Curve.watch(after: .max, in: layer) }
    }
    let counts = Self.counts(of: layer)
    #expect(abs(Double(counts.repeated) / Double(counts.lookups) - 0.5) < 0.001, "the hot key's hits")
    let weighed = try #require(layer.store.hitRatioCurve(capacity: 600))
    let unweighed = try #require(layer.store.hitRatioCurve(capacity: 600, weighingStrata: false))
    let exact = Curve.exactLRU(keys, capacities: weighed.points.map(\.capacity))
    for ((point, raw), lru) in zip(zip(weighed.points, unweighed.points), exact) where point.capacity < 1_000 {
      #expect(abs(lru - 0.5) < 0.01)
      #expect(abs(point.hitRatio - lru) < 0.01, "weighed at \(point.capacity): \(point.hitRatio) vs \(lru)")
      // Unweighed, 3 watches in 4 hit; at 600 entries the model even keeps the loop's keys.
      #expect(raw.hitRatio > 0.74, "unweighed at \(point.capacity): \(raw.hitRatio)")
    }
  }

  @Test("keys written before they are read: the first hits are unasked, and the curve stays within 3 points")
  func writeThroughStaysAccurate() throws {
    var draws = SplitMix64(seed: 21)
    let keys = (0..<200_000).map { _ in
      Int.random(in: 0..<100, using: &draws) < 80
        ? Int.random(in: 0..<2_000, using: &draws) : Int.random(in: 0..<20_000, using: &draws)
    }
    let layer = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 500, admissionSeed: 9))
    // Each key is written (inserted unasked) before its first read, as a write-through service
    // does; a later miss is filled.
    var written = Set<Int>()
    for key in keys {
      if written.insert(key).inserted { try layer.insert(key, for: key) }
      try Curve.access(key, in: layer)
    }
    let unasked = (0..<layer.store.segments.count).reduce(0) { total, index in
      total + layer.store.segments.withLock(index) { $0.sampler.unaskedHits }
    }
    #expect(unasked > 10_000, "most first reads hit the write")
    let curve = try #require(layer.statistics.hitRatioCurve)
    let exact = Curve.exactLRU(keys, capacities: curve.points.map(\.capacity))
    for (point, lru) in zip(curve.points, exact) {
      #expect(abs(point.hitRatio - lru) < 0.03, "at \(point.capacity) entries: \(point.hitRatio) vs \(lru)")
    }
  }
}

extension MemorySegment where Key == Int {
  /// Whether the node of `key` is ``MemoryNode/isUnasked``; `false` when absent.
  func nodeIsUnasked(_ key: Int) -> Bool {
    guard let slot = find(key, hash: key.hashValue) else { return false }
    return nodes[slot].isUnasked
  }
}
