import AsyncCacheTesting
import TestSupport
import Testing

@testable import AsyncCache

/// A latch that opens once `count` tasks arrived (behind `Locked`, which ThreadSanitizer sees).
/// A cancelled task stops waiting, so that a test whose loads never meet ends at its time limit.
final class ArrivalLatch: Sendable {
  private let state: Locked<(count: Int, nextID: UInt64, waiting: [UInt64: CheckedContinuation<Void, Never>])>
  init(_ count: Int) { state = Locked((count, 0, [:])) }

  func arriveAndWait() async {
    let id = state.withLock { state in
      state.nextID += 1
      return state.nextID
    }
    await withTaskCancellationHandler {
      await withCheckedContinuation { continuation in
        let ready = state.withLock { state -> [CheckedContinuation<Void, Never>] in
          state.count -= 1
          // Read under the lock: either this sees the cancellation, or `onCancel` finds the waiter.
          if Task.isCancelled { return [continuation] }
          state.waiting[id] = continuation
          guard state.count <= 0 else { return [] }
          defer { state.waiting = [:] }
          return Array(state.waiting.values)
        }
        for waiter in ready { waiter.resume() }
      }
    } onCancel: {
      state.withLock { $0.waiting.removeValue(forKey: id) }?.resume()
    }
  }
}

