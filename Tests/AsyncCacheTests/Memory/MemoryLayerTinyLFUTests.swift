import AsyncCacheTesting
import Testing

@testable import AsyncCache

/// `MemoryLayer` under W-TinyLFU: step for step the same as the reference model
/// (`WTinyLFUPolicy`), scan resistant, and sound through every operation of the layer.
@Suite struct MemoryLayerTinyLFUTests {
  /// The keys of each region of a one-segment layer, from LRU to MRU.
  private func regions(_ memory: MemoryLayer<Int, Int>) -> [SegmentRegion: [Int]] {
    memory.store.segments.withLock(0) { segment in
      Dictionary(uniqueKeysWithValues: SegmentRegion.allCases.map { ($0, segment.keys(in: $0)) })
    }
  }

  private func regions(_ policy: WTinyLFUPolicy<Int, SplitMix64>) -> [SegmentRegion: [Int]] {
    [
      .window: policy.keys(in: .window), .probation: policy.keys(in: .probation),
      .protected: policy.keys(in: .protected),
    ]
  }

  /// Replays random lookups (a miss inserts), rewrites with new costs and removals on a layer with
  /// one segment and on the model, and requires the same lists after every step.
  ///
  /// Both draw their rare random admissions from the same seed and key the sketch by the same
  /// 32 bits of the hash, so any difference is a bug, not chance.
  ///
  /// Comparing the lists settles the hits a segment keeps pending (see
  /// `MemorySegment.recordHit`), so the variants that compare only every 50 steps let runs of
  /// hits wait in the queue, fill it and settle it on their own, between the writes that settle
  /// it too: the lists must still come out exactly as if every move had been made at once.
  @Test(
    "one segment is exactly the reference model, step for step",
    arguments: [
      (seed: 1, adaptive: false, weighted: false, comparingEvery: 1),
      (seed: 2, adaptive: true, weighted: false, comparingEvery: 1),
      (seed: 3, adaptive: false, weighted: true, comparingEvery: 1),
      (seed: 4, adaptive: true, weighted: true, comparingEvery: 1),
      (seed: 5, adaptive: false, weighted: false, comparingEvery: 50),
      (seed: 6, adaptive: true, weighted: false, comparingEvery: 50),
      (seed: 7, adaptive: true, weighted: true, comparingEvery: 50),
    ] as [(seed: UInt64, adaptive: Bool, weighted: Bool, comparingEvery: Int)]
  )
  func matchesTheModel(seed: UInt64, adaptive: Bool, weighted: Bool, comparingEvery: Int) throws {
    var random = SeededGenerator(seed: seed)
    let capacity = weighted ? 400 : 60
    // Weighted: cost is the only bound; the count limit is far away and never binds.
    let weigh: @Sendable (Int) -> Int = { $0 % 20 }
    let cost = weighted ? weigh : nil
    let configuration = MemoryLayer<Int, Int>.Configuration(
      countLimit: weighted ? 1_000_000 : capacity,
      costLimit: weighted ? capacity : Int.max,
      cost: cost,
      segmentCount: 1,
      evictionPolicy: adaptive ? .adaptive : .windowTinyLFU
    )
    // The model follows the ghosts; a small adaptive layer of one segment is refereed unless
    // told not to be (``MemoryLayerRefereeTests`` checks the referee).
    let memory = try MemoryLayer<Int, Int>(configuration: configuration, admissionSeed: seed, allowsReferee: false)
    var model = WTinyLFUPolicy<Int, SplitMix64>(
      maximumWeight: capacity,
      maximumEntryCount: weighted ? 1_000_000 : nil,
      adaptsWindow: adaptive,
      random: SplitMix64(seed: seed)
    )
    // A skewed key space: a few hot keys, many cold ones, so admission has work to do.
    func drawKey() -> Int {
      Bool.random(using: &random) ? Int.random(in: 0..<40, using: &random) : Int.random(in: 0..<600, using: &random)
    }
    for step in 0..<6_000 {
      let key = drawKey()
      switch Int.random(in: 0..<20, using: &random) {
      case 0..<16:
        let hit = memory.value(for: key) != nil
        #expect(hit == model.recordAccess(key), "step \(step): hit or miss on \(key)")
        if !hit {
          let value = Int.random(in: 0..<1_000, using: &random)
          try memory.insert(value, for: key)
          model.insert(key, weight: weighted ? value % 20 : 1)
        }
      case 16..<19:
        guard model.contains(key) else { continue }
        let value = Int.random(in: 0..<1_000, using: &random)
        try memory.insert(value, for: key)
        model.update(key, weight: weighted ? value % 20 : 1)
      default:
        memory.removeValue(for: key)
        model.remove(key)
      }
      guard step % comparingEvery == comparingEvery - 1 else { continue }
      let layer = regions(memory)
      let expected = regions(model)
      #expect(layer == expected, "step \(step)")
      if layer != expected { return }
    }
    if adaptive && !weighted {
      // Spans ended, and the layer did at the same steps what the model did. Whether some
      // of them relaxed the window depends on the keys' hashes, which Swift seeds per process:
      // a seed may see none.
      #expect(model.spans.ended > 0 && model.spans.relaxed <= model.spans.ended)
    }
    #expect(memory.invariantViolations.isEmpty)
    #expect(model.invariantViolations().isEmpty)
    let reason: EvictionReason = weighted ? .costLimit : .countLimit
    #expect(memory.statistics.evictions[reason] > 0, "the replay exercised eviction")
  }

