import AsyncCache
import AsyncCacheTesting
import TestSupport
import Testing

@Suite("LoadingCache bulk requests", .timeLimit(.minutes(3)))
struct LoadingCacheBulkTests {

  static func cache(_ origin: GatedFetcher<String, String>) throws -> (
    LoadingCache<String, String>, MemoryLayer<String, String>
  ) {
    let memory = try MemoryLayer<String, String>()
    return (try LoadingCache(layers: [memory], origin: origin), memory)
  }

  @Test("values(for:) returns what it found or loaded, and each failure by key; cached keys skip the origin")
  func partial() async throws {
    let origin = GatedFetcher<String, String> { "loaded \($0)" }
    let (cache, memory) = try Self.cache(origin)
    try memory.insert("cached a", for: "a")
    let request = Task { await cache.values(for: ["a", "b", "c", "b"]) }
    await origin.waitForFetches(2)
    #expect(origin.release("b") == 1)
    #expect(origin.release("c", throwing: TestError("failure")) == 1)
    let result = await request.value
    #expect(result.values == ["a": "cached a", "b": "loaded b"])
    #expect(Array(result.failures.keys) == ["c"])
    #expect(result.failures["c"] is TestError)
    #expect(origin.calls.sorted() == ["b", "c"], "a was cached, b asked once")
  }

  @Test("a bulk request joins a single request's load in flight, and the other way around")
  func joins() async throws {
    let origin = GatedFetcher<String, String> { "loaded \($0)" }
    let (cache, _) = try Self.cache(origin)
    let single = Task { try await cache.value(for: "a") }
    await origin.waitForFetches(1, for: "a")
    let bulk = Task { await cache.values(for: ["a", "b"]) }
    await cache.waitForRequests(2, for: "a")
    await origin.waitForFetches(1, for: "b")
    let late = Task { try await cache.value(for: "b") }
    await cache.waitForRequests(2, for: "b")
    #expect(origin.releaseAll() == 2)
    #expect(try await single.value == "loaded a")
    #expect(try await late.value == "loaded b")
    #expect(await bulk.value.values == ["a": "loaded a", "b": "loaded b"])
    #expect(origin.callCount == 2)
  }

  @Test("allValues(for:) fails fast with the first error and cancels the loads no one else waits for")
  func allOrNothing() async throws {
    let origin = GatedFetcher<String, String> { "loaded \($0)" }
    let (cache, _) = try Self.cache(origin)
    let shared = Task { try await cache.value(for: "c") }
    await origin.waitForFetches(1, for: "c")
    let request = Task { try await cache.allValues(for: ["a", "b", "c"]) }
    await origin.waitForFetches(3)
    await cache.waitForRequests(2, for: "c")
    #expect(origin.release("a", throwing: TestError("failure")) == 1)
    await #expect(throws: TestError.self) { try await request.value }
    // b's load had no other waiter: it is cancelled. c's goes on for the single request.
    #expect(origin.releaseAll() == 1)
    #expect(origin.cancellationCount(for: "b") == 1)
    #expect(try await shared.value == "loaded c")
  }

  @Test("allValues(for:) returns every value when all load, and touches nothing for cached keys")
  func allSucceed() async throws {
    let origin = GatedFetcher<String, String> { "loaded \($0)" }
    let (cache, memory) = try Self.cache(origin)
    try memory.insert("cached a", for: "a")
    #expect(try await cache.allValues(for: ["a"]) == ["a": "cached a"])
    origin.open()
    #expect(try await cache.allValues(for: ["a", "b", "c"]) == ["a": "cached a", "b": "loaded b", "c": "loaded c"])
    #expect(origin.calls.sorted() == ["b", "c"])
  }

  @Test("cancelling a bulk request fails the keys still loading with CancellationError")
  func cancelled() async throws {
    let origin = GatedFetcher<String, String> { "loaded \($0)" }
    let (cache, _) = try Self.cache(origin)
    let request = Task { await cache.values(for: ["a", "b"]) }
    await origin.waitForFetches(2)
    #expect(origin.release("a") == 1)
    request.cancel()
    let result = await request.value
    #expect(result.failures["b"] is CancellationError)
    #expect(result.values["a"] == "loaded a" || result.failures["a"] is CancellationError)
    #expect(origin.cancellationCount(for: "b") == 1)
  }

