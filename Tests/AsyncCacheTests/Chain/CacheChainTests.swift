import AsyncCacheTesting
import TestSupport
import Testing

@testable import AsyncCache

@Suite(.timeLimit(.minutes(3))) struct CacheChainTests {
  let clock = ManualClock()

  func memory(timeToLive: Duration? = nil) throws -> MemoryLayer<String, Int> {
    try MemoryLayer(configuration: .init(timeToLive: timeToLive, clock: clock))
  }

  // MARK: Lookup and back-fill

  @Test func aMissEverywhereIsNil() async throws {
    let chain = try CacheChain<String, Int>([try memory(), FakeLayer<String, Int>()])
    #expect(try await chain.value(for: "a") == nil)
    #expect(chain.statistics.tiers.map(\.misses) == [1, 1])
  }

  @Test func concurrentReadersBackFillOnceAndNoneWaitsForAnother() async throws {
    let disk = FakeLayer<String, Int>(clock: clock)
    let remote = FakeLayer<String, Int>(entries: ["k": CacheEntry(7)], clock: clock)
    let chain = try CacheChain<String, Int>([try memory(), disk, remote])
    remote.hold(.lookup)
    let first = Task { try await chain.entry(for: "k") }
    let second = Task { try await chain.entry(for: "k") }
    await remote.waitForHeld(2, .lookup)
    disk.hold(.insert)
    remote.release(.lookup)
    await disk.waitForHeld(1, .insert)
    // The second reader's copy is either refused (its read ends) or queued behind the first.
    let queued = Locked(false)
    await chain.coordinator.waitUntil { machine in
      guard machine.readerCount(for: "k") == 1 || machine.queuedWriterCount(for: "k") == 1 else { return false }
      queued.withLock { $0 = machine.queuedWriterCount(for: "k") == 1 }
      return true
    }
    disk.release(.insert)
    #expect(try await first.value?.value == 7)
    #expect(try await second.value?.value == 7)
    #expect(!queued.withLock { $0 }, "the second reader waited for the first one's write to the disk")
    #expect(disk.callCount(.insert) == 1, "the same entry was back-filled twice")
    #expect(chain.coordinator.isIdle)
  }

  @Test func aHitBelowBackfillsTheLayersAboveWithTheOriginalExpiry() async throws {
    let top = try memory()
    let middle = FakeLayer<String, Int>()
    let bottom = FakeLayer<String, Int>()
    let expiry = clock.now.advanced(by: .seconds(300))
    bottom.seed(CacheEntry(7, expiresAt: expiry), for: "a")
    let chain = try CacheChain<String, Int>([top, middle, bottom])

    #expect(try await chain.entry(for: "a") == CacheEntry(7, expiresAt: expiry))
    #expect(top.entry(for: "a") == CacheEntry(7, expiresAt: expiry))
    #expect(middle.storedEntries["a"] == CacheEntry(7, expiresAt: expiry))
    #expect(chain.statistics.tiers.map(\.hits) == [0, 0, 1])

    // The next lookup is served by the top layer.
    #expect(try await chain.value(for: "a") == 7)
    #expect(chain.statistics.tiers.map(\.hits) == [1, 0, 1])
  }

  @Test func aBackfilledEntryNeverOutlivesItsSource() async throws {
    let top = try memory(timeToLive: .seconds(3600))
    let bottom = FakeLayer<String, Int>(clock: clock)
    bottom.seed(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(10))), for: "a")
    let chain = try CacheChain<String, Int>([top, bottom])
    _ = try await chain.value(for: "a")
    clock.advance(by: .seconds(10))
    #expect(top.value(for: "a") == nil)
    #expect(try await chain.value(for: "a") == nil)
  }

  @Test func anUpperLayersShorterTimeToLiveCapsTheBackfill() async throws {
    let top = try memory(timeToLive: .seconds(5))
    let bottom = FakeLayer<String, Int>()
    bottom.seed(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(3600))), for: "a")
    let chain = try CacheChain<String, Int>([top, bottom])
    _ = try await chain.value(for: "a")
    #expect(top.entry(for: "a")?.expiresAt == clock.now.advanced(by: .seconds(5)))
  }

  @Test func backgroundBackfillReturnsFirstAndCopiesLater() async throws {
    let top = FakeLayer<String, Int>()
    let bottom = FakeLayer<String, Int>()
    bottom.seed(CacheEntry(1), for: "a")
    top.hold(.insert)
    let chain = try CacheChain<String, Int>([top, bottom], configuration: .init(backfill: .background))
    #expect(try await chain.value(for: "a") == 1, "the lookup does not wait for the held back-fill")
    await top.waitForHeld(1, .insert)
    #expect(top.storedEntries["a"] == nil)
    top.release(.insert)
    await chain.waitForBackfills()
    #expect(top.storedEntries["a"] == CacheEntry(1))
    #expect(chain.coordinator.isIdle)
  }

  @Test func chainsNest() async throws {
    let top = try memory()
    let innerTop = FakeLayer<String, Int>()
    let innerBottom = FakeLayer<String, Int>()
    innerBottom.seed(CacheEntry(5), for: "a")
    let inner = try CacheChain<String, Int>([innerTop, innerBottom])
    let outer = try CacheChain<String, Int>([top, inner])
    #expect(outer.front === top)
    #expect(try await outer.value(for: "a") == 5)
    #expect(top.value(for: "a") == 5)
    #expect(innerTop.storedEntries["a"] == CacheEntry(5))

    try await outer.insert(6, for: "b")
    #expect(innerBottom.storedEntries["b"] == CacheEntry(6))
    try await outer.removeValue(for: "a")
    #expect(innerBottom.storedEntries["a"] == nil && top.value(for: "a") == nil)
  }

  @Test func theFrontOfANestedChainServesSynchronousHits() throws {
    let top = try memory()
    let inner = try CacheChain<String, Int>([top, FakeLayer<String, Int>()])
    let outer = try CacheChain<String, Int>([inner, FakeLayer<String, Int>()])
    #expect(outer.front === top)
    #expect(try CacheChain<String, Int>([FakeLayer<String, Int>(), top]).front == nil)
  }

  @Test func anEmptyChainIsATypedError() {
    let error = #expect(throws: AsyncCacheError.self) {
      try CacheChain<String, Int>([any AsyncCacheLayer<String, Int>]())
    }
    #expect(error?.code == .invalidConfiguration)
  }

  // MARK: Writes

  @Test func insertWritesEveryLayerTopDown() async throws {
    let top = RecordingLayer(try memory())
    let bottom = RecordingLayer(FakeLayer<String, Int>())
    let chain = try CacheChain<String, Int>([top, bottom])
    let expiry = clock.now.advanced(by: .seconds(1))
    try await chain.insert(1, for: "a", expiresAt: expiry)
    #expect(top.calls == [.insert("a", expiresAt: expiry)])
    #expect(bottom.calls == [.insert("a", expiresAt: expiry)])
    try await chain.removeAll()
    #expect(top.calls.last == .removeAll && bottom.calls.last == .removeAll)
  }

  @Test func memoryPressureReachesEveryLayer() async throws {
    let top = try memory()
    let bottom = FakeLayer<String, Int>()
    try top.insert(1, for: "a")
    let chain = try CacheChain<String, Int>([top, bottom])
    await chain.handleMemoryPressure(.critical)
    #expect(top.count == 0)
    #expect(bottom.memoryPressureLevels == [.critical])
  }

  // MARK: Failure policy

  @Test func aSkippedLayersFailedLookupIsRecordedAndFallsThrough() async throws {
    let failures = Locked<[LayerFailure]>([])
    let broken = FakeLayer<String, Int>()
    broken.fail(.lookup, with: TestError("disk gone"))
    let bottom = FakeLayer<String, Int>()
    bottom.seed(CacheEntry(3), for: "a")
    let chain = try CacheChain<String, Int>(
      [.init(try memory()), .init(broken, failurePolicy: .skip, name: "disk"), .init(bottom)],
      configuration: .init(onFailure: { failure in failures.withLock { $0.append(failure) } })
    )
    #expect(try await chain.value(for: "a") == 3)
    try #require(chain.statistics.tiers.count == 3)
    let statistics = chain.statistics.tiers[1]
    #expect(statistics.failures == 1 && statistics.misses == 1)
    #expect(statistics.lastFailure?.error as? TestError == TestError("disk gone"))
    #expect(failures.withLock { $0.map(\.operation) } == [.lookup])
    #expect(failures.withLock { $0.map(\.layerName) } == ["disk"])
    #expect(broken.storedEntries["a"] == CacheEntry(3), "its inserts still work, so it is back-filled")
  }

  @Test func layerFailuresAreEventsOfTheChainAndOfTheLoadingCacheOverIt() async throws {
    let handled = Locked<[LayerFailure]>([])
    let broken = FakeLayer<String, Int>()
    broken.fail(.lookup, with: TestError("disk gone"))
    let chain = try CacheChain<String, Int>(
      [.init(try memory()), .init(broken, failurePolicy: .skip, name: "disk")],
      configuration: .init(onFailure: { failure in handled.withLock { $0.append(failure) } }))
    let cache = try LoadingCache(chain: chain, origin: ClosureFetcher<String, Int> { $0.count })
    let chainEvents = chain.events()
    let cacheEvents = cache.events()
    #expect(try await cache.value(for: "abc") == 3)
    try await chain.removeAll()  // the broken layer's removal works: no failure
    let expected = "layerFailed abc: layer 1 (disk) failed during lookup: TestError(disk gone)"
    #expect(await chainEvents.drained().map(\.description) == [expected])
    #expect(await cacheEvents.drained().map(\.description).filter { $0.hasPrefix("layerFailed") } == [expected])
    #expect(handled.withLock { $0.map(\.description) } == ["layer 1 (disk) failed during lookup: TestError(disk gone)"])
  }

  @Test func aChainsEventSequenceEndsWhenTheChainGoesAway() async throws {
    var chain: CacheChain<String, Int>? = try CacheChain<String, Int>([.init(FakeLayer<String, Int>())])
    let events = chain!.events()
    chain = nil
    var count = 0
    for await _ in events { count += 1 }  // ends: the chain is gone
    #expect(count == 0)
  }

  @Test func aPropagatingLayersFailureIsATypedErrorNamingTheLayer() async throws {
    let broken = FakeLayer<String, Int>()
    broken.fail(.lookup, with: TestError())
    let chain = try CacheChain<String, Int>([.init(try memory()), .init(broken, name: "redis")])
    let error = await #expect(throws: AsyncCacheError.self) { try await chain.value(for: "a") }
    #expect(error?.code == .layerFailure)
    #expect(error?.message.contains("layer 1 (redis)") == true)
    #expect(error?.message.contains("lookup") == true)
    #expect(error?.underlying as? TestError == TestError())
    try #require(chain.statistics.tiers.count == 2)
    #expect(chain.statistics.tiers[1].failures == 1)
  }

  @Test func cancellationPassesThroughUnwrapped() async throws {
    let held = FakeLayer<String, Int>()
    held.hold(.lookup)
    let chain = try CacheChain<String, Int>([.init(held, failurePolicy: .skip)])
    let lookup = Task { try await chain.value(for: "a") }
    await held.waitForHeld(1, .lookup)
    lookup.cancel()
    #expect(await lookup.result.isCancellation)
    try #require(chain.statistics.tiers.count == 1)
    #expect(chain.statistics.tiers[0].failures == 0, "cancellation is not a layer failure")
  }

  @Test func aSkippedLayersFailedInsertLeavesItWithoutTheKey() async throws {
    let top = try memory()
    let flaky = FakeLayer<String, Int>()
    flaky.seed(CacheEntry(1), for: "a")
    flaky.fail(.insert, with: TestError())
    let bottom = FakeLayer<String, Int>()
    let chain = try CacheChain<String, Int>([.init(top), .init(flaky, failurePolicy: .skip), .init(bottom)])
    try await chain.insert(2, for: "a")
    #expect(top.value(for: "a") == 2)
    #expect(flaky.storedEntries["a"] == nil, "the old value must not come back later")
    #expect(bottom.storedEntries["a"] == CacheEntry(2))
  }

  @Test func aPropagatingLayersFailedInsertRemovesTheKeyEverywhere() async throws {
    let top = try memory()
    let flaky = FakeLayer<String, Int>()
    flaky.fail(.insert, with: TestError())
    let bottom = FakeLayer<String, Int>()
    bottom.seed(CacheEntry(1), for: "a")
    let chain = try CacheChain<String, Int>([top, flaky, bottom])
    await #expect(throws: AsyncCacheError.self) { try await chain.insert(2, for: "a") }
    #expect(top.value(for: "a") == nil)
    #expect(bottom.storedEntries["a"] == nil)
  }

  @Test func removalTriesEveryLayerAndThenThrowsTheFirstFailure() async throws {
    let top = try memory()
    let flaky = FakeLayer<String, Int>()
    flaky.fail(.remove, with: TestError("first"))
    flaky.fail(.removeAll, with: TestError("first"))
    let bottom = FakeLayer<String, Int>()
    try top.insert(1, for: "a")
    bottom.seed(CacheEntry(1), for: "a")
    let chain = try CacheChain<String, Int>([top, flaky, bottom])
    let error = await #expect(throws: AsyncCacheError.self) { try await chain.removeValue(for: "a") }
    #expect(error?.underlying as? TestError == TestError("first"))
    #expect(top.value(for: "a") == nil && bottom.storedEntries["a"] == nil)
    bottom.seed(CacheEntry(1), for: "b")
    await #expect(throws: AsyncCacheError.self) { try await chain.removeAll() }
    #expect(bottom.storedEntries.isEmpty)
  }

  // MARK: Reads overtaken by writes

  @Test func aLookupOvertakenByAWriteDoesNotBackfillItsOlderValue() async throws {
    let top = try memory()
    let bottom = FakeLayer<String, Int>()
    bottom.seed(CacheEntry(1), for: "a")
    // The lookup reads the old value, then waits before returning it.
    bottom.hold(.lookup, phase: .afterApplying)
    let chain = try CacheChain<String, Int>([top, bottom])
    let lookup = Task { try await chain.value(for: "a") }
    await bottom.waitForHeld(1, .lookup)
    try await chain.insert(2, for: "a")
    bottom.release(.lookup)
    #expect(try await lookup.value == 1, "the lookup returns what it found")
    #expect(top.value(for: "a") == 2, "but does not copy it over the newer write")
    #expect(bottom.storedEntries["a"] == CacheEntry(2))
    #expect(chain.coordinator.isIdle)
  }

  @Test func aLookupOvertakenByRemoveAllDoesNotBackfill() async throws {
    let top = try memory()
    let bottom = FakeLayer<String, Int>()
    bottom.seed(CacheEntry(1), for: "a")
    bottom.hold(.lookup, phase: .afterApplying)
    let chain = try CacheChain<String, Int>([top, bottom])
    let lookup = Task { try await chain.value(for: "a") }
    await bottom.waitForHeld(1, .lookup)
    try await chain.removeAll()
    bottom.release(.lookup)
    _ = try await lookup.value
    #expect(top.value(for: "a") == nil)
  }

  @Test func writesToOneKeyAreAppliedOneAtATime() async throws {
    let top = FakeLayer<String, Int>()
    let bottom = FakeLayer<String, Int>()
    let chain = try CacheChain<String, Int>([top, bottom])
    bottom.hold(.insert)
    let first = Task { try await chain.insert(1, for: "a") }
    await bottom.waitForHeld(1, .insert)
    let second = Task { try await chain.insert(2, for: "a") }
    // The second write queues behind the first instead of overwriting the top layer now.
    await chain.coordinator.waitForQueuedWriters(1, for: "a")
    #expect(top.storedEntries["a"] == CacheEntry(1))
    #expect(top.callCount(.insert) == 1)
    bottom.release(.insert)
    try await first.value
    try await second.value
    #expect(top.storedEntries["a"] == CacheEntry(2))
    #expect(bottom.storedEntries["a"] == CacheEntry(2))
    #expect(chain.coordinator.isIdle)
  }
}
