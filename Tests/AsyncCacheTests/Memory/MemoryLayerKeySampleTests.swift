import AsyncCacheTesting
import Testing

@testable import AsyncCache

/// The hit-ratio curve's counted distances: the layer's spatial sample of keys (`KeySample`),
/// which counts the distinct keys of a watched lookup's window where the model would guess them.
@Suite("MemoryLayer hit-ratio curve: counted distances")
struct MemoryLayerKeySampleTests {
  typealias Curve = MemoryLayerHitRatioCurveTests

  /// Every key sampled, each standing for one, the count used from `countedFrom` keys: distances
  /// are exact in a small layer.
  static func everyKey(countedFrom: Int) -> KeySample.Parameters {
    .init(minimumScale: 1, countedFrom: countedFrom, countedFromCapacities: 0)
  }

  /// How many values `histogram` recorded in the bucket of `value` (0 before its first record,
  /// when it has no buckets).
  static func recorded(_ value: Int, in histogram: ReuseHistogram) -> UInt32 {
    let bucket = ReuseHistogram.bucket(of: value)
    return bucket < histogram.counts.count ? histogram.counts[bucket] : 0
  }

  static func layer(
    countLimit: Int, segments: Int = 1, countedFrom: Int = 1, seed: UInt64 = 1
  ) throws -> MemoryLayer<Int, Int> {
    try MemoryLayer(
      configuration: .init(countLimit: countLimit, segmentCount: segments, evictionPolicy: .leastRecentlyUsed),
      admissionSeed: seed, allowsReferee: true, keySampling: everyKey(countedFrom: countedFrom))
  }

  /// Feeds `sample` `steps` accesses, `fresh` in ten of them a new id and the rest one of
  /// `recurring` ids, checking every so often, at starts `back` positions ago, its count of
  /// keys since against the latest access of every id; returns the checks made and the
  /// mismatches.
  static func checkCounts(
    of sample: KeySample, steps: Int, recurring: UInt64, fresh: Int, backs: [Int], checkEvery: Int, seed: UInt64
  ) -> (checks: Int, mismatches: [String]) {
    var draws = SplitMix64(seed: seed)
    var latest: [UInt64: Int] = [:]
    var (checks, mismatches) = (0, [String]())
    for step in 0..<steps {
      let id =
        Int.random(in: 0..<10, using: &draws) < fresh
        ? UInt64(10_000_000 + step) : UInt64.random(in: 0..<recurring, using: &draws)
      if sample.position != step { mismatches.append("position \(sample.position) at step \(step)") }
      sample.access(id)
      latest[id] = step
      guard step % checkEvery == 0 else { continue }
      for back in backs where back <= step + 1 {
        let start = step + 1 - back
        let distinct = latest.values.count { $0 >= start }
        checks += 1
        if let counted = sample.keys(since: start) {
          if counted != distinct { mismatches.append("since \(start) at \(step): \(counted), not \(distinct)") }
        } else if distinct < sample.horizon {
          mismatches.append("since \(start) at \(step): forgotten with \(distinct) keys since")
        }
      }
    }
    return (checks, mismatches)
  }

  @Test("the sample counts each key used since a position once, and forgets only what is past its horizon")
  func countsDistinctKeys() throws {
    // A capacity of 1,000 keeps 1.5 × 4,000 / 100 + 64 = 124 sampled keys past any window.
    let sample = KeySample(capacity: 1_000)
    let result = Self.checkCounts(
      of: sample, steps: 150_000, recurring: 300, fresh: 1, backs: [0, 1, 63, 64, 65, 511, 512, 513, 5_000, 60_000],
      checkEvery: 4_999, seed: 42)
    #expect(result.checks > 250)
    #expect(result.mismatches.isEmpty, "\(result.mismatches.prefix(5))")
    #expect(sample.keys(since: 0) == nil)
    let remembered = sample.state.withLock { $0.latest.count }
    #expect(remembered <= 5 * sample.horizon + 300, "\(remembered) keys remembered")
  }

