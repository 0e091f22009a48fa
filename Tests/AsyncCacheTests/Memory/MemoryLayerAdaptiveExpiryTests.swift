import AsyncCacheTesting
import Testing

@testable import AsyncCache

/// Expiry under the default policy (``EvictionPolicy/adaptive``), driven by a `ManualClock`: an
/// entry is served up to the nanosecond before its instant and never at it.
@Suite struct MemoryLayerAdaptiveExpiryTests {
  @Test("the default policy is the adaptive one")
  func theDefaultIsAdaptive() throws {
    let memory = try MemoryLayer<Int, Int>(configuration: .init(clock: ManualClock()))
    #expect(memory.configuration.evictionPolicy == .adaptive)
    #expect(memory.store.windowTarget != nil)
  }

  @Test(
    "an entry expires at exactly its instant: a read 1 ns before hits, a read at it misses",
    arguments: [
      (ttl: Duration.seconds(100), own: nil), (ttl: nil, own: Duration.nanoseconds(1)),
      (ttl: nil, own: .milliseconds(1_500)), (ttl: .seconds(30), own: .seconds(60)),
      (ttl: .seconds(60), own: .nanoseconds(30_000_000_123)),
    ] as [(ttl: Duration?, own: Duration?)]
  )
  func expiresAtItsInstant(ttl: Duration?, own: Duration?) throws {
    let clock = ManualClock()
    let memory = try MemoryLayer<String, Int>(configuration: .init(timeToLive: ttl, clock: clock))
    let start = clock.now
    try memory.insert(CacheEntry(1, expiresAt: own.map { start.advanced(by: $0) }), for: "k")
    // The earlier of the two.
    let lifetime = [ttl, own].compactMap { $0 }.min()!
    let expiry = start.advanced(by: lifetime)
    #expect(memory.entry(for: "k")?.expiresAt == expiry)
    clock.advance(to: expiry.advanced(by: .nanoseconds(-1)))
    #expect(memory.value(for: "k") == 1, "1 ns before its instant")
    #expect(memory.contains("k"))
    clock.advance(by: .nanoseconds(1))
    #expect(!memory.contains("k"))
    #expect(memory.value(for: "k") == nil, "at its instant")
    #expect(memory.count == 0)
    let statistics = memory.statistics
    #expect(statistics.evictions[.expired] == 1)
    #expect(statistics.hits == 2 && statistics.misses == 1)
  }

  @Test("in a full adaptive layer of several segments, each entry expires at its own nanosecond")
  func everyEntryAtItsOwnInstant() throws {
    let clock = ManualClock()
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 1_024, segmentCount: 4, clock: clock), admissionSeed: 3)
    let start = clock.now
    // Fill the layer past its limit so that the policy is at work, then 300 entries expiring
    // 1 ns apart, each read often enough to be kept.
    for key in 10_000..<12_000 { try memory.insert(key, for: key) }
    for key in 0..<300 {
      try memory.insert(CacheEntry(key, expiresAt: start.advanced(by: .nanoseconds(1_000 + key))), for: key)
      for _ in 0..<3 { _ = memory.value(for: key) }
    }
    let kept = (0..<300).filter { memory.contains($0) }
    #expect(kept.count > 250)
    var early: [Int] = []
    var late: [Int] = []
    for key in kept {
      clock.advance(to: start.advanced(by: .nanoseconds(999 + key)))
      if memory.value(for: key) != key { early.append(key) }
      clock.advance(by: .nanoseconds(1))
      if memory.value(for: key) != nil { late.append(key) }
    }
    #expect(early.isEmpty, "expired before their instant: \(early)")
    #expect(late.isEmpty, "served at their instant: \(late)")
    #expect(memory.statistics.evictions[.expired] == kept.count)
    #expect(memory.invariantViolations.isEmpty)
  }
}
