import AsyncCache
import AsyncCacheTesting
import TestSupport
import Testing

@Suite(.timeLimit(.minutes(3))) struct FakeLayerTests {

  @Test func itStoresEntriesAndExpiresThemByItsClock() async throws {
    let clock = ManualClock()
    let layer = FakeLayer<String, Int>(clock: clock)
    try await layer.insert(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(5))), for: "a")
    #expect(try await layer.entry(for: "a")?.value == 1)
    clock.advance(by: .seconds(5))
    #expect(try await layer.entry(for: "a") == nil)
    #expect(layer.storedEntries.isEmpty)
  }

  @Test func scriptedFaultsThrowTheGivenNumberOfTimes() async throws {
    let layer = FakeLayer<String, Int>()
    layer.fail(.insert, with: TestError("broken"), times: 2)
    await #expect(throws: TestError.self) { try await layer.insert(CacheEntry(1), for: "a") }
    await #expect(throws: TestError.self) { try await layer.insert(CacheEntry(1), for: "a") }
    try await layer.insert(CacheEntry(1), for: "a")
    #expect(layer.callCount(.insert) == 3)
    layer.fail(.lookup, with: TestError("broken"))
    await #expect(throws: TestError.self) { try await layer.entry(for: "a") }
    layer.stopFailing()
    #expect(try await layer.entry(for: "a")?.value == 1)
  }

  @Test func aLookupHeldBeforeApplyingReadsTheClockWhenItApplies() async throws {
    let clock = ManualClock()
    let layer = FakeLayer<String, Int>(clock: clock)
    layer.seed(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(1))), for: "a")
    layer.hold(.lookup)
    let lookup = Task { try await layer.entry(for: "a") }
    await layer.waitForHeld(1, .lookup)
    clock.advance(by: .seconds(5))
    layer.release(.lookup)
    #expect(try await lookup.value == nil, "the entry expired while the lookup was held")
  }

  @Test func failingZeroTimesDoesNotFail() async throws {
    let layer = FakeLayer<String, Int>()
    layer.fail(.lookup, with: TestError("broken"), times: 0)
    #expect(try await layer.entry(for: "a") == nil)
  }

  @Test func heldOperationsWaitForRelease() async throws {
    let layer = FakeLayer<String, Int>()
    layer.hold(.insert)
    let insert = Task { try await layer.insert(CacheEntry(1), for: "a") }
    await layer.waitForHeld(1, .insert)
    #expect(layer.storedEntries["a"] == nil)
    layer.release(.insert)
    try await insert.value
    #expect(layer.storedEntries["a"] == CacheEntry(1))
  }

  @Test func releaseOneLetsTheOldestHeldCallGoAndKeepsHolding() async throws {
    let layer = FakeLayer<String, Int>()
    layer.hold(.insert)
    let first = Task { try await layer.insert(CacheEntry(1), for: "a") }
    await layer.waitForHeld(1, .insert)
    let second = Task { try await layer.insert(CacheEntry(2), for: "b") }
    await layer.waitForHeld(2, .insert)
    layer.releaseOne(.insert)
    try await first.value
    #expect(layer.storedEntries == ["a": CacheEntry(1)], "the second insert is still held")
    let third = Task { try await layer.insert(CacheEntry(3), for: "c") }
    await layer.waitForHeld(2, .insert)  // later calls are still held
    layer.release(.insert)
    try await second.value
    try await third.value
    #expect(layer.storedEntries.count == 3)
  }

  @Test func aLookupHeldAfterApplyingReturnsWhatItRead() async throws {
    let layer = FakeLayer<String, Int>()
    layer.seed(CacheEntry(1), for: "a")
    layer.hold(.lookup, phase: .afterApplying)
    let lookup = Task { try await layer.entry(for: "a") }
    await layer.waitForHeld(1, .lookup)
    layer.seed(CacheEntry(2), for: "a")
    layer.release(.lookup)
    #expect(try await lookup.value == CacheEntry(1))
  }

  @Test("revalidate changes the held entry in place, and only that one; a recording layer records it")
  func revalidate() async throws {
    let layer = FakeLayer<String, Int>()
    let recording = RecordingLayer(layer)
    let held = CacheEntry(1, expiresAt: CacheInstant(secondsSince1970: 10), metadata: EntryMetadata(entityTag: "a"))
    layer.seed(held, for: "k")
    let kept = CacheEntry(1, expiresAt: CacheInstant(secondsSince1970: 20), metadata: EntryMetadata(entityTag: "b"))
    #expect(try await !recording.revalidate(kept, for: "k", replacing: CacheEntry(1, expiresAt: held.expiresAt)))
    #expect(try await recording.revalidate(kept, for: "k", replacing: held))
    #expect(layer.storedEntries["k"] == kept)
    #expect(layer.callCount(.revalidate) == 2 && layer.callCount(.insert) == 0)
    #expect(
      recording.calls.map { $0.description }
        == Array(repeating: "revalidate(k, expiresAt: \(kept.expiresAt!))", count: 2))
  }
}