  @Test("a hot set survives a scan of one-hit keys under W-TinyLFU, and does not under LRU")
  func scanResistance() throws {
    func survivors(_ policy: EvictionPolicy) throws -> Int {
      let memory = try MemoryLayer<Int, Int>(
        configuration: .init(countLimit: 100, segmentCount: 1, evictionPolicy: policy), admissionSeed: 1)
      for _ in 0..<5 {
        for key in 0..<50 where memory.value(for: key) == nil { try memory.insert(key, for: key) }
      }
      for key in 1_000..<3_000 where memory.value(for: key) == nil { try memory.insert(key, for: key) }
      return (0..<50).filter { memory.contains($0) }.count
    }
    #expect(try survivors(.leastRecentlyUsed) == 0)
    #expect(try survivors(.windowTinyLFU) >= 45, "popular keys beat one-hit candidates")
  }

  @Test(
    "segmented W-TinyLFU stays sound through inserts, rewrites, expiry, removals and memory pressure",
    arguments: [(1, false), (4, false), (8, true)] as [(Int, Bool)]
  )
  func soundUnderEveryOperation(segments: Int, adaptive: Bool) throws {
    var random = SeededGenerator(seed: UInt64(segments))
    let clock = ManualClock()
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(
        countLimit: 120,
        costLimit: 2_000,
        cost: { $0 % 50 },
        segmentCount: segments,
        evictionPolicy: adaptive ? .adaptive : .windowTinyLFU,
        clock: clock
      ),
      admissionSeed: 9
    )
    var latest: [Int: Int] = [:]
    for step in 0..<8_000 {
      let key = Int.random(in: 0..<400, using: &random)
      switch Int.random(in: 0..<100, using: &random) {
      case 0..<55:
        if let value = memory.value(for: key) { #expect(latest[key] == value, "step \(step)") }
      case 55..<90:
        let value = step * 100 + Int.random(in: 0..<100, using: &random)
        let ttl: Duration? = Bool.random(using: &random) ? .seconds(Int.random(in: 1...30, using: &random)) : nil
        try memory.insert(CacheEntry(value, expiresAt: ttl.map { clock.now.advanced(by: $0) }), for: key)
        latest[key] = value
        #expect(memory.value(for: key) == value, "step \(step): an entry is never evicted by its own insert")
      case 90..<95:
        memory.removeValue(for: key)
        latest[key] = nil
      case 95..<97:
        clock.advance(by: .seconds(5))
      case 97:
        _ = memory.removeExpired()
      case 98:
        memory.store.handleMemoryPressure(.warning)
      default:
        if Int.random(in: 0..<10, using: &random) == 0 { memory.store.handleMemoryPressure(.critical) }
      }
      #expect(memory.count <= 120 && memory.totalCost <= 2_000)
      if step % 250 == 0 {
        let problems = memory.invariantViolations
        #expect(problems.isEmpty, "step \(step): \(problems)")
        if !problems.isEmpty { return }
      }
    }
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test("without a count limit the sketch starts small and grows with the segment")
  func sketchGrowsWithoutACountLimit() throws {
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(
        countLimit: .max, costLimit: 50_000, cost: { _ in 10 }, segmentCount: 1, evictionPolicy: .windowTinyLFU))
    let initial = memory.store.segments.withLock(0) { $0.admission.sketch.size }
    #expect(initial == SegmentAdmission.initialUnboundedSketchSize)
    for key in 0..<3_000 { try memory.insert(key, for: key) }
    let grown = memory.store.segments.withLock(0) { $0.admission.sketch.size }
    #expect(grown >= 3_000 && grown <= 8_000)
    #expect(memory.count == 3_000)
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test("uses queued when the sketch grows are dropped, never counted at their old positions")
  func queuedUsesDoNotReachAGrownSketch() throws {
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(
        countLimit: .max, costLimit: 50_000, cost: { _ in 10 }, segmentCount: 1, evictionPolicy: .windowTinyLFU))
    let size = SegmentAdmission.initialUnboundedSketchSize
    for key in 0..<size { try memory.insert(key, for: key) }
    let queued = memory.store.segments.withLock(0) { segment in
      segment.admission.countPendingUses()
      return segment.admission.pendingCount
    }
    #expect(queued == 0)
    for _ in 0..<5 { #expect(memory.value(for: 0) == 0) }
    #expect(memory.store.segments.withLock(0) { $0.admission.pendingCount } == 5, "five hits wait in the queue")
    try memory.insert(size, for: size)  // one more entry than the sketch is sized for: it grows
    let (grownSize, counted) = memory.store.segments.withLock(0) { segment in
      segment.admission.countPendingUses()
      let counters = segment.admission.sketch.table.reduce(0) { sum, word in
        (0..<16).reduce(sum) { $0 + Int((word >> UInt64($1 * 4)) & 0xF) }
      }
      return (segment.admission.sketch.size, counters)
    }
    #expect(grownSize > size)
    #expect(counted == 4, "only the new entry's use, one increment at each of its four depths")
  }

  @Test("a cost of 2^43 or more is a typed error naming the key, and the layer is unchanged")
  func costTooLarge() throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(cost: { $0 }, evictionPolicy: .windowTinyLFU))
    try memory.insert(1, for: "a")
    #expect(throws: AsyncCacheError.self) { try memory.insert(1 << 43, for: "a") }
    do {
      try memory.insert(Int.max, for: "b")
    } catch let error as AsyncCacheError {
      #expect(error.code == .invalidCost)
      #expect(error.message.contains("key b") && error.message.contains("2^43"))
    }
    #expect(memory.value(for: "a") == 1 && !memory.contains("b"))
    try memory.insert((1 << 43) - 1, for: "c")
    #expect(memory.totalCost == 1 + (1 << 43) - 1)
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test("the adaptive policy is the default; the policy prints its name")
  func defaultPolicy() {
    #expect(MemoryLayer<Int, Int>.Configuration().evictionPolicy == .adaptive)
    #expect(EvictionPolicy.adaptive.description == "adaptive")
    #expect(EvictionPolicy.windowTinyLFU.description == "windowTinyLFU")
    #expect(EvictionPolicy.leastRecentlyUsed.description == "leastRecentlyUsed")
  }
}

