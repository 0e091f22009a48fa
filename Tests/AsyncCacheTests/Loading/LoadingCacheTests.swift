import AsyncCacheTesting
import Synchronization
import TestSupport
import Testing

@testable import AsyncCache

@Suite(.timeLimit(.minutes(3))) struct LoadingCacheTests {
  let clock = ManualClock()
  let memory: MemoryLayer<String, Int>

  init() throws {
    memory = try MemoryLayer(configuration: .init(clock: clock))
  }

  func cache(
    origin: some AsyncFetcher<String, Int>,
    below: [any AsyncCacheLayer<String, Int>] = [],
    timeToLive: Duration? = nil
  ) throws -> LoadingCache<String, Int> {
    try LoadingCache(
      layers: [memory] + below, origin: origin, configuration: .init(timeToLive: timeToLive, clock: clock))
  }

  // MARK: Hits and loads

  @Test func aMissLoadsFromTheOriginAndStoresInEveryLayer() async throws {
    let origin = GatedFetcher<String, Int> { $0.count }
    origin.open()
    let disk = FakeLayer<String, Int>()
    let cache = try cache(origin: origin, below: [disk])
    #expect(try await cache.value(for: "abc") == 3)
    #expect(memory.value(for: "abc") == 3)
    #expect(disk.storedEntries["abc"] == CacheEntry(3))
    #expect(try await cache.value(for: "abc") == 3)
    #expect(origin.callCount == 1, "the second request is a memory hit")
    #expect(cache.cachedValue(for: "abc") == 3)
    #expect(cache.cachedValue(for: "zz") == nil, "a cached lookup never loads")
    #expect(origin.callCount == 1)
  }

  @Test func aHitBelowTheMemoryLayerIsBackfilledWithoutAskingTheOrigin() async throws {
    let disk = FakeLayer<String, Int>()
    let expiry = clock.now.advanced(by: .seconds(30))
    disk.seed(CacheEntry(9, expiresAt: expiry), for: "a")
    let cache = try cache(origin: UnimplementedFetcher<String, Int>(), below: [disk])
    #expect(try await cache.value(for: "a") == 9)
    #expect(memory.entry(for: "a") == CacheEntry(9, expiresAt: expiry))
  }

  @Test func loadedValuesExpireAfterTheConfiguredTimeToLive() async throws {
    let calls = Atomic<Int>(0)
    let origin = ClosureFetcher<String, Int> { _ in calls.wrappingAdd(1, ordering: .relaxed).newValue }
    let cache = try cache(origin: origin, timeToLive: .seconds(60))
    #expect(try await cache.value(for: "a") == 1)
    clock.advance(by: .seconds(59))
    #expect(try await cache.value(for: "a") == 1)
    clock.advance(by: .seconds(1))
    #expect(try await cache.value(for: "a") == 2, "an expired value is loaded again")
  }

  @Test func insertedValuesUseTheirOwnTimeToLive() async throws {
    let cache = try cache(origin: UnimplementedFetcher<String, Int>(), timeToLive: .seconds(60))
    try await cache.insert(5, for: "a", timeToLive: .seconds(5))
    #expect(memory.entry(for: "a")?.expiresAt == clock.now.advanced(by: .seconds(5)))
    try await cache.insert(6, for: "b")
    #expect(memory.entry(for: "b")?.expiresAt == clock.now.advanced(by: .seconds(60)))
    try await cache.removeValue(for: "b")
    #expect(cache.cachedValue(for: "b") == nil)
    try await cache.removeAll()
    #expect(memory.count == 0)
  }

  @Test func aCacheWithoutAMemoryLayerOnTopStillLoadsAndCoalesces() async throws {
    let origin = GatedFetcher<String, Int> { _ in 1 }
    let disk = FakeLayer<String, Int>()
    let cache = try LoadingCache(layers: [disk], origin: origin)
    async let a = cache.value(for: "k")
    async let b = cache.value(for: "k")
    await cache.waitForWaiters(2, for: "k")
    await origin.waitForFetches(1, for: "k")
    origin.release("k")
    #expect(try await [a, b] == [1, 1])
    #expect(origin.callCount == 1)
    #expect(cache.cachedValue(for: "k") == nil)
    #expect(try await cache.value(for: "k") == 1)
    #expect(origin.callCount == 1, "served by the disk layer")
  }

  // MARK: Coalescing (RELIABILITY rows 1–3)

  @Test func concurrentRequestsShareOneOriginCall() async throws {
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let cache = try cache(origin: origin)
    let requests = (0..<100).map { _ in Task { try await cache.value(for: "k") } }
    await cache.waitForWaiters(100, for: "k")
    await origin.waitForFetches(1, for: "k")
    #expect(origin.callCount == 1)
    origin.release("k")
    for request in requests { #expect(try await request.value == 7) }
    #expect(origin.callCount(for: "k") == 1)
    let statistics = cache.statistics
    #expect(statistics.loads == 1 && statistics.coalescedRequests == 99)
    #expect(statistics.loadsInFlight == 0 && statistics.requestsWaiting == 0)
  }

  /// Row 1: the first of three waiters is cancelled.
  @Test func aCancelledWaiterGetsCancellationErrorPromptlyAndAlone() async throws {
    let origin = GatedFetcher<String, Int> { _ in 42 }
    let cache = try cache(origin: origin)
    let first = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    let second = Task { try await cache.value(for: "k") }
    let third = Task { try await cache.value(for: "k") }
    await cache.waitForWaiters(3, for: "k")

    first.cancel()
    #expect(await first.result.isCancellation, "while the origin is still held")
    #expect(origin.heldCount(for: "k") == 1)
    #expect(!origin.wasCancelled("k"))

    origin.release("k")
    #expect(try await second.value == 42)
    #expect(try await third.value == 42)
    #expect(origin.callCount(for: "k") == 1)
    #expect(!origin.wasCancelled("k"), "the origin ran once and was not cancelled")
    #expect(cache.statistics.cancelledRequests == 1 && cache.statistics.cancelledLoads == 0)
  }

  /// Row 2: all waiters are cancelled.
  @Test func whenEveryWaiterLeavesTheLoadIsCancelledAndTheNextRequestStartsAfresh() async throws {
    let origin = GatedFetcher<String, Int> { _ in 42 }
    let cache = try cache(origin: origin)
    let waiters = (0..<3).map { _ in Task { try await cache.value(for: "k") } }
    await cache.waitForWaiters(3, for: "k")
    await origin.waitForFetches(1, for: "k")
    for waiter in waiters {
      waiter.cancel()
      #expect(await waiter.result.isCancellation)
    }
    #expect(origin.wasCancelled("k"), "the gated origin observed its cancellation")
    #expect(cache.statistics.loadsInFlight == 0 && cache.statistics.requestsWaiting == 0)
    #expect(cache.loadTable.isEmpty)

    let next = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    origin.release("k")
    #expect(try await next.value == 42)
    #expect(origin.callCount(for: "k") == 2)
    #expect(cache.statistics.cancelledLoads == 1)
  }

  /// An abandoned load whose origin ignores cancellation must not store its late value over the
  /// value of the fresh load that followed, nor remove that load's record.
  @Test func anAbandonedLoadsLateValueIsNotStored() async throws {
    let origin = StubbornFetcher<String, Int> { _ in 0 }
    let cache = try cache(origin: origin)
    let abandoned = Task { try await cache.value(for: "k") }
    await origin.waitForCalls(1)
    abandoned.cancel()
    #expect(await abandoned.result.isCancellation)

    let fresh = Task { try await cache.value(for: "k") }
    await origin.waitForCalls(2)
    origin.finish(call: 2, with: 2)
    #expect(try await fresh.value == 2)
    #expect(memory.value(for: "k") == 2)

    origin.finish(call: 1, with: 1)  // the abandoned load finishes late…
    await cache.chain.coordinator.waitUntil { $0.readerCount(for: "k") == 0 }  // …and is done
    #expect(memory.value(for: "k") == 2, "its late value did not overwrite the fresh one")
    #expect(cache.statistics.loadsInFlight == 0)
  }

  @Test func anAbandonedLoadFinishingFirstRemovesOnlyItsOwnRecord() async throws {
    let origin = StubbornFetcher<String, Int> { _ in 0 }
    let cache = try cache(origin: origin)
    let abandoned = Task { try await cache.value(for: "k") }
    await origin.waitForCalls(1)
    abandoned.cancel()
    _ = await abandoned.result
    let fresh = Task { try await cache.value(for: "k") }
    await origin.waitForCalls(2)
    origin.finish(call: 1, with: 1)
    await cache.chain.coordinator.waitUntil { $0.readerCount(for: "k") == 1 }  // only the fresh load reads
    #expect(cache.statistics.loadsInFlight == 1, "the old load removed only its own record")
    #expect(cache.waitingRequestCount(for: "k") == 1)
    #expect(memory.value(for: "k") == nil)
    origin.finish(call: 2, with: 2)
    #expect(try await fresh.value == 2)
    #expect(memory.value(for: "k") == 2)
  }

  @Test func aCancelledWaiterOfADetachedLoadLeavesAndAbandonsIt() async throws {
    let origin = GatedFetcher<String, Int> { _ in 1 }
    let cache = try cache(origin: origin)
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    try await cache.insert(5, for: "k")  // detaches the load
    request.cancel()
    #expect(await request.result.isCancellation)
    #expect(origin.wasCancelled("k"), "its last waiter left, so the load was cancelled")
    #expect(cache.loadTable.isEmpty)
    #expect(memory.value(for: "k") == 5)
  }

  /// Row 3: the origin throws.
  @Test func anOriginErrorReachesEveryWaiterAndIsNotStored() async throws {
    let origin = GatedFetcher<String, Int> { _ in 1 }
    let cache = try cache(origin: origin)
    let waiters = (0..<3).map { _ in Task { try await cache.value(for: "k") } }
    await cache.waitForWaiters(3, for: "k")
    await origin.waitForFetches(1, for: "k")
    origin.release("k", throwing: TestError("offline"))
    for waiter in waiters {
      let result = await waiter.result
      #expect(throws: TestError("offline")) { try result.get() }
    }
    #expect(memory.count == 0)
    #expect(cache.statistics.loadFailures == 1)

    let retry = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    origin.release("k")
    #expect(try await retry.value == 1)
    #expect(origin.callCount(for: "k") == 2, "the next request tried the origin again")
  }

  @Test func aPropagatingLayerFailureReachesEveryWaiter() async throws {
    let disk = FakeLayer<String, Int>()
    disk.hold(.lookup)
    disk.fail(.lookup, with: TestError())
    let cache = try cache(origin: UnimplementedFetcher<String, Int>(), below: [disk])
    let waiters = (0..<2).map { _ in Task { try await cache.value(for: "k") } }
    await cache.waitForWaiters(2, for: "k")
    disk.release(.lookup)
    for waiter in waiters {
      let error = await #expect(throws: AsyncCacheError.self) { try await waiter.value }
      #expect(error?.code == .layerFailure)
    }
  }

  @Test func anAlreadyCancelledCallerStartsNoLoad() async throws {
    let origin = GatedFetcher<String, Int> { _ in 1 }
    let cache = try cache(origin: origin)
    let request = Task {
      withUnsafeCurrentTask { $0?.cancel() }
      return try await cache.value(for: "k")
    }
    #expect(await request.result.isCancellation)
    #expect(origin.callCount == 0)
    #expect(cache.statistics.loadsInFlight == 0)
  }

  // MARK: Writes win (RELIABILITY row 4)

  @Test func aRemovalDuringALoadWinsAndTheFinishedLoadRemovesOnlyItsOwnRecord() async throws {
    let origin = GatedFetcher<String, Int> { _ in 0 }
    let cache = try cache(origin: origin)
    let a = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    try await cache.removeValue(for: "k")

    let b = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(2, for: "k")  // B did not join A: it started a fresh load
    #expect(origin.callCount(for: "k") == 2)

    // Release A only (the oldest held fetch), after B started.
    let releasedA = origin.releaseOldest("k", returning: 1)
    #expect(releasedA)
    #expect(try await a.value == 1, "A's waiter still gets A's value")
    #expect(memory.value(for: "k") == nil, "but A does not store it")
    #expect(cache.statistics.loadsInFlight == 1, "and does not remove B's record")
    #expect(cache.waitingRequestCount(for: "k") == 1)

    origin.release("k", returning: 2)
    #expect(try await b.value == 2)
    #expect(memory.value(for: "k") == 2)
  }

  @Test func anInsertDuringALoadWins() async throws {
    let origin = GatedFetcher<String, Int> { _ in 0 }
    let disk = FakeLayer<String, Int>()
    let cache = try cache(origin: origin, below: [disk])
    let load = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    try await cache.insert(10, for: "k")
    #expect(try await cache.value(for: "k") == 10, "a request after the insert does not join the old load")
    origin.release("k", returning: 1)
    #expect(try await load.value == 1)
    #expect(memory.value(for: "k") == 10)
    #expect(disk.storedEntries["k"] == CacheEntry(10))
  }

  /// Regression: loads were made unjoinable only before a write, so a load that started during
  /// a removal (overtaken: it stores nothing) still answered requests made after the removal
  /// returned, with the removed value.
  @Test func aRequestAfterARemovalDoesNotJoinALoadStartedDuringIt() async throws {
    let disk = FakeLayer<String, Int>()
    disk.seed(CacheEntry(1), for: "k")
    let origin = GatedFetcher<String, Int> { _ in 2 }
    origin.open()
    let cache = try cache(origin: origin, below: [disk])
    disk.hold(.remove)
    let removal = Task { try await cache.removeValue(for: "k") }
    await disk.waitForHeld(1, .remove)
    disk.hold(.lookup, phase: .afterApplying)  // the lookup reads 1, then waits
    let during = Task { try await cache.value(for: "k") }
    await disk.waitForHeld(1, .lookup)
    disk.release(.remove)
    try await removal.value

    let after = Task { try await cache.value(for: "k") }
    await cache.waitForWaiters(1, for: "k")
    disk.release(.lookup)
    #expect(try await during.value == 1, "a request made during the removal may see the old value")
    #expect(try await after.value == 2, "a request made after it must not")
  }

  @Test func aRequestAfterAnInsertDoesNotJoinALoadStartedDuringIt() async throws {
    let disk = FakeLayer<String, Int>()
    disk.seed(CacheEntry(1), for: "k")
    let cache = try LoadingCache(layers: [disk], origin: UnimplementedFetcher<String, Int>())
    disk.hold(.insert)
    let insert = Task { try await cache.insert(5, for: "k") }
    await disk.waitForHeld(1, .insert)
    disk.hold(.lookup, phase: .afterApplying)
    let during = Task { try await cache.value(for: "k") }
    await disk.waitForHeld(1, .lookup)
    disk.release(.insert)
    try await insert.value
    let after = Task { try await cache.value(for: "k") }
    await cache.waitForWaiters(1, for: "k")
    disk.release(.lookup)
    #expect(try await during.value == 1)
    #expect(try await after.value == 5)
  }

  @Test func theLoadRunsWithTheTaskLocalValuesOfTheRequestThatStartedIt() async throws {
    let origin = ClosureFetcher<String, String> { _ in RequestContext.name }
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: origin)
    let value = try await RequestContext.$name.withValue("first") { try await cache.value(for: "k") }
    #expect(value == "first")
  }

  @Test func removeAllDuringALoadWins() async throws {
    let origin = GatedFetcher<String, Int> { _ in 0 }
    let cache = try cache(origin: origin)
    let load = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    try await cache.removeAll()
    origin.release("k", returning: 1)
    #expect(try await load.value == 1)
    #expect(memory.count == 0)
  }

  // MARK: Priority

  @Test func aHigherPriorityRequestEscalatesTheLoad() async throws {
    let gate = GatedFetcher<String, Int> { _ in 1 }
    // The load's task is escalated just after the request joins it (outside the table's lock):
    // the origin sees it happen, and the gate opens only then.
    let (escalations, escalated) = AsyncStream.makeStream(of: TaskPriority.self)
    let origin = ClosureFetcher<String, Int> { key in
      guard #available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, visionOS 26.0, *) else {
        return try await gate.fetch(key)
      }
      return try await withTaskPriorityEscalationHandler {
        try await gate.fetch(key)
      } onPriorityEscalated: { _, priority in
        escalated.yield(priority)
      }
    }
    let cache = try cache(origin: origin)
    let low = Task(priority: .low) { try await cache.value(for: "k") }
    await gate.waitForFetches(1, for: "k")
    let high = Task(priority: .high) { try await cache.value(for: "k") }
    await cache.waitForWaiters(2, for: "k")
    if #available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, visionOS 26.0, *) {
      for await priority in escalations where priority >= .high { break }
    }
    gate.release("k")
    _ = try await (low.value, high.value)
    let priority = try #require(gate.releasedPriorities(for: "k").first)
    #expect(priority >= .high, "the load ran at the highest priority of its waiters")
  }

  @Test func aWaiterEscalatedWhileWaitingEscalatesTheLoad() async throws {
    let origin = GatedFetcher<String, Int> { _ in 1 }
    let cache = try cache(origin: origin)
    let waiter = Task(priority: .low) { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    await cache.waitForWaiters(1, for: "k")
    guard #available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, visionOS 26.0, *) else {
      origin.release("k")
      return
    }
    waiter.escalatePriority(to: .high)
    origin.release("k")
    _ = try await waiter.value
    let priority = try #require(origin.releasedPriorities(for: "k").first)
    #expect(priority >= .high)
  }
}

enum RequestContext {
  @TaskLocal static var name = "none"
}
