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
  func weights() {
    typealias Weights = HitRatioCurve.StratumWeights
    // The layer: 60% repeated hits; the sample: 50%.
    let weights = Weights(
      lookups: 10_000, repeatedHits: 6_000, samples: 100, repeatedSamples: 50, watches: 100, repeatedWatches: 50)
    #expect(abs(weights.repeated - 1.2) < 1e-12 && abs(weights.other - 0.8) < 1e-12)
    // Weighed, the sample's share is the layer's, and its total is unchanged.
    let weighed = weights.weigh([30, 70], repeated: [20, 30])
    #expect(abs(weighed[0] - (0.8 * 10 + 1.2 * 20)) < 1e-12 && abs(weighed[1] - (0.8 * 40 + 1.2 * 30)) < 1e-12)
    #expect(abs(weighed.reduce(0, +) - 100) < 1e-9)
    // A count below its repeated part (after a histogram halved alone) weighs as none.
    #expect(weights.weigh([1], repeated: [3]) == [3 * 1.2])

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
