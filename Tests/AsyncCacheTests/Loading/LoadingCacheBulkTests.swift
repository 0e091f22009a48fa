import AsyncCache
import AsyncCacheTesting
import Testing

@Suite("LoadingCache bulk requests", .timeLimit(.minutes(1)))
struct LoadingCacheBulkTests {
  struct Failure: Error, Equatable {}

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
    #expect(origin.release("c", throwing: Failure()) == 1)
    let result = await request.value
    #expect(result.values == ["a": "cached a", "b": "loaded b"])
    #expect(Array(result.failures.keys) == ["c"])
    #expect(result.failures["c"] is Failure)
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
    #expect(origin.release("a", throwing: Failure()) == 1)
    await #expect(throws: Failure.self) { try await request.value }
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
}