/// The load table's operations under the races a service makes: a request cancelled as it
/// starts its load, a prefetch withdrawn as it joins, a bulk request cancelled midway, close()
/// racing requests, loads that request each other once both run, a load that loses its last
/// request before a retry. Each ends with the table, the dependency graph and the chain's
/// coordinator at rest.
@Suite(.timeLimit(.minutes(3))) struct LoadingCacheRaceTests {
  func expectAtRest<Key, Value>(_ cache: LoadingCache<Key, Value>, sourceLocation: SourceLocation = #_sourceLocation)
    async
  {
    await cache.waitForNoLoads()
    let statistics = cache.statistics
    #expect(statistics.loadsInFlight == 0, sourceLocation: sourceLocation)
    #expect(statistics.requestsWaiting == 0, sourceLocation: sourceLocation)
    #expect(statistics.urgentLoadsInFlight == 0, sourceLocation: sourceLocation)
    #expect(statistics.loadsWaitingForUrgentWork == 0, sourceLocation: sourceLocation)
    #expect(cache.recordedLoadWaits == 0, sourceLocation: sourceLocation)
    #expect(cache.chain.coordinator.isIdle, sourceLocation: sourceLocation)
  }

  func isRecursive<T>(_ result: Result<T, any Error>) -> Bool {
    if case .failure(let error) = result { return AsyncCacheError.isRecursiveLoad(error) }
    return false
  }

  // MARK: Cancellation right after joining

  @Test func aRequestCancelledRightAfterItStartsItsLoadIsAnsweredAndCounted() async throws {
    let origin = GatedFetcher<Int, Int> { $0 }
    let cache = try LoadingCache(layers: [try MemoryLayer<Int, Int>()], origin: origin)
    for key in 0..<300 {
      let task = Task { try await cache.value(for: key) }
      task.cancel()
      let result = await task.result
      #expect(throws: CancellationError.self) { try result.get() }
    }
    await expectAtRest(cache)
    let statistics = cache.statistics
    #expect(statistics.loads == statistics.cancelledLoads)
    #expect(statistics.cancelledRequests == statistics.loads)
  }

  @Test func aPrefetchWithdrawnWhileItJoinsNeverHangsAndLeavesNothing() async throws {
    let origin = GatedFetcher<Int, Int> { $0 }
    let cache = try LoadingCache(layers: [try MemoryLayer<Int, Int>()], origin: origin)
    for key in 0..<300 {
      let ticket = cache.makePrefetchTicket()
      let prefetch = Task { await cache.prefetch(key, ticket: ticket, skipsTopLayer: false) }
      if key % 2 == 0 { await Task.yield() }
      cache.withdraw(ticket, for: key)
      guard case .cancelled = await prefetch.value else {
        Issue.record("prefetch \(key) was not cancelled")
        continue
      }
    }
    await expectAtRest(cache)
    let statistics = cache.statistics
    #expect(statistics.loads == statistics.cancelledLoads)
  }

  // MARK: Bulk requests

  @Test func aBulkRequestCancelledMidwayLeavesTheSharedLoadToItsOtherRequest() async throws {
    let origin = GatedFetcher<Int, Int> { $0 * 10 }
    let cache = try LoadingCache(layers: [try MemoryLayer<Int, Int>()], origin: origin)
    let single = Task { try await cache.value(for: 2) }
    await cache.waitForRequests(1, for: 2)
    let bulk = Task { await cache.values(for: [1, 2, 3]) }
    await cache.waitForRequests(2, for: 2)
    await cache.waitForRequests(1, for: 3)
    // The load of 1 is registered before it asks the origin: release its fetch once it is held.
    await origin.waitForFetches(1, for: 1)
    #expect(origin.release(1) == 1)
    await cache.waitForNoLoadOf(1)
    bulk.cancel()
    let outcome = await bulk.value
    #expect(outcome.values == [1: 10])
    #expect(outcome.failures.count == 2)
    #expect(outcome.failures.values.allSatisfy { $0 is CancellationError })
    await origin.waitForFetches(1, for: 2)
    origin.release(2)
    #expect(try await single.value == 20)
    await expectAtRest(cache)
    let statistics = cache.statistics
    #expect(statistics.loads == 3)
    #expect(statistics.coalescedRequests == 1)
    #expect(statistics.cancelledRequests == 2)
    #expect(statistics.cancelledLoads == 1)
  }

  @Test func failingFastWithARememberedErrorJoinsNothing() async throws {
    let origin = GatedFetcher<Int, Int> { $0 }
    let cache = try LoadingCache(
      layers: [try MemoryLayer<Int, Int>()], origin: origin,
      configuration: .init(negativeCaching: NegativeCachingPolicy(timeToLive: .seconds(60), remembers: { _ in true })))
    let first = Task { try await cache.value(for: 2) }
    await origin.waitForFetches(1, for: 2)
    origin.release(2, throwing: TestError("gone"))
    await #expect(throws: TestError.self) { try await first.value }
    await #expect(throws: TestError.self) { try await cache.allValues(for: [1, 2, 3]) }
    #expect(cache.statistics.negativeHits == 1)
    #expect(cache.statistics.loads == 1, "no key of a request failing fast is loaded")
    let partial = Task { await cache.values(for: [1, 2]) }
    await origin.waitForFetches(1, for: 1)
    origin.release(1)
    let outcome = await partial.value
    #expect(outcome.values == [1: 1])
    #expect(outcome.failures[2] is TestError)
    #expect(cache.statistics.negativeHits == 2)
    await expectAtRest(cache)
  }

  // MARK: close() racing requests

  @Test func requestsRacingCloseAreAnsweredOrRefused() async throws {
    for _ in 0..<40 {
      let origin = GatedFetcher<Int, Int> { $0 }
      origin.open()
      let cache = try LoadingCache(layers: [try MemoryLayer<Int, Int>()], origin: origin)
      let requests = (0..<16).map { key in Task { try await cache.value(for: key % 4) } }
      let bulk = Task { await cache.values(for: [0, 1, 5, 6]) }
      let closing = Task { try await cache.close() }
      for request in requests {
        switch await request.result {
        case .success(let value): #expect([0, 1, 2, 3].contains(value))
        case .failure(let error): #expect((error as? AsyncCacheError)?.code == .closed, "\(error)")
        }
      }
      let outcome = await bulk.value
      for error in outcome.failures.values { #expect((error as? AsyncCacheError)?.code == .closed, "\(error)") }
      try await closing.value
      #expect(cache.statistics.loadsInFlight == 0)
    }
  }

  @Test func closeTwiceConcurrentlyAndCancelledAndRunAfterClose() async throws {
    let origin = GatedFetcher<Int, Int> { $0 }
    let cache = try LoadingCache(layers: [try MemoryLayer<Int, Int>()], origin: origin)
    let request = Task { try await cache.value(for: 1) }
    await origin.waitForFetches(1, for: 1)
    let first = Task { try await cache.close() }
    let second = Task { try await cache.close() }
    while !cache.isClosed, !Task.isCancelled { await Task.yield() }
    await #expect(throws: AsyncCacheError.self) { try await cache.value(for: 2) }
    let third = Task { try await cache.close() }
    third.cancel()
    await #expect(throws: CancellationError.self) { try await request.value }
    try await first.value
    try await second.value
    try await third.value
    await #expect(throws: AsyncCacheError.self) { try await cache.run() }
    try await cache.close()
  }

  // MARK: Recursion

  @Test func aCycleThroughABulkRequestInsideALoadFails() async throws {
    let reference = CacheReference<String, Int>()
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()],
      origin: ClosureFetcher { key in
        switch key {
        case "a": return try await reference.cache.allValues(for: ["b", "c"]).values.reduce(0, +)
        case "b": return try await reference.cache.value(for: "a") + 1
        default: return 7
        }
      })
    reference.cache = cache
    let result = await outcome { try await cache.value(for: "a") }
    #expect(isRecursive(result), "\(result)")
    await expectAtRest(cache)
  }

  @Test func aCycleThroughValuesForInsideALoadFails() async throws {
    let reference = CacheReference<String, Int>()
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()],
      origin: ClosureFetcher { key in
        switch key {
        case "a":
          let outcome = await reference.cache.values(for: ["b", "c"])
          if let error = outcome.failures.values.first { throw error }
          return outcome.values.values.reduce(0, +)
        case "b": return try await reference.cache.value(for: "a") + 1
        default: return 7
        }
      })
    reference.cache = cache
    let result = await outcome { try await cache.value(for: "a") }
    #expect(isRecursive(result), "\(result)")
    await expectAtRest(cache)
  }

  /// Two loads that run (held until both do), then each request the other's key, directly or
  /// through a bulk request: one of them closes a cycle found after it joined.
  @Test(arguments: [false, true])
  func twoRunningLoadsThatJoinEachOtherDoNotHang(throughBulkRequests: Bool) async throws {
    for _ in 0..<50 {
      let reference = CacheReference<String, Int>()
      let latch = ArrivalLatch(2)
      let cache = try LoadingCache(
        layers: [MemoryLayer<String, Int>()],
        origin: ClosureFetcher { key in
          await latch.arriveAndWait()
          let other = key == "a" ? "b" : "a"
          guard throughBulkRequests else { return try await reference.cache.value(for: other) + 1 }
          return try await reference.cache.allValues(for: [other, "x"]).values.reduce(0, +)
        })
      reference.cache = cache
      async let a = outcome { try await cache.value(for: "a") }
      async let b = outcome { try await cache.value(for: "b") }
      let (ra, rb) = await (a, b)
      #expect(isRecursive(ra) || isRecursive(rb), "\(ra) \(rb)")
      await expectAtRest(cache)
    }
  }

  // MARK: The gate

  @Test func aLoadWhoseRequestLeftForAPrefetchWaitsAtTheGateBeforeItsRetry() async throws {
    let clock = ManualClock()
    let origin = TrackingFetcher()
    let policy = RetryPolicy(maximumAttempts: 3, initialDelay: .milliseconds(100), jitter: 0)
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, String>()], origin: origin,
      configuration: .init(clock: clock, retryPolicy: policy))
    let request = Task { try await cache.value(for: "d") }
    await origin.gate.waitForFetches(1, for: "d")
    let ticket = cache.makePrefetchTicket()
    let prefetch = Task { await cache.prefetch("d", ticket: ticket, skipsTopLayer: false) }
    await cache.waitForRequests(2, for: "d")
    origin.gate.release("d", throwing: TestError("flaky"))
    await clock.waitForSleepers(1)
    request.cancel()
    await #expect(throws: CancellationError.self) { try await request.value }
    #expect(!cache.hasUrgentLoads)

    let onScreen = Task { try await cache.value(for: "u") }
    await origin.gate.waitForFetches(1, for: "u")
    clock.advance(by: .milliseconds(100))
    await cache.waitForLoadsWaitingForUrgentWork(1)
    #expect(origin.callCount(for: "d") == 1, "the retry of a load that lost its request waits")
    origin.gate.release("u")
    #expect(try await onScreen.value == "value of u")
    await origin.gate.waitForFetches(1, for: "d")
    origin.gate.release("d")
    guard case .loaded = await prefetch.value else {
      Issue.record("the prefetch was not loaded")
      return
    }
    await expectAtRest(cache)
  }
}

extension LoadingCache {
  /// Returns once no load of `key` is registered.
  func waitForNoLoadOf(_ key: Key) async {
    await loadTable.waitUntil(orCancellation: true) { $0.waiterCount(for: key) == 0 }
  }
}
