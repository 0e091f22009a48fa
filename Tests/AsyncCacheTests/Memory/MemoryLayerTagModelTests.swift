import AsyncCacheTesting
import Dispatch
import Synchronization
import Testing

@testable import AsyncCache

/// The memory layer's promise about tags, against a model: after `invalidate(tag:at:)` returns,
/// no hit, `entry(for:)` or `contains` answers an entry filed under the tag and produced at or
/// before that instant, whatever came before (writes over the key, revalidations with new
/// metadata, removals, trims, expiry, costs at the limit) and whichever hits stamped it alive.
/// (From the review of the stamps: `MemorySegment+Tags.swift`.)
@Suite("MemoryLayer: tags against a model", .timeLimit(.minutes(3)))
struct MemoryLayerTagModelTests {
  struct Payload: Sendable, Equatable {
    var write: Int
    var cost: Int
  }

  static let tags = ["a", "b", "c", "d"]

  /// Whether the model's invalidations kill an entry with `metadata`.
  static func kills(_ metadata: EntryMetadata, _ invalidations: [String: CacheInstant]) -> Bool {
    metadata.tags.contains { tag in
      guard let at = invalidations[tag] else { return false }
      return metadata.producedAt.map { at >= $0 } ?? true
    }
  }

  /// `steps` random operations on a layer of `countLimit` entries over `2 × countLimit` keys,
  /// each answer checked against the model.
  static func run(policy: EvictionPolicy, segments: Int, countLimit: Int, steps: Int, seed: UInt64) async throws {
    let clock = ManualClock()
    let memory = try MemoryLayer<Int, Payload>(
      configuration: .init(
        countLimit: countLimit, cost: { $0.cost }, segmentCount: segments, evictionPolicy: policy, clock: clock))
    var random = SeededGenerator(seed: seed)
    func below(_ bound: Int) -> Int { Int(random.next() % UInt64(bound)) }
    // The last write of each key, and each tag's latest invalidation.
    var latest: [Int: (payload: Payload, metadata: EntryMetadata)] = [:]
    var invalidations: [String: CacheInstant] = [:]
    var writes = 0
    let keyCount = countLimit * 2
    func check(_ key: Int, _ found: Payload?, _ step: Int, _ what: String) {
      guard let found else { return }
      guard let model = latest[key] else {
        Issue.record("step \(step), \(what): key \(key) answered \(found), which no write left there")
        return
      }
      #expect(model.payload == found, "step \(step), \(what): key \(key) answered an older value")
      #expect(
        !kills(model.metadata, invalidations), "step \(step), \(what): key \(key) answered dead, \(model.metadata)")
    }
    for step in 0..<steps {
      clock.advance(by: .nanoseconds(1))
      let key = below(keyCount)
      switch below(100) {
      case 0..<30:
        var tags: Set<String> = []
        for tag in Self.tags where below(3) == 0 { tags.insert(tag) }
        // Produced up to 3 ns ago: sometimes before an invalidation, dead on arrival.
        let produced = clock.now.advanced(by: .nanoseconds(-Int64(below(4))))
        let metadata = below(5) == 0 ? EntryMetadata() : EntryMetadata(producedAt: produced, tags: tags)
        let costs = [0, 1, MemoryNode<Int, Payload>.maximumCost, below(1 << 43)]
        writes += 1
        let payload = Payload(write: writes, cost: costs[below(costs.count)])
        let expiresAt = below(4) == 0 ? clock.now.advanced(by: .nanoseconds(Int64(1 + below(20)))) : nil
        try memory.insert(CacheEntry(payload, expiresAt: expiresAt, metadata: metadata), for: key)
        latest[key] = (payload, metadata)
      case 30..<60:
        check(key, memory.value(for: key), step, "value(for:)")
      case 60..<65:
        let entry = memory.entry(for: key)
        check(key, entry?.value, step, "entry(for:)")
        if let entry, let model = latest[key] { #expect(entry.metadata == model.metadata) }
      case 65..<70:
        if memory.contains(key), let model = latest[key] {
          #expect(!kills(model.metadata, invalidations), "step \(step), contains: key \(key) is dead")
        }
      case 70..<85:
        let tag = Self.tags[below(Self.tags.count)]
        // Sometimes earlier than the tag's last: that changes nothing.
        let at = clock.now.advanced(by: .nanoseconds(-Int64(below(6))))
        await memory.invalidate(tag: tag, at: at)
        if invalidations[tag].map({ at > $0 }) ?? true { invalidations[tag] = at }
        if below(8) == 0 {
          for key in 0..<keyCount { check(key, memory.value(for: key), step, "a sweep of every key") }
        }
      case 85..<90:
        // New metadata without the value travelling, produced up to 7 ns ago.
        if let held = memory.entry(for: key) {
          check(key, held.value, step, "entry(for:) before a revalidation")
          var tags: Set<String> = []
          for tag in Self.tags where below(2) == 0 { tags.insert(tag) }
          let metadata = EntryMetadata(producedAt: clock.now.advanced(by: .nanoseconds(-Int64(below(8)))), tags: tags)
          let revalidated = try await memory.revalidate(
            CacheEntry(held.value, expiresAt: nil, metadata: metadata), for: key, replacing: held)
          if revalidated { latest[key]?.metadata = metadata }
        }
      case 90..<94:
        memory.removeValue(for: key)
        latest[key] = nil
      case 94..<97:
        memory.removeExpired()
      case 97..<99:
        await memory.handleMemoryPressure(.warning)
      default:
        if below(10) == 0 { memory.removeAll() }
      }
      if step % 997 == 0 {
        let violations = memory.invariantViolations
        #expect(violations.isEmpty, "step \(step): \(violations)")
      }
    }
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test(
    "no hit answers a dead or an older value, whatever came before",
    arguments: [EvictionPolicy.leastRecentlyUsed, .windowTinyLFU, .adaptive], [1, 4])
  func model(policy: EvictionPolicy, segments: Int) async throws {
    for seed: UInt64 in 1...2 {
      try await Self.run(policy: policy, segments: segments, countLimit: 40, steps: 20_000, seed: seed)
    }
  }

}

/// The same promise with invalidations racing hits on other threads (the model above is one
/// task, and CI's ThreadSanitizer run skips it; it runs this).
@Suite("MemoryLayer: tags, invalidations racing hits", .timeLimit(.minutes(3)))
struct MemoryLayerTagRaceTests {
  /// Invalidations racing with hits on other threads: one thread kills key after key (each
  /// under a tag of its own) and checks its own hit; the others keep hitting the keys just
  /// ahead of it (so that they are stamped alive, then killed) and the keys it killed last.
  @Test("after invalidate returns, no thread hits the entry it killed", arguments: [1, 8])
  func concurrentHits(segments: Int) throws {
    let clock = ManualClock()
    let keyCount = 10_000
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: keyCount * 2, segmentCount: segments, clock: clock))
    let produced = clock.now
    for key in 0..<keyCount {
      let metadata = EntryMetadata(producedAt: produced, tags: ["t\(key)", "all"])
      try memory.insert(CacheEntry(key, expiresAt: nil, metadata: metadata), for: key)
    }
    // A tag no entry carries, so that hits check and stamp from the start.
    memory.store.tagInvalidations.record("none", at: produced)
    let killed = Atomic<Int>(0)
    let failures = Atomic<Int>(0)
    let at = produced.advanced(by: .nanoseconds(1))
    DispatchQueue.concurrentPerform(iterations: 3) { thread in
      if thread == 0 {
        for key in 0..<keyCount {
          memory.store.tagInvalidations.record("t\(key)", at: at)
          if memory.value(for: key) != nil { failures.add(1, ordering: .relaxed) }
          killed.store(key + 1, ordering: .releasing)
        }
      } else {
        var random = SeededGenerator(seed: UInt64(thread))
        // Bounded, so that a killer that never got a thread cannot keep this one spinning: a
        // concurrentPerform cannot be cancelled by the test's time limit.
        for _ in 0..<(keyCount * 1_000) {
          let upTo = killed.load(ordering: .acquiring)
          if upTo >= keyCount { break }
          if upTo > 0 {
            let dead = upTo - 1 - Int(random.next() % UInt64(min(upTo, 64)))
            if memory.value(for: dead) != nil || memory.contains(dead) { failures.add(1, ordering: .relaxed) }
          }
          let ahead = min(keyCount - 1, upTo + Int(random.next() % 32))
          _ = memory.value(for: ahead)
        }
      }
    }
    #expect(failures.load(ordering: .relaxed) == 0)
    #expect(memory.invariantViolations.isEmpty)
  }
}