  // MARK: Batch origin

  /// A batch origin held by a gate keyed by the batch's keys, in request order.
  static func batchCache(
    maximumBatchSize: Int = .max, policy: RetryPolicy = .never, clock: ManualClock = ManualClock()
  ) throws -> (
    LoadingCache<String, String>, single: GatedFetcher<String, String>,
    batches: GatedFetcher<[String], [String: String]>,
    lower: MemoryLayer<String, String>
  ) {
    let single = GatedFetcher<String, String> { "single \($0)" }
    let batches = GatedFetcher<[String], [String: String]> { keys in
      Dictionary(uniqueKeysWithValues: keys.filter { $0 != "absent" }.map { ($0, "batch \($0)") })
    }
    let lower = try MemoryLayer<String, String>()
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, String>(), lower], origin: single,
      batchOrigin: ClosureBatchFetcher(maximumBatchSize: maximumBatchSize) { try await batches.fetch($0) },
      configuration: .init(clock: clock, retryPolicy: policy))
    return (cache, single, batches, lower)
  }

  @Test("with a batch origin, the keys no layer has are fetched in one call and stored in every layer")
  func batch() async throws {
    let (cache, single, batches, lower) = try Self.batchCache()
    try lower.insert("below c", for: "c")
    let request = Task { await cache.values(for: ["a", "b", "c", "absent"]) }
    await batches.waitForFetches(1, for: ["a", "b", "absent"])
    #expect(batches.release(["a", "b", "absent"]) == 1)
    let result = await request.value
    #expect(result.values == ["a": "batch a", "b": "batch b", "c": "below c"])
    let missing = try #require(result.failures["absent"] as? AsyncCacheError)
    #expect(missing.code == .notFound && missing.message.contains("absent"))
    #expect(cache.cachedValue(for: "a") == "batch a" && lower.value(for: "b") == "batch b")
    #expect(cache.cachedValue(for: "c") == "below c", "a lower layer's value is copied up")
    #expect(single.callCount == 0 && batches.callCount == 1)
  }

  @Test("a batch joins single loads in flight, and single requests join the batch's loads")
  func batchJoins() async throws {
    let (cache, single, batches, _) = try Self.batchCache()
    let first = Task { try await cache.value(for: "a") }
    await single.waitForFetches(1, for: "a")
    let bulk = Task { try await cache.allValues(for: ["a", "b", "c"]) }
    await batches.waitForFetches(1, for: ["b", "c"])
    let late = Task { try await cache.value(for: "c") }
    await cache.waitForRequests(2, for: "c")
    single.release("a")
    batches.release(["b", "c"])
    #expect(try await bulk.value == ["a": "single a", "b": "batch b", "c": "batch c"])
    #expect(try await first.value == "single a")
    #expect(try await late.value == "batch c")
    #expect(single.callCount == 1 && batches.callCount == 1)
  }

  @Test("a batch that fails fails each of its keys, after the retry policy's attempts, shared by the batch")
  func batchFailureAndRetry() async throws {
    let clock = ManualClock()
    let policy = RetryPolicy(maximumAttempts: 2, initialDelay: .milliseconds(10), jitter: 0)
    let (cache, _, batches, _) = try Self.batchCache(policy: policy, clock: clock)
    let request = Task { await cache.values(for: ["a", "b"]) }
    await batches.waitForFetches(1, for: ["a", "b"])
    batches.release(["a", "b"], throwing: TestError("failure"))
    await clock.waitForSleepers(1)
    clock.advance(by: .milliseconds(10))
    await batches.waitForFetches(1, for: ["a", "b"])
    batches.release(["a", "b"], throwing: TestError("failure"))
    let result = await request.value
    #expect(result.values.isEmpty)
    #expect(result.failures["a"] is TestError && result.failures["b"] is TestError)
    #expect(batches.callCount == 2)
    #expect(cache.statistics.loadFailures == 2)
    #expect(cache.cachedValue(for: "a") == nil, "an error is not stored")
    batches.open()
    #expect(await cache.values(for: ["a", "b"]).values.count == 2, "the next request asks the origin again")
    #expect(batches.callCount == 3)
  }

  @Test("a write during a batch load wins: the batch's late value is not stored over it")
  func writeDuringBatchWins() async throws {
    let (cache, _, batches, lower) = try Self.batchCache()
    let bulk = Task { await cache.values(for: ["a", "b"]) }
    await batches.waitForFetches(1, for: ["a", "b"])
    try await cache.insert("written", for: "a")
    batches.release(["a", "b"])
    #expect(await bulk.value.values == ["a": "batch a", "b": "batch b"], "the waiting request gets its load's value")
    #expect(cache.cachedValue(for: "a") == "written" && lower.value(for: "a") == "written")
    #expect(cache.cachedValue(for: "b") == "batch b")
  }

  @Test("large batches are split by the origin's maximum batch size")
  func batchSize() async throws {
    let (cache, _, batches, _) = try Self.batchCache(maximumBatchSize: 2)
    batches.open()
    let result = await cache.values(for: ["a", "b", "c", "d", "e"])
    #expect(result.values.count == 5)
    #expect(Set(batches.calls) == [["a", "b"], ["c", "d"], ["e"]], "three batches, run concurrently")
  }

  @Test("cancelling a bulk request cancels its batch unless a request still waits for one of its keys")
  func batchCancellation() async throws {
    let (cache, _, batches, _) = try Self.batchCache()
    let abandoned = Task { await cache.values(for: ["a", "b"]) }
    await batches.waitForFetches(1, for: ["a", "b"])
    abandoned.cancel()
    let outcome = await abandoned.value
    #expect(outcome.failures.count == 2 && outcome.failures.values.allSatisfy { $0 is CancellationError })
    #expect(batches.wasCancelled(["a", "b"]), "no one else wanted the batch: the origin call is cancelled")

    let shared = Task { await cache.values(for: ["c", "d"]) }
    await batches.waitForFetches(1, for: ["c", "d"])
    let single = Task { try await cache.value(for: "d") }
    await cache.waitForRequests(2, for: "d")
    shared.cancel()
    _ = await shared.value
    #expect(!batches.wasCancelled(["c", "d"]), "d is still wanted: the batch goes on")
    batches.release(["c", "d"])
    #expect(try await single.value == "batch d")
    #expect(cache.cachedValue(for: "c") == nil, "c's load was abandoned: its late value is not stored")
  }

  @Test("allValues(for:) with a batch origin fails fast when one key is missing from the batch")
  func batchAllOrNothing() async throws {
    let (cache, _, batches, _) = try Self.batchCache()
    batches.open()
    let error = await #expect(throws: AsyncCacheError.self) { try await cache.allValues(for: ["a", "absent"]) }
    #expect(error?.code == .notFound)
  }

  @Test("a batch whose requests were all demoted waits for urgent work before it asks again")
  func demotedBatchWaitsAtTheGate() async throws {
    let clock = ManualClock()
    let policy = RetryPolicy(maximumAttempts: 2, initialDelay: .milliseconds(10), jitter: 0)
    let (cache, single, batches, _) = try Self.batchCache(policy: policy, clock: clock)
    let bulk = Task { await cache.values(for: ["a", "b"]) }
    await batches.waitForFetches(1, for: ["a", "b"])
    batches.release(["a", "b"], throwing: TestError("failure"))
    await clock.waitForSleepers(1)
    #expect(cache.demote("a") && cache.demote("b"))
    let onScreen = Task { try await cache.value(for: "u") }
    await single.waitForFetches(1, for: "u")
    clock.advance(by: .milliseconds(10))
    await cache.waitForLoadsWaitingForUrgentWork(2)
    #expect(batches.callCount == 1, "the retry holds back while the request's load runs")
    single.release("u")
    _ = try await onScreen.value
    await batches.waitForFetches(1, for: ["a", "b"])
    batches.release(["a", "b"])
    #expect(await bulk.value.values == ["a": "batch a", "b": "batch b"])
  }
}
