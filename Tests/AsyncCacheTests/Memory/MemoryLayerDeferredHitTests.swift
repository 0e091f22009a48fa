import AsyncCacheTesting
import Testing

@testable import AsyncCache

/// A layer whose hits wait in their segment's queue (see `MemorySegment.recordHit`) against a
/// twin that settles after every lookup, so that each of its hits moves at once: through every
/// operation of the layer (lookups, inserts and rewrites with new costs and lifetimes, removal,
/// expiry, `removeExpired`, trims, `contains`, extensions, snapshot order, restore, `removeAll`),
/// under every policy, weighted or not, with one or more segments, the two stay identical.
@Suite(.timeLimit(.minutes(3))) struct MemoryLayerDeferredHitTests {
  static func lists(_ memory: MemoryLayer<Int, Int>) -> [[[Int]]] {
    (0..<memory.store.segments.count).map { index in
      memory.store.segments.withLock(index) { segment in
        SegmentRegion.allCases.map { segment.keys(in: $0) }
      }
    }
  }

  static func settleAll(_ memory: MemoryLayer<Int, Int>) {
    for index in 0..<memory.store.segments.count { memory.store.segments.withLock(index) { _ in } }
  }

  @Test(
    "hits left pending give exactly the lists of hits that move at once",
    arguments: [
      (1, EvictionPolicy.leastRecentlyUsed, false, 1), (2, .windowTinyLFU, false, 1), (3, .adaptive, false, 1),
      (4, .windowTinyLFU, true, 1), (5, .adaptive, true, 1), (6, .adaptive, false, 4), (7, .windowTinyLFU, true, 4),
      (8, .leastRecentlyUsed, true, 2),
    ] as [(UInt64, EvictionPolicy, Bool, Int)])
  func deferredEqualsImmediate(seed: UInt64, policy: EvictionPolicy, weighted: Bool, segments: Int) async throws {
    var random = SeededGenerator(seed: seed)
    let clock = ManualClock()
    let weigh: @Sendable (Int) -> Int = { $0 % 23 }
    let cost: (@Sendable (Int) -> Int)? = weighted ? weigh : nil
    let configuration = MemoryLayer<Int, Int>.Configuration(
      countLimit: weighted ? 1_000 : 80, costLimit: weighted ? 500 : Int.max,
      cost: cost, segmentCount: segments, evictionPolicy: policy, clock: clock)
    let deferred = try MemoryLayer<Int, Int>(configuration: configuration, admissionSeed: seed)
    let immediate = try MemoryLayer<Int, Int>(configuration: configuration, admissionSeed: seed)
    func key() -> Int {
      Bool.random(using: &random) ? Int.random(in: 0..<30, using: &random) : Int.random(in: 0..<400, using: &random)
    }
    var nextCompare = 1
    for step in 0..<5_000 {
      switch Int.random(in: 0..<100, using: &random) {
      case 0..<60:
        for _ in 0..<Int.random(in: 1...24, using: &random) {
          let key = key()
          let a = deferred.value(for: key)
          let b = immediate.value(for: key)
          Self.settleAll(immediate)
          #expect(a == b, "step \(step): lookup \(key)")
          if a == nil, b == nil, Int.random(in: 0..<3, using: &random) > 0 {
            let value = Int.random(in: 0..<1_000, using: &random)
            let ttl: Duration? = Bool.random(using: &random) ? .seconds(Int.random(in: 1...40, using: &random)) : nil
            try deferred.insert(value, for: key, timeToLive: ttl)
            try immediate.insert(value, for: key, timeToLive: ttl)
          }
        }
      case 60..<72:
        // A rewrite (new cost, maybe a new expiry) of a key that may have hits pending.
        let key = key()
        let value = Int.random(in: 0..<1_000, using: &random)
        let ttl: Duration? = Bool.random(using: &random) ? .seconds(Int.random(in: 1...40, using: &random)) : nil
        try deferred.insert(value, for: key, timeToLive: ttl)
        try immediate.insert(value, for: key, timeToLive: ttl)
      case 72..<76:
        let key = key()
        deferred.removeValue(for: key)
        immediate.removeValue(for: key)
      case 76..<84:
        clock.advance(by: .seconds(Int.random(in: 1...8, using: &random)))
      case 84..<86:
        #expect(deferred.removeExpired() == immediate.removeExpired(), "step \(step)")
      case 86..<87:
        await deferred.handleMemoryPressure(.warning)
        await immediate.handleMemoryPressure(.warning)
      case 87..<90:
        let key = key()
        #expect(deferred.contains(key) == immediate.contains(key))
      case 90..<93:
        let key = key()
        let now = clock.now.nanosecondsSince1970
        let a = deferred.store.extendExpiry(of: key, from: .max, to: now + 5_000_000_000)
        let b = immediate.store.extendExpiry(of: key, from: .max, to: now + 5_000_000_000)
        #expect(a == b)
      case 93..<96:
        let now = clock.now.nanosecondsSince1970
        let a = deferred.store.entriesInEvictionOrder(unexpiredAt: now).map { $0.map { $0.key } }
        let b = immediate.store.entriesInEvictionOrder(unexpiredAt: now).map { $0.map { $0.key } }
        #expect(a == b, "step \(step): snapshot order")
      case 96..<98:
        let entries = (0..<Int.random(in: 1...5, using: &random)).map { _ in
          let value = Int.random(in: 0..<1_000, using: &random)
          return (key: key(), entry: CacheEntry(value), cost: Int64(weighted ? value % 23 : 0))
        }
        var seen = Set<Int>()
        let unique = entries.filter { seen.insert($0.key).inserted }
        let a = deferred.store.restore(unique)
        let b = immediate.store.restore(unique)
        #expect(a == b)
      case 98:
        if Int.random(in: 0..<4, using: &random) == 0 {
          deferred.removeAll()
          immediate.removeAll()
        }
      default:
        #expect(deferred.statistics.hits == immediate.statistics.hits)
      }
      if step == nextCompare {
        nextCompare += Int.random(in: 1...60, using: &random)
        let a = Self.lists(deferred)
        let b = Self.lists(immediate)
        #expect(a == b, "step \(step): lists")
        if a != b { return }
        #expect(deferred.invariantViolations.isEmpty)
      }
    }
    #expect(Self.lists(deferred) == Self.lists(immediate))
    #expect(deferred.statistics == immediate.statistics)
    #expect(deferred.invariantViolations.isEmpty, "\(deferred.invariantViolations.prefix(3))")
  }
}