  @Test("with a horizon of 60,000 keys, latest accesses move to the sparse positions, end there, and are forgotten")
  func sparsePositions() throws {
    // One key in 100 at a million entries, for a horizon of 60,064 keys.
    let sample = KeySample(
      capacity: 1_000_000, parameters: .init(minimumScale: 100, countedFrom: 2_048, countedFromCapacities: 0))
    let result = Self.checkCounts(
      of: sample, steps: 300_000, recurring: 40_000, fresh: 2, backs: [1, 1_000, 50_000, 100_000, 150_000, 300_000],
      checkEvery: 19_997, seed: 5)
    #expect(result.checks > 60)
    #expect(result.mismatches.isEmpty, "\(result.mismatches.prefix(5))")
    let (sparse, live, forgotten, remembered) = sample.state.withLock {
      ($0.sparse.count, $0.sparseLiveCount, $0.forgottenBefore, $0.latest.count)
    }
    #expect(sparse > 0 && live > 0 && live <= sparse, "\(live) live of \(sparse) sparse positions")
    #expect(forgotten > 0, "nothing was forgotten")
    #expect(remembered <= 5 * sample.horizon, "\(remembered) keys remembered")
  }

  @Test("the hashed table agrees with a dictionary through inserts, replacements, removals, growth and keeps")
  func watchTableMatchesDictionary() {
    var table = WatchTable()
    var reference: [Int: ReuseSampler.Watch] = [:]
    var draws = SplitMix64(seed: 7)
    var mismatches = 0
    for step in 0..<100_000 {
      // Hashes from a small range collide on their home slots; some are negative.
      let hash = Int.random(in: -300..<300, using: &draws) &* 0x1_0000_0001
      switch Int.random(in: 0..<10, using: &draws) {
      case 0..<5:
        let watch = ReuseSampler.Watch(time: step, keys: step / 2)
        if table.insert(watch, forHash: hash)?.time != reference.updateValue(watch, forKey: hash)?.time {
          mismatches += 1
        }
      case 5..<9:
        if table.remove(hash: hash)?.time != reference.removeValue(forKey: hash)?.time { mismatches += 1 }
      default:
        if step % 1_000 == 0 {
          table.keep { $0.time % 3 != 0 }
          reference = reference.filter { $0.value.time % 3 != 0 }
        }
      }
      if table.count != reference.count { mismatches += 1 }
      if step % 97 == 0 {
        for probe in -300..<300 {
          let probed = probe &* 0x1_0000_0001
          if table[hash: probed]?.time != reference[probed]?.time { mismatches += 1 }
        }
      }
    }
    #expect(mismatches == 0)
    #expect(table.values.map(\.time).sorted() == reference.values.map(\.time).sorted())
  }

  @Test("a few keys used for ever keep the sample small, and a key used once long ago is still counted")
  func fewKeysForEver() {
    let sample = KeySample(capacity: 1_000)  // a horizon of 124 keys
    sample.access(1_000_000)  // once, at position 0
    for step in 0..<1_000_000 { sample.access(UInt64(step % 100)) }
    #expect(sample.keys(since: 0) == 101)
    #expect(sample.keys(since: 1) == 100)
    #expect(sample.keys(since: sample.position - 50) == 50)
    let (words, sparse, latest) = sample.state.withLock { ($0.marks.count, $0.sparse.count, $0.latest.count) }
    #expect(words <= 64, "\(words) words of marks")
    #expect(sparse <= sample.horizon && latest == 101, "\(sparse) sparse positions, \(latest) keys")
  }

  @Test("segments hit from several tasks at once share the sample, and the curve still adds up")
  func concurrentSegments() async throws {
    let layer = try Self.layer(countLimit: 2_000, segments: 4, countedFrom: 64)
    await withTaskGroup(of: Void.self) { group in
      for task in 0..<4 {
        group.addTask {
          var draws = SplitMix64(seed: UInt64(task))
          for _ in 0..<20_000 where !Task.isCancelled {
            let key = Int.random(in: 0..<6_000, using: &draws)
            if layer.value(for: key) == nil { try? layer.insert(key, for: key) }
          }
        }
      }
      // Read while they run.
      group.addTask { _ = layer.statistics.hitRatioCurve }
    }
    let curve = try #require(layer.statistics.hitRatioCurve)
    let samplers = (0..<4).map { index in layer.store.segments.withLock(index) { $0.sampler } }
    // Every watch is resolved (by its reuse time or its count), waiting or dropped, once.
    let accounted = samplers.reduce(0) {
      $0 + $1.histogram.total + $1.countedReuseTimes.total + $1.watches.count + $1.dropped
    }
    #expect(accounted == curve.sampledLookups)
    #expect(samplers.allSatisfy { $0.countedReuseTimes.total == $0.distances.total })
    #expect(samplers.reduce(0) { $0 + $1.distances.total } > 0, "no window was counted")
  }