/// Review findings: the adaptive policy's sketch is sized lazily, and small segments still vote.
@Suite struct MemoryLayerAdaptiveSizingTests {
  @Test("a count limit set high as a safety cap allocates a small sketch until entries arrive; it grows as they do")
  func sketchGrowsWithTheSegment() throws {
    let memory = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 50_000_000, segmentCount: 1))
    func sketchWords() -> Int { memory.store.segments.withLock(0) { $0.admission.sketch.table.count } }
    #expect(sketchWords() == 1 << 17, "sized for 131,072 entries (1 MiB), not 50M")
    for key in 0..<140_000 { try memory.insert(key, for: key) }
    #expect(sketchWords() >= 1 << 18, "grown past the entries it holds")
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test(
    "count limits up to Int.max - 1 are shared out without overflow, under every policy",
    arguments: [EvictionPolicy.adaptive, .windowTinyLFU, .leastRecentlyUsed]
  )
  func countLimitsNearIntMax(policy: EvictionPolicy) throws {
    for countLimit in [Int.max - 1, Int.max - 31, Int.max / 2 + 1] {
      for segmentCount in [1, 2, 32, 256] {
        let memory = try MemoryLayer<Int, Int>(
          configuration: .init(countLimit: countLimit, segmentCount: segmentCount, evictionPolicy: policy))
        for key in 0..<100 { try memory.insert(key, for: key) }
        #expect(memory.count == 100)
        #expect(memory.value(for: 42) == 42)
        #expect(memory.invariantViolations.isEmpty)
      }
    }
  }

  @Test("segments of a few hundred entries still hear their votes: a recency-biased workload grows the window")
  func smallSegmentsAdapt() throws {
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 5_000, segmentCount: 32), admissionSeed: 7)
    // Each new key is read again 3 times, 50 to 1,500 accesses later (within what LRU keeps).
    var random = SplitMix64(seed: 11)
    var due: [Int: [Int]] = [:]
    var nextKey = 0
    for time in 0..<150_000 {
      let key: Int
      if var keys = due[time], let first = keys.popLast() {
        key = first
        due[time] = keys.isEmpty ? nil : keys
        if !keys.isEmpty { due[time + 1, default: []].append(contentsOf: keys) }
      } else {
        key = nextKey
        nextKey += 1
        var when = time
        for _ in 0..<3 {
          when += 50 + Int(random.next() % 500)
          due[when, default: []].append(key)
        }
      }
      if memory.value(for: key) == nil { try memory.insert(key, for: key) }
    }
    let share = try #require(memory.store.windowTarget?.withLock { $0.share })
    #expect(share > 0.1, "the window grew from 1% to \(share)")
    #expect(memory.invariantViolations.isEmpty)
  }
}
