import Testing

@testable import AsyncCache

/// ``EvictionPolicy/adaptive`` in a layer of at most 4,096 entries: one segment whose
/// configuration a ``PolicyReferee`` chooses from shadows of the whole layer. Through a real
/// `MemoryLayer`, as an application creates it.
@Suite struct MemoryLayerRefereeTests {
  static func layer(
    countLimit: Int, policy: EvictionPolicy = .adaptive, seed: UInt64? = nil
  ) throws -> MemoryLayer<Int, Int> {
    try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: countLimit, evictionPolicy: policy, admissionSeed: seed))
  }

  /// Reads every key (a miss inserts it) and returns the hit ratio, in %.
  @discardableResult
  static func replay(_ keys: some Sequence<Int>, through memory: MemoryLayer<Int, Int>) throws -> Double {
    var hits = 0
    var count = 0
    for key in keys {
      count += 1
      if memory.value(for: key) != nil {
        hits += 1
      } else {
        try memory.insert(key, for: key)
      }
    }
    return Double(hits) * 100 / Double(max(count, 1))
  }

  /// The expert a refereed layer runs; `nil` when it is not refereed.
  /// Recency-biased keys: `keyCount` new keys in order, each read again `lags` new keys later.
  static func rereads(keyCount: Int, lags: [Int]) -> [Int] {
    var keys: [Int] = []
    for key in 0..<keyCount {
      keys.append(key)
      for lag in lags where key >= lag { keys.append(key - lag) }
    }
    return keys
  }

  static func expert<Key>(of memory: MemoryLayer<Key, Int>) -> PolicyExpert? {
    memory.store.segments.withLock(0) { segment in
      segment.admission.isRefereed ? PolicyExpert.all[segment.admission.refereeExpert] : nil
    }
  }

  @Test("layers of at most 4,096 entries get one segment and a referee; larger ones get segments and ghosts")
  func smallLayersAreRefereed() throws {
    for countLimit in [1, 16, 4_096] {
      let memory = try Self.layer(countLimit: countLimit)
      #expect(memory.store.segments.count == 1)
      #expect(Self.expert(of: memory) == PolicyExpert.all[PolicyExpert.initialIndex])
      #expect(memory.store.windowTarget == nil)
    }
    let large = try Self.layer(countLimit: 4_097)
    #expect(Self.expert(of: large) == nil)
    #expect(large.store.windowTarget != nil)
    // An explicit segment count keeps the ghosts, and so do the other policies, whose small
    // layers keep their segments (at least 256 entries each).
    let split = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 1_000, segmentCount: 4))
    #expect(split.store.windowTarget != nil)
    for policy in [EvictionPolicy.windowTinyLFU, .leastRecentlyUsed] {
      #expect(try Self.expert(of: Self.layer(countLimit: 100, policy: policy)) == nil)
      #expect(
        MemoryLayer<Int, Int>.Configuration.automaticSegmentCount(countLimit: 4_096, policy: policy)
          == MemoryLayer<Int, Int>.Configuration.automaticSegmentCount(countLimit: 4_097, policy: policy))
    }
    // A cost limit may let the layer hold fewer entries than its count limit, which its shadows
    // would simulate: such a layer keeps the ghosts.
    let weighed = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 1_000, costLimit: 100, cost: { _ in 1 }, segmentCount: 1))
    #expect(Self.expert(of: weighed) == nil)
    #expect(weighed.store.windowTarget != nil)
  }

  @Test("a refereed layer creates its shadows at its first insert, and releases them under critical pressure")
  func shadowsAreCreatedWhenNeeded() async throws {
    let memory = try Self.layer(countLimit: 100, seed: 3)
    func hasReferee() -> Bool { memory.store.segments.withLock(0) { $0.admission.referee != nil } }
    #expect(!hasReferee())
    try memory.insert(0, for: 0)
    #expect(hasReferee())
    for key in 1..<60 { try memory.insert(key, for: key) }
    await memory.handleMemoryPressure(.critical)
    #expect(!hasReferee())
    try memory.insert(0, for: 0)
    #expect(hasReferee())
    #expect(memory.invariantViolations.isEmpty)
  }

  /// A key whose hash depends on a salt as well: twenty salts give twenty different hashings of
  /// the same keys in one process, as twenty processes' hash seeds would.
  struct SaltedKey: Hashable, Sendable {
    var key: Int
    var salt: Int
  }

  /// The coin flip of issue 36: a loop slightly longer than the cache scored 5.8% or 97% at
  /// 1,000 entries depending on the process's hash seed (which keys shared a segment) and the
  /// admission seed. Now neither decides: every seed and every hashing keep a pass's worth of
  /// the loop.
  @Test("a loop slightly longer than the cache scores the same under 20 admission seeds and hashings")
  func loopsAreNotACoinFlip() throws {
    let capacity = 500
    let loop = 0..<(capacity + capacity / 100)
    var ratios: [Double] = []
    for seed in 1...20 as ClosedRange<UInt64> {
      let memory = try MemoryLayer<SaltedKey, Int>(
        configuration: .init(countLimit: capacity, admissionSeed: seed))
      var hits = 0
      for _ in 0..<40 {
        for key in loop {
          let salted = SaltedKey(key: key, salt: Int(seed))
          if memory.value(for: salted) != nil { hits += 1 } else { try memory.insert(key, for: salted) }
        }
      }
      ratios.append(Double(hits) * 100 / Double(40 * loop.count))
      #expect(memory.store.invariantViolations().isEmpty)
    }
    let worst = try #require(ratios.min())
    let best = try #require(ratios.max())
    #expect(best - worst <= 1, "hit ratios over 20 seeds: \(ratios.sorted())")
    // OPT keeps 500 of the 505 keys: 96.5% over 40 passes (the first is all misses).
    #expect(worst >= 90, "hit ratios over 20 seeds: \(ratios.sorted())")
  }

  /// The database vault-service trace of issue 36 in miniature: new keys read a few times soon
  /// after they appear, then never. W-TinyLFU turns them away (it scored 0.4% against LRU's 33% at
  /// 64 entries); the referee moves the layer to recency.
  @Test("keys re-read soon after they appear: a small layer hits as LRU does", arguments: [16, 64, 512])
  func recencyBiasedTrafficHitsAsLRU(capacity: Int) throws {
    let keys = Self.rereads(keyCount: capacity * 300, lags: [3, 7])
    let adaptive = try Self.layer(countLimit: capacity)
    let lru = try Self.layer(countLimit: capacity, policy: .leastRecentlyUsed)
    let tinyLFU = try Self.layer(countLimit: capacity, policy: .windowTinyLFU)
    let adaptiveRatio = try Self.replay(keys, through: adaptive)
    let lruRatio = try Self.replay(keys, through: lru)
    let tinyLFURatio = try Self.replay(keys, through: tinyLFU)
    #expect(adaptiveRatio >= lruRatio - 1, "adaptive \(adaptiveRatio)%, LRU \(lruRatio)%, W-TinyLFU \(tinyLFURatio)%")
    #expect(adaptive.invariantViolations.isEmpty)
  }

  @Test("the layer's regions follow the expert it switched to")
  func regionsFollowTheExpert() throws {
    let capacity = 200
    let memory = try Self.layer(countLimit: capacity, seed: 5)
    let keys = Self.rereads(keyCount: capacity * 100, lags: [2])
    try Self.replay(keys, through: memory)
    let expert = try #require(Self.expert(of: memory))
    #expect(expert != PolicyExpert.all[PolicyExpert.initialIndex])
    let (window, protected) = expert.maximums(of: capacity)
    memory.store.segments.withLock(0) { segment in
      #expect(segment.admission.windowCountMaximum == window)
      #expect(segment.admission.protectedCountMaximum == protected)
      #expect(segment.admission.admissionRule == expert.admission)
      #expect(segment.admission.windowCount <= window)
      #expect(segment.admission.protectedCount <= protected)
    }
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test("after a recency phase, a loop brings a refereed layer back to frequency and its hits")
  func phasesAreFollowed() throws {
    let capacity = 300
    let memory = try Self.layer(countLimit: capacity, seed: 8)
    let recency = Self.rereads(keyCount: capacity * 100, lags: [3])
    try Self.replay(recency, through: memory)
    let duringRecency = try #require(Self.expert(of: memory))
    #expect(duringRecency != PolicyExpert.all[PolicyExpert.initialIndex])
    // A loop of 1.5 × the capacity: recency would hit nothing.
    let loop = (1 << 30)..<((1 << 30) + capacity * 3 / 2)
    try Self.replay((0..<150).lazy.flatMap { _ in loop }, through: memory)
    let later = try Self.replay((0..<10).lazy.flatMap { _ in loop }, through: memory)
    let expert = try #require(Self.expert(of: memory))
    #expect(expert.windowShare < 0.5 && expert.admission != .always, "\(expert.name)")
    // OPT keeps 2/3 of each pass; W-TinyLFU's main region most of that.
    #expect(later > 50, "\(later)% of the loop after it settled, running \(expert.name)")
    #expect(memory.invariantViolations.isEmpty)
  }

  /// A recency phase, then a frequency phase (a hot set as large as the cache, mildly skewed,
  /// half of the accesses one-off keys): the layer leaves the recency configuration and ends up
  /// hitting as W-TinyLFU does. Its scores fade over 32 capacities, which keeps it still on the
  /// LIRS suite's periodic sweeps; a change of workload is seen on scores that fade over 16.
  /// Before that, at 1,000 entries it trailed W-TinyLFU by 4 to 9 points for the first 60 to 100
  /// capacities of the phase, and from capacity 80 to 112 by about 3. This bounds it: within a
  /// point from capacity 80 on. (`Int` keys: the figures depend a little on the process's hash
  /// seed; over 16 hashings the margin ranged from -0.22 to +1.48 points.)
  @Test("after a recency phase, a frequency phase brings a refereed layer to W-TinyLFU's hits within 80 capacities")
  func frequencyPhaseAfterRecencyIsFollowed() throws {
    let capacity = 1_000
    let (settle, _) = MemoryLayerAdaptiveTests.recencyPhase(capacity: capacity, settle: 20, measured: 0)
    let adaptive = try Self.layer(countLimit: capacity, seed: 3)
    let tinyLFU = try Self.layer(countLimit: capacity, policy: .windowTinyLFU, seed: 3)
    for memory in [adaptive, tinyLFU] { try Self.replay(settle, through: memory) }
    let duringRecency = try #require(Self.expert(of: adaptive))
    #expect(duringRecency.windowShare > 0.5, "\(duringRecency.name)")
    let frequency = AdaptiveTrace.frequency(
      accesses: 112 * capacity, hotKeys: capacity, exponent: 0.5, coldShare: 0.5, firstKey: 1 << 40, seed: 0x5A7)
    for memory in [adaptive, tinyLFU] { try Self.replay(frequency.prefix(80 * capacity), through: memory) }
    let adaptiveRatio = try Self.replay(frequency.suffix(32 * capacity), through: adaptive)
    let tinyLFURatio = try Self.replay(frequency.suffix(32 * capacity), through: tinyLFU)
    let expert = try #require(Self.expert(of: adaptive))
    #expect(
      adaptiveRatio >= tinyLFURatio - 1,
      "adaptive \(adaptiveRatio)% running \(expert.name), W-TinyLFU \(tinyLFURatio)%")
    #expect(adaptive.invariantViolations.isEmpty)
  }

  @Test(
    "recency and frequency phases that take turns every horizon: a small layer hits more than LRU",
    arguments: [16, 64])
  func alternatingPhasesAreNotChased(capacity: Int) throws {
    // Segmented LRU does well on both phases. Following each phase one phase late scored 31.0%
    // at 16 entries, against LRU's 49.6%; holding still scores about 54%.
    let keys = PolicyRefereeTests.alternating(capacity: capacity, phase: 8_192, cycles: 8)
    let adaptive = try Self.replay(keys, through: Self.layer(countLimit: capacity, seed: 1))
    let lru = try Self.replay(keys, through: Self.layer(countLimit: capacity, policy: .leastRecentlyUsed))
    #expect(adaptive >= lru, "adaptive \(adaptive)%, LRU \(lru)%")
  }

  @Test("a switch keeps the room a prefetcher reserved in the window")
  func switchesKeepTheReservedRoom() throws {
    let capacity = 200
    let memory = try Self.layer(countLimit: capacity, seed: 5)
    let reservation = try #require(memory.store.reserveWindow(entries: 60))
    let keys = Self.rereads(keyCount: capacity * 100, lags: [2])
    try Self.replay(keys, through: memory)
    let expert = try #require(Self.expert(of: memory))
    memory.store.segments.withLock(0) { segment in
      #expect(segment.admission.windowCountMaximum >= 60, "running \(expert.name)")
    }
    memory.store.releaseWindow(reservation)
    #expect(memory.invariantViolations.isEmpty)
  }

  /// The configuration's seed: the same keys through two layers with one seed give the same
  /// hits and the same residents (this process hashes alike for both).
  @Test("an admission seed replays exactly")
  func admissionSeedReplays() throws {
    var random = SeededGenerator(seed: 11)
    let keys = (0..<30_000).map { _ in Int(random.next() % 700) }
    let first = try Self.layer(countLimit: 300, seed: 99)
    let second = try Self.layer(countLimit: 300, seed: 99)
    #expect(try Self.replay(keys, through: first) == Self.replay(keys, through: second))
    #expect(Set(first.keys) == Set(second.keys))
    #expect(Self.expert(of: first) == Self.expert(of: second))
  }
}