  @Test("after enough watches the sampling thins, each watch weighing the lookups it stands for")
  func thinning() throws {
    var sampler = ReuseSampler()
    _ = sampler.start(seed: 9, segments: 1)
    sampler.thinningStart = 10
    var levels: [Int] = []
    for watch in 0..<80 {
      #expect(sampler.gapWeight == 1 << sampler.level)
      sampler.watch(hash: watch, at: watch * 1_000, keys: 0, entries: 1_000)
      let gap = sampler.nextGap()
      #expect((52 << sampler.level)...(152 << sampler.level) ~= gap, "gap \(gap) at level \(sampler.level)")
      levels.append(sampler.level)
    }
    // Up at 10 watches, then at 30 and 70: 2^(level + 1) - 1 times the start.
    #expect(levels.firstIndex(of: 1) == 9 && levels.firstIndex(of: 2) == 29 && levels.firstIndex(of: 3) == 69)
    // The watches begun at level 0 weigh 1; the first after the rise, 1 (its gap was drawn
    // before), the next 2.
    #expect(sampler.watches[hash: 9]?.weight == 1 && sampler.watches[hash: 10]?.weight == 2)
    #expect(sampler.watched == 80)
  }

  @Test("a curve that thinned while the workload changed still weighs each phase by its lookups")
  func thinnedCurveIsUnbiased() throws {
    // 36k lookups looping over 300 keys, then 72k over 1,500: LRU hits the first phase from
    // 300 entries, the second from 1,500. Thinning from 30 watches: most of the first phase is
    // watched at 1 in 102 or 204, the second at 1 in 408 or 816.
    var keys: [Int] = []
    for _ in 0..<120 { keys += 0..<300 }
    for _ in 0..<48 { keys += 10_000..<11_500 }
    let layer = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 500, segmentCount: 1, evictionPolicy: .leastRecentlyUsed, admissionSeed: 5))
    layer.store.segments.withLock(0) { $0.sampler.thinningStart = 30 }
    for key in keys where !Task.isCancelled { try Curve.access(key, in: layer) }
    let sampler = layer.store.segments.withLock(0) { $0.sampler }
    #expect(sampler.level >= 2)
    let curve = try #require(layer.statistics.hitRatioCurve)
    #expect(curve.sampledLookups == sampler.watched)
    let exact = Curve.exactLRU(keys, capacities: curve.points.map(\.capacity))
    for (point, lru) in zip(curve.points, exact) {
      #expect(abs(point.hitRatio - lru) < 0.08, "at \(point.capacity) entries: \(point.hitRatio) vs \(lru)")
    }
  }

  @Test("a loop over a few more keys than the horizon, every older access dead at compaction, is counted")
  func loopJustPastTheHorizon() throws {
    let sample = KeySample(capacity: 1_000)  // a horizon of 124 keys
    for step in 0..<5_000 { sample.access(UInt64(step % 130)) }
    #expect(sample.keys(since: sample.position - 130) == 130)
    #expect(sample.keys(since: sample.position - 1) == 1)
  }

  @Test("thinned watches that are dropped, abandoned or still waiting are weighed as the resolved ones are")
  func thinnedWatchesAreAccountedByWeight() throws {
    let layer = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 64, segmentCount: 1, evictionPolicy: .leastRecentlyUsed, admissionSeed: 3))
    layer.store.segments.withLock(0) { $0.sampler.thinningStart = 10 }
    // A scan watches keys that never come back (the oldest dropped past the limit), a loop
    // watches keys that do, and removals abandon some.
    var begun = 0
    for round in 0..<40 where !Task.isCancelled {
      for key in 0..<2_000 { try Curve.access(round.isMultiple(of: 2) ? key : 1_000_000 * round + key, in: layer) }
      for key in stride(from: 0, to: 64, by: 7) { layer.removeValue(for: key) }
      begun = layer.store.segments.withLock(0) { $0.sampler.watched }
    }
    let sampler = layer.store.segments.withLock(0) { $0.sampler }
    #expect(sampler.level >= 3, "level \(sampler.level) after \(begun) watches")
    #expect(sampler.dropped > 0)
    // Each watch weighs the gap that chose it: the weights add up to about the lookups / 102.
    let weighed = sampler.histogram.total + sampler.countedReuseTimes.total + sampler.pendingWeight + sampler.dropped
    let lookups = 40 * 2_000
    #expect(abs(Double(weighed) / Double(lookups) * 102 - 1) < 0.15, "\(weighed) weighed over \(lookups) lookups")
    #expect(weighed > sampler.watched * 2, "weights above 1 were counted as 1")
  }

  @Test("a popular sampled key is recorded once every 64 sampled accesses, and the counts still follow LRU")
  func popularSampledKey() throws {
    // A loop over 3,000 keys with a hot key looked up between any two, every key sampled and
    // every window counted: LRU hits the hot key from 2 entries, the loop from 3,001.
    let layer = try Self.layer(countLimit: 1_000)
    let sample = try #require(layer.store.keySample)
    let hot = -1
    var trace: [Int] = []
    for _ in 0..<20 {
      for key in 0..<3_000 { trace += [key, hot] }
    }
    for key in trace where !Task.isCancelled { try Curve.access(key, in: layer) }
    // 60,000 accesses of the loop's keys, and of the hot key's 60,000 about one in 63 (and one
    // more each time it takes its slot back from a key of the loop: a few).
    #expect((60_000...61_100).contains(sample.position), "\(sample.position) positions for \(trace.count) lookups")
    let curve = try #require(layer.statistics.hitRatioCurve)
    let scales = [0.25, 2, 4]
    let exact = Curve.exactLRU(trace, capacities: scales.map { Int($0 * 1_000) })
    for (scale, exact) in zip(scales, exact) {
      let estimate = try #require(curve.hitRatio(atScale: scale))
      #expect(abs(estimate - exact) < 0.03, "\(scale)×: \(estimate), LRU \(exact)")
    }
  }

  @Test(
    "a segment records a popular sampled key about once every 64 positions, however many keys share its slot",
    arguments: ["alone", "one cold key between", "two cold keys between", "two popular keys"])
  func recordingSkipsRepeats(pattern: String) {
    // Mixed hashes that are all 0 modulo 8: one slot. `cold` is a key never seen again.
    let (popular, other) = (UInt64(8), UInt64(16))
    var nextCold = UInt64(24)
    func cold() -> UInt64 {
      defer { nextCold += 8 }
      return nextCold
    }
    let sample = KeySample(capacity: 1_000)
    var sampler = ReuseSampler()
    var others = 0  // the accesses of keys other than `popular`, each recorded
    for _ in 0..<10_000 {
      sampler.recordAccess(popular, in: sample)
      switch pattern {
      case "alone": break
      case "one cold key between":
        sampler.recordAccess(cold(), in: sample)
        others += 1
      case "two cold keys between":
        sampler.recordAccess(cold(), in: sample)
        sampler.recordAccess(cold(), in: sample)
        others += 2
      default:
        sampler.recordAccess(other, in: sample)  // the second popular key of the slot
        others += 1
      }
    }
    // Every other access advances the position by one; `popular` is recorded once every 64
    // positions (its own record one of them), or once at all when it is alone (the position
    // does not move). Recorded at each of its lookups, it would be 10,000.
    let popularRecords = sample.position - others
    let expected = pattern == "alone" ? 1...1 : (others / 64)...(others / 63 + 3)
    #expect(expected.contains(popularRecords), "\(popularRecords) records of the popular key")
  }

  @Test("beyond 131,072 entries the sample thins with the capacity, and its horizon stays near 7,900 keys")
  func sampleThinsWithCapacity() {
    let standard = KeySample.Parameters.standard
    for (capacity, scale) in [(51_200, 100), (131_072, 100), (131_073, 101), (200_000, 153), (1_000_000, 763)] {
      let sample = KeySample(capacity: capacity)
      #expect(sample.scale == scale, "capacity \(capacity)")
      #expect(sample.threshold == UInt64.max / UInt64(scale), "capacity \(capacity)")
      // 2,048 sampled keys stand for 1.5625 capacities once the scale grows.
      if scale > 100 {
        #expect(Double(2_048 * (scale - 1)) < 1.5625 * Double(capacity), "capacity \(capacity)")
        #expect(Double(2_048 * scale) >= 1.5625 * Double(capacity), "capacity \(capacity)")
      }
      #expect(sample.horizon == standard.horizon(capacity: capacity))
    }
    for capacity in [131_072, 200_000, 1_000_000, 10_000_000, 1 << 40] {
      #expect((7_800...8_000).contains(KeySample(capacity: capacity).horizon), "capacity \(capacity)")
    }
    #expect(KeySample(capacity: .max).scale == 1 << 30, "the scale is capped, and does not trap")
    // The keys sampled are 1 in `scale`: over 2M hashes, 13,072 expected at 1 in 153.
    let threshold = KeySample(capacity: 200_000).threshold
    let sampled = (0..<2_000_000).count { KeySample.mixed($0.hashValue) < threshold }
    #expect(abs(Double(sampled) / (2_000_000 / 153) - 1) < 0.05, "\(sampled) sampled")
  }

  @Test("a large layer's sample remembers at most about 17,000 keys in under 2 MB, even under a scan")
  func sampleMemoryUnderScan() {
    let sample = KeySample(capacity: 10_000_000)
    var (mostKeys, mostBytes) = (0, 0)
    // A scan: every access a key never seen before, for several horizons.
    for key in 0..<UInt64(45_000) where !Task.isCancelled {
      sample.access(key &* 0x9E37_79B9_7F4A_7C15)
      guard key % 61 == 0 else { continue }
      let (keys, bytes) = sample.state.withLock { state in
        (
          state.latest.count,
          state.latest.slots.capacity * MemoryLayout<HashedTable<LatestAccess>.Slot>.stride
            + state.marks.capacity * 8 + state.blockCounts.capacity * 4 + state.keysByPosition.capacity * 8
            + state.sparse.capacity * MemoryLayout<KeySampleState.Sparse>.stride + state.sparseLive.capacity * 4
        )
      }
      (mostKeys, mostBytes) = (Swift.max(mostKeys, keys), Swift.max(mostBytes, bytes))
    }
    #expect(mostKeys >= sample.horizon && mostKeys <= 17_500, "\(mostKeys) keys")
    #expect(mostBytes <= 2_000_000, "\(mostBytes) bytes")
  }

  @Test("a layer keeps the sample from a count limit of 51,200 entries, and not when bounded by cost or off")
  func whichLayersSample() throws {
    func sample(_ configuration: MemoryLayer<Int, Int>.Configuration) throws -> KeySample? {
      try MemoryLayer<Int, Int>(configuration: configuration).store.keySample
    }
    #expect(KeySample.Parameters.standard.minimumCapacity == 51_200)
    #expect(try sample(.init(countLimit: 51_200)) != nil)
    #expect(try sample(.init(countLimit: 51_199)) == nil)
    #expect(try sample(.init(countLimit: 100_000, estimatesHitRatioCurve: false)) == nil)
    #expect(try sample(.init(countLimit: 100_000, costLimit: 1 << 30, cost: { $0 })) == nil)
    #expect(try sample(.init()) == nil)
  }

  @Test("a window of enough sampled keys is recorded by its distinct keys; a shorter one by its reuse time")
  func windowIsCountedOrModelled() throws {
    for countedFrom in [1, 3, 4] {
      let layer = try Self.layer(countLimit: 100, countedFrom: countedFrom)
      Curve.watch(after: .max, in: layer)
      Curve.watch(after: 1, in: layer)
      // Key 0 watched; then 5 lookups of 3 keys; then key 0 again.
      for key in [0, 1, 2, 1, 2, 3, 0] { try Curve.access(key, in: layer) }
      let sampler = layer.store.segments.withLock(0) { $0.sampler }
      #expect(sampler.watches.isEmpty)
      if countedFrom <= 3 {
        #expect(sampler.countedReuseTimes.total == 1)
        #expect(Self.recorded(5, in: sampler.countedReuseTimes) == 1)
        #expect(sampler.distances.total == 1)
        #expect(Self.recorded(3, in: sampler.distances) == 1)
        #expect(sampler.histogram.total == 0)
        // A distance of 3: an LRU cache of 4 entries or more hits; every size here does.
        let curve = try #require(layer.statistics.hitRatioCurve)
        #expect(curve.points.allSatisfy { $0.hitRatio == 1 }, "\(curve.points)")
      } else {
        #expect(sampler.distances.total == 0)
        #expect(sampler.countedReuseTimes.total == 0)
        #expect(sampler.histogram.total == 1)
        #expect(Self.recorded(5, in: sampler.histogram) == 1)
      }
    }
  }

  @Test("a window the sample no longer reaches is past every size: a miss at 4×")
  func forgottenWindowMissesEverywhere() throws {
    // 100 entries: the sample keeps 1.5 × 400 + 64 = 664 keys past a window.
    let layer = try Self.layer(countLimit: 100)
    let horizon = try #require(layer.store.keySample).horizon
    Curve.watch(after: .max, in: layer)
    Curve.watch(after: 1, in: layer)
    try Curve.access(0, in: layer)
    Curve.watch(after: .max, in: layer)
    // Enough new keys that the sample compacts past the watch's start.
    for key in 1...70_000 where !Task.isCancelled { try Curve.access(key, in: layer) }
    #expect(try #require(layer.store.keySample).keys(since: 0) == nil)
    try Curve.access(0, in: layer)
    let sampler = layer.store.segments.withLock(0) { $0.sampler }
    #expect(sampler.distances.total == 1)
    #expect(sampler.distances.counts.last == 1, "recorded past every bucket: more than \(horizon) keys")
    let curve = try #require(layer.statistics.hitRatioCurve)
    #expect(curve.points.allSatisfy { $0.hitRatio == 0 }, "\(curve.points)")
  }

  @Test(
    "where windows of one length hold very different keys, counted distances follow exact LRU and the model does not",
    arguments: [1, 4])
  func phasedTrace(segments: Int) throws {
    // Phase one loops over 1,500 keys: a reuse 1,499 lookups later, 1,499 keys between. Phase
    // two loops over 400 keys, each looked up 4 times in a row: a reuse 1,597 lookups later has
    // 399 keys between. The model, which gives windows of one length one count of keys, cannot
    // tell them apart. (Distances clear of the curve's sizes: the histogram's buckets are an
    // eighth of their values wide.)
    var keys: [Int] = []
    for _ in 0..<40 { keys += 0..<1_500 }
    for _ in 0..<40 {
      for key in 10_000..<10_400 { keys += [key, key, key, key] }
    }
    let counted = try Self.layer(countLimit: 500, segments: segments, countedFrom: 256)
    let modelOnly = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 500, segmentCount: segments, evictionPolicy: .leastRecentlyUsed),
      admissionSeed: 1, allowsReferee: true)
    #expect(modelOnly.store.keySample == nil)
    for key in keys where !Task.isCancelled {
      try Curve.access(key, in: counted)
      try Curve.access(key, in: modelOnly)
    }
    let curve = try #require(counted.statistics.hitRatioCurve)
    let modelled = try #require(modelOnly.statistics.hitRatioCurve)
    let exact = Curve.exactLRU(keys, capacities: curve.points.map(\.capacity))
    // About 1,200 lookups watched: within 6 points (4 standard deviations of the sample).
    for (point, lru) in zip(curve.points, exact) {
      #expect(abs(point.hitRatio - lru) < 0.06, "at \(point.capacity) entries: \(point.hitRatio) vs \(lru)")
    }
    // At 1,000 entries LRU hits phase two and misses phase one's loop; the model, which sees
    // reuses of about 1,500 lookups in both, hits both.
    let atTwice = try #require(modelled.hitRatio(atScale: 2))
    #expect(abs(atTwice - exact[3]) > 0.2, "the model at 1,000 entries: \(atTwice) vs \(exact[3])")
  }
}
