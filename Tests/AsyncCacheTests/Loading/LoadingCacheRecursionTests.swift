import AsyncCacheTesting
import Synchronization
import Testing

@testable import AsyncCache

/// A reference to a cache that its own origin uses, set once the cache exists.
final class CacheReference<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  private let stored = Mutex<LoadingCache<Key, Value>?>(nil)

  var cache: LoadingCache<Key, Value> {
    get { stored.withLock { $0! } }
    set { stored.withLock { $0 = newValue } }
  }
}

/// How `body` ended.
func outcome<T>(_ body: () async throws -> T) async -> Result<T, any Error> {
  do { return .success(try await body()) } catch { return .failure(error) }
}

/// RELIABILITY.md row 18: a load that waits on itself fails at once with a typed error, and
/// leaves nothing behind.
@Suite(.timeLimit(.minutes(3))) struct LoadingCacheRecursionTests {
  /// Whether `result` failed with `recursiveLoad`.
  func isRecursive<T>(_ result: Result<T, any Error>) -> Bool {
    if case .failure(let error) = result { return (error as? AsyncCacheError)?.code == .recursiveLoad }
    return false
  }

  /// Expects the in-flight table of `cache` to be empty and no wait of its loads recorded.
  func expectAtRest<Key, Value>(_ cache: LoadingCache<Key, Value>, sourceLocation: SourceLocation = #_sourceLocation) {
    let statistics = cache.statistics
    #expect(statistics.loadsInFlight == 0, sourceLocation: sourceLocation)
    #expect(statistics.requestsWaiting == 0, sourceLocation: sourceLocation)
    #expect(cache.recordedLoadWaits == 0, sourceLocation: sourceLocation)
  }

  @Test func aFetcherThatAsksForItsOwnKeyFailsAtOnceNamingTheKey() async throws {
    let reference = CacheReference<String, Int>()
    let calls = Atomic<Int>(0)
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()],
      origin: ClosureFetcher { key in
        calls.wrappingAdd(1, ordering: .relaxed)
        return try await reference.cache.value(for: key) + 1
      },
      configuration: .init(retryPolicy: RetryPolicy(maximumAttempts: 5, initialDelay: .zero)))
    reference.cache = cache
    let result = await outcome { try await cache.value(for: "self") }
    #expect(isRecursive(result))
    if case .failure(let error as AsyncCacheError) = result {
      #expect(error.message.contains("self"), "\(error)")
    }
    #expect(calls.load(ordering: .relaxed) == 1, "a recursive load is never retried")
    #expect(cache.waitingRequestCount(for: "self") == 0)
    expectAtRest(cache)
    #expect(cache.statistics.loadFailures == 1)
  }

  @Test func aCycleThroughOtherKeysFailsEveryRequestInIt() async throws {
    let reference = CacheReference<String, Int>()
    // a loads b, b loads c, c loads a.
    let next = ["a": "b", "b": "c", "c": "a"]
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()],
      origin: ClosureFetcher { key in try await reference.cache.value(for: next[key]!) + 1 })
    reference.cache = cache
    #expect(isRecursive(await outcome { try await cache.value(for: "a") }))
    expectAtRest(cache)
    #expect(cache.cachedValue(for: "a") == nil)
    #expect(cache.cachedValue(for: "b") == nil)
  }

  @Test func aCycleThroughAnotherCacheIsFound() async throws {
    let reference = CacheReference<String, Int>()
    let other = try LoadingCache(
      layers: [MemoryLayer<String, Int>()],
      origin: ClosureFetcher { key in try await reference.cache.value(for: key) * 2 })
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()], origin: ClosureFetcher { key in try await other.value(for: key) })
    reference.cache = cache
    #expect(isRecursive(await outcome { try await cache.value(for: "k") }))
    expectAtRest(cache)
    expectAtRest(other)
  }

  @Test func aCycleClosedByJoiningALoadStartedElsewhereFailsInsteadOfDeadlocking() async throws {
    // Two requests from outside start the loads of a and b. Each fetcher is held, then a's asks
    // for b (joining b's load) and b's asks for a: that request would close the cycle.
    let reference = CacheReference<String, Int>()
    let gate = GatedFetcher<String, Int> { _ in 0 }
    let next = ["a": "b", "b": "a"]
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()],
      origin: ClosureFetcher { key in
        _ = try await gate.fetch(key)
        return try await reference.cache.value(for: next[key]!) + 1
      })
    reference.cache = cache
    let a = Task { try await cache.value(for: "a") }
    let b = Task { try await cache.value(for: "b") }
    await gate.waitForFetches(1, for: "a")
    await gate.waitForFetches(1, for: "b")
    gate.release("a")
    // a's fetcher now waits for b's load.
    await cache.waitForWaiters(2, for: "b")
    gate.release("b")
    #expect(isRecursive(await a.result))
    #expect(isRecursive(await b.result))
    expectAtRest(cache)
  }

  @Test func aFetcherThatLoadsOtherKeysStillWorks() async throws {
    let reference = CacheReference<String, Int>()
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()],
      origin: ClosureFetcher { key in
        // A key's value is its length plus the values of its suffixes.
        key.isEmpty ? 0 : try await reference.cache.value(for: String(key.dropFirst())) + key.count
      })
    reference.cache = cache
    #expect(try await cache.value(for: "abcd") == 4 + 3 + 2 + 1)
    #expect(try await cache.value(for: "xbcd") == 4 + 6, "the suffix bcd is a hit")
    // Concurrent loads of keys that share suffixes join each other's loads without a cycle.
    let keys = ["wxyz", "vxyz", "uxyz", "xyz", "yz"]
    let values = try await withThrowingTaskGroup(of: Int.self) { group in
      for key in keys { group.addTask { try await cache.value(for: key) } }
      return try await group.reduce(into: []) { $0.append($1) }
    }
    #expect(values.sorted() == [3, 6, 10, 10, 10])
    expectAtRest(cache)
  }

  @Test func bulkRequestsInsideALoadFailOnlyTheKeysThatWouldWaitForIt() async throws {
    let reference = CacheReference<String, Int>()
    let lenient = Mutex<LoadingCache<String, Int>.BulkValues?>(nil)
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()],
      origin: ClosureFetcher { key in
        guard key == "parent" else { return key.count }
        let values = await reference.cache.values(for: ["parent", "child", "sibling"])
        lenient.withLock { $0 = values }
        return try await reference.cache.allValues(for: ["child", "parent"]).values.reduce(0, +)
      })
    reference.cache = cache
    #expect(isRecursive(await outcome { try await cache.value(for: "parent") }))
    let values = try #require(lenient.withLock { $0 })
    #expect(values.values == ["child": 5, "sibling": 7])
    #expect((values.failures["parent"] as? AsyncCacheError)?.code == .recursiveLoad)
    expectAtRest(cache)
  }

  /// The waits a request made inside a load records are kept apart for each way it can go: it
  /// starts a load (recorded before the load's task can make a request of its own), joins one,
  /// or is refused because the load it joined waits for it.
  @Test func requestsInsideLoadsThatStartJoinOrAreRefusedLeaveNoWaitBehind() async throws {
    let reference = CacheReference<String, Int>()
    let refused = Atomic<Int>(0)
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()],
      origin: ClosureFetcher { key in
        guard key.hasPrefix("parent") else { return key.count }
        async let shared = reference.cache.value(for: "shared")
        async let own = reference.cache.value(for: "own-\(key)")
        // The key itself joins this very load: refused, the others load.
        let bulk = await reference.cache.values(for: ["shared", "own-\(key)", key])
        if (bulk.failures[key] as? AsyncCacheError)?.code == .recursiveLoad { refused.add(1, ordering: .relaxed) }
        return try await shared + own + bulk.values.count
      })
    reference.cache = cache
    let values = await withTaskGroup(of: Int?.self) { group in
      for index in 0..<40 { group.addTask { try? await cache.value(for: "parent\(index)") } }
      return await group.reduce(into: [Int]()) { if let value = $1 { $0.append(value) } }
    }
    #expect(values.count == 40)
    #expect(refused.load(ordering: .relaxed) == 40)
    expectAtRest(cache)
  }

  @Test func aBatchOriginThatAsksForOneOfItsKeysFails() async throws {
    let reference = CacheReference<String, Int>()
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()],
      origin: UnimplementedFetcher<String, Int>(),
      batchOrigin: ClosureBatchFetcher { keys in
        var values: [String: Int] = [:]
        for key in keys { values[key] = key == "b" ? try await reference.cache.value(for: "a") : 1 }
        return values
      })
    reference.cache = cache
    let result = await cache.values(for: ["a", "b"])
    #expect((result.failures["a"] as? AsyncCacheError)?.code == .recursiveLoad)
    #expect((result.failures["b"] as? AsyncCacheError)?.code == .recursiveLoad)
    expectAtRest(cache)
  }

  @Test func aRequestCancelledWhileItWaitsInsideALoadLeavesNoWaitBehind() async throws {
    let reference = CacheReference<String, Int>()
    let gate = GatedFetcher<String, Int> { $0.count }
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()],
      origin: ClosureFetcher { key in
        key == "outer" ? try await reference.cache.value(for: "inner") : try await gate.fetch(key)
      })
    reference.cache = cache
    let outer = Task { try await cache.value(for: "outer") }
    await gate.waitForFetches(1, for: "inner")
    #expect(cache.recordedLoadWaits == 1)
    outer.cancel()
    #expect(await outer.result.isCancellation)
    await cache.waitForNoLoads()
    expectAtRest(cache)
  }

  @Test func workAnOriginStartsDetachedIsNotPartOfItsLoad() async throws {
    // Page a's origin warms page b without waiting for it; b's origin needs a. Warmed from
    // Task.detached, b's request for a is not a's own, and waits for a as any request does.
    let reference = CacheReference<String, Int>()
    let gate = GatedFetcher<String, Int> { _ in 1 }
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()],
      origin: ClosureFetcher { key in
        if key == "a" {
          Task.detached { _ = try? await reference.cache.value(for: "b") }
          return try await gate.fetch("a")
        }
        _ = try await gate.fetch("b")
        return try await reference.cache.value(for: "a") + 1
      })
    reference.cache = cache
    let a = Task { try await cache.value(for: "a") }
    await gate.waitForFetches(1, for: "a")
    await gate.waitForFetches(1, for: "b")
    let b = Task { try await cache.value(for: "b") }
    await cache.waitForWaiters(2, for: "b")
    gate.release("b")
    // b's origin now waits for a's load, started by the request above.
    await cache.waitForWaiters(2, for: "a")
    gate.release("a")
    #expect(try await a.value == 1)
    #expect(try await b.value == 2)
    expectAtRest(cache)
  }

  @Test func aRecursiveLoadThroughAnOperatorIsStillRecursiveAndNotRetried() async throws {
    let reference = CacheReference<Int, String>()
    let calls = Atomic<Int>(0)
    // The key transform resolves an id through the cache itself.
    let origin = ClosureFetcher<String, String> { $0.uppercased() }
      .mappingKeys { (id: Int) -> String in
        calls.wrappingAdd(1, ordering: .relaxed)
        return try await reference.cache.value(for: id) + "/child"
      }
    let cache = try LoadingCache(
      layers: [MemoryLayer<Int, String>()], origin: origin,
      configuration: .init(
        negativeCaching: NegativeCachingPolicy(timeToLive: .seconds(60), remembers: { _ in true }),
        retryPolicy: RetryPolicy(maximumAttempts: 4, initialDelay: .zero)))
    reference.cache = cache
    #expect(isRecursive(await outcome { try await cache.value(for: 7) }))
    #expect(calls.load(ordering: .relaxed) == 1, "never retried")
    #expect(cache.statistics.negativeEntries == 0, "never remembered")
    expectAtRest(cache)
  }

  @Test func anErrorThatWrapsARecursiveLoadIsNeitherRetriedNorRemembered() async throws {
    let reference = CacheReference<String, Int>()
    let calls = Atomic<Int>(0)
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()],
      origin: ClosureFetcher { key in
        calls.wrappingAdd(1, ordering: .relaxed)
        do {
          return try await reference.cache.value(for: key)
        } catch {
          throw AsyncCacheError(code: .layerFailure, message: "wrapped", underlying: error)
        }
      },
      configuration: .init(
        negativeCaching: NegativeCachingPolicy(timeToLive: .seconds(60), remembers: { _ in true }),
        retryPolicy: RetryPolicy(maximumAttempts: 4, initialDelay: .zero)))
    reference.cache = cache
    _ = await outcome { try await cache.value(for: "k") }
    #expect(calls.load(ordering: .relaxed) == 1)
    #expect(cache.statistics.negativeEntries == 0)
  }
}
