import AsyncCache
import AsyncCacheTesting
import Testing

/// The loading cache's test waits end when their task is cancelled, so that a test's time limit
/// ends a wait for something that never happens instead of hanging the run.
@Suite(.timeLimit(.minutes(3))) struct LoadingCacheWaitTests {
  @Test func waitUntilIdleAndWaitForRequestsEndWhenCancelled() async throws {
    let origin = GatedFetcher<Int, Int> { $0 }
    let cache = try LoadingCache(layers: [MemoryLayer<Int, Int>()], origin: origin)
    let request = Task { try await cache.value(for: 1) }
    await origin.waitForFetches(1, for: 1)

    let idle = Task { await cache.waitUntilIdle() }  // the origin is never released
    let requests = Task { await cache.waitForRequests(2, for: 1) }  // nobody else asks
    let gate = Task { await cache.waitForLoadsWaitingForUrgentWork(1) }  // nothing is background
    idle.cancel()
    requests.cancel()
    gate.cancel()
    await idle.value
    await requests.value
    await gate.value

    #expect(origin.release(1) == 1)
    #expect(try await request.value == 1)
    await cache.waitUntilIdle()
  }
}
