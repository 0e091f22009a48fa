import AsyncCacheTesting
import TestSupport
import Testing

@testable import AsyncCache

/// Soft and hard load timeouts, on a manual clock: what a request gets at each deadline, what
/// becomes of the load, and how timeouts meet writes and cancellation.
@Suite("LoadingCache load timeouts", .timeLimit(.minutes(3)))
struct LoadingCacheTimeoutTests {
  let clock = ManualClock()
  let memory: MemoryLayer<String, Int>

  init() throws {
    memory = try MemoryLayer(configuration: .init(clock: clock))
  }

  /// A cache whose entries live 60 s and may be served stale for 10 minutes after a failure.
  func cache(
    _ origin: GatedFetcher<String, Int>, below: [any AsyncCacheLayer<String, Int>] = [],
    timeouts: LoadTimeouts = LoadTimeouts(soft: .seconds(1), hard: .seconds(5))
  ) throws -> LoadingCache<String, Int> {
    try LoadingCache(
      layers: [memory] + below, origin: origin,
      configuration: .init(
        timeToLive: .seconds(60), staleIfError: .seconds(600), clock: clock, loadTimeouts: timeouts))
  }

  /// Stores `value` for `key` through `cache` (its origin answers the load), then lets it go stale.
  func storeStale(_ value: Int, for key: String, in cache: LoadingCache<String, Int>, origin: GatedFetcher<String, Int>)
    async throws
  {
    let load = Task { try await cache.value(for: key) }
    await origin.waitForFetches(1, for: key)
    #expect(origin.release(key, returning: value) == 1)
    #expect(try await load.value == value)
    clock.advance(by: .seconds(61))
  }

  @Test("at the soft timeout a request gets the stale value; the load goes on and stores its value")
  func staleAtTheSoftTimeout() async throws {
    let origin = GatedFetcher<String, Int> { _ in 0 }
    let cache = try cache(origin)
    try await storeStale(1, for: "k", in: cache, origin: origin)
    let events = cache.events()

    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    await clock.waitForSleepers(1)
    clock.advance(by: .milliseconds(999))
    #expect(clock.sleeperCount == 1, "the request waits its whole soft timeout")
    clock.advance(by: .milliseconds(1))
    #expect(try await request.value == 1, "the stale value, at the soft timeout")
    #expect(clock.sleeperCount == 0, "the hard timeout's deadline went with the request")
    #expect(cache.statistics.softTimeouts == 1)
    #expect(cache.statistics.loadsInFlight == 1, "the load goes on without its request")
    #expect(!origin.wasCancelled("k"))

    #expect(origin.release("k", returning: 2) == 1)
    await cache.waitUntilIdle()
    #expect(try await cache.value(for: "k") == 2, "the background load stored its value")
    #expect(origin.callCount(for: "k") == 2)
    let lines = await events.drained().map(\.description)
    #expect(lines.contains("softTimeout k after 1s: served stale"))
  }

  @Test("without a stale value a request keeps waiting past its soft timeout, and gets the load's value")
  func noStaleValue() async throws {
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let cache = try cache(origin)
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    // The soft deadline passed; the request now waits for the load or the hard deadline.
    await clock.waitForSleepers(1)
    #expect(clock.nextDeadline == ManualClock.defaultStart.advanced(by: .seconds(5)))
    #expect(cache.statistics.softTimeouts == 0)
    #expect(origin.release("k") == 1)
    #expect(try await request.value == 7)
    #expect(cache.statistics.misses == 1)
  }

  @Test("a stale value found after the soft timeout passed is served as soon as the load finds it")
  func staleFoundLate() async throws {
    let origin = GatedFetcher<String, Int> { _ in 0 }
    let disk = FakeLayer<String, Int>(clock: clock)
    let cache = try cache(origin, below: [disk])
    try await storeStale(1, for: "k", in: cache, origin: origin)
    memory.removeValue(for: "k")
    disk.hold(.lookup)

    let request = Task { try await cache.value(for: "k") }
    await disk.waitForHeld(1, .lookup)
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    await clock.waitForSleepers(1)  // the hard deadline: the soft one found nothing to serve
    disk.release(.lookup)
    #expect(try await request.value == 1, "served once the lookup below found the stale entry")
    #expect(cache.statistics.softTimeouts == 1)
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", returning: 2) == 1)
    await cache.waitUntilIdle()
    #expect(disk.storedEntries["k"]?.value == 2, "the background load stored its value below too")
  }

  @Test("at the hard timeout a lone request fails with timedOut, naming key and timeout; its load is cancelled")
  func hardTimeoutAlone() async throws {
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let cache = try cache(origin, timeouts: LoadTimeouts(hard: .seconds(2)))
    let events = cache.events()
    let request = Task { try await cache.value(for: "slow key") }
    await origin.waitForFetches(1, for: "slow key")
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(2))
    let error = await #expect(throws: AsyncCacheError.self) { try await request.value }
    #expect(error?.code == .timedOut)
    #expect(error?.message.contains("slow key") == true)
    #expect(error?.message.contains("2s") == true)
    await cache.waitUntilIdle()
    #expect(origin.cancellationCount(for: "slow key") == 1, "no one else waited: the load is cancelled")
    let statistics = cache.statistics
    #expect(statistics.hardTimeouts == 1)
    #expect(statistics.cancelledLoads == 1)
    #expect(statistics.cancelledRequests == 0)
    #expect(await events.drained().map(\.description).contains("hardTimeout slow key after 2s"))
  }

  @Test("a request that times out leaves the load to the requests still waiting for it")
  func hardTimeoutWithOtherWaiters() async throws {
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let cache = try cache(origin, timeouts: .none)
    let patient = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    let hasty = Task { try await cache.value(for: "k", timeouts: LoadTimeouts(hard: .seconds(2))) }
    await cache.waitForRequests(2, for: "k")
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(2))
    await #expect(throws: AsyncCacheError.self) { try await hasty.value }
    #expect(!origin.wasCancelled("k"))
    #expect(origin.release("k") == 1)
    #expect(try await patient.value == 7)
    #expect(origin.callCount(for: "k") == 1)
    #expect(cache.statistics.hardTimeouts == 1)
    #expect(cache.statistics.cancelledLoads == 0)
    #expect(cache.statistics.misses == 1, "the load's end counts the request still waiting, not the one that left")
  }

  @Test("a request served stale at its soft timeout leaves the load: its end counts only the requests still waiting")
  func softTimeoutWithOtherWaiters() async throws {
    let origin = GatedFetcher<String, Int> { _ in 0 }
    let cache = try cache(origin)
    try await storeStale(1, for: "k", in: cache, origin: origin)
    let missesBefore = cache.statistics.misses
    let patient = Task { try await cache.value(for: "k", timeouts: LoadTimeouts.none) }
    await origin.waitForFetches(1, for: "k")
    let hasty = Task { try await cache.value(for: "k") }
    await cache.waitForRequests(2, for: "k")
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    #expect(try await hasty.value == 1, "the stale value, at the soft timeout")
    #expect(origin.release("k", returning: 2) == 1)
    #expect(try await patient.value == 2)
    await cache.waitUntilIdle()
    #expect(cache.statistics.softTimeouts == 1)
    #expect(cache.statistics.misses == missesBefore + 1, "the patient request, not the one served stale")
  }

  @Test("a write while the load goes on after a soft timeout wins over the load's late value")
  func writeDuringTheBackgroundCompletion() async throws {
    let origin = GatedFetcher<String, Int> { _ in 0 }
    let disk = FakeLayer<String, Int>(clock: clock)
    let cache = try cache(origin, below: [disk])
    try await storeStale(1, for: "k", in: cache, origin: origin)

    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    #expect(try await request.value == 1)
    try await cache.insert(99, for: "k")
    #expect(origin.release("k", returning: 2) == 1)
    await cache.waitUntilIdle()
    #expect(try await cache.value(for: "k") == 99)
    #expect(disk.storedEntries["k"]?.value == 99, "the late value was stored nowhere")
    #expect(origin.callCount(for: "k") == 2)
  }

  @Test("a request cancelled while its timeouts run leaves as a cancelled request: no timeout, no stray deadline")
  func cancellationDuringATimeout() async throws {
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let cache = try cache(origin)
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))  // past the soft deadline (no stale value): the hard one runs
    await clock.waitForSleepers(1)
    request.cancel()
    await #expect(throws: CancellationError.self) { try await request.value }
    #expect(clock.sleeperCount == 0)
    await cache.waitUntilIdle()
    #expect(origin.cancellationCount(for: "k") == 1)
    let statistics = cache.statistics
    #expect(statistics.cancelledRequests == 1)
    #expect(statistics.softTimeouts == 0 && statistics.hardTimeouts == 0)
  }

  @Test("a request answered before its deadlines leaves no deadline behind")
  func answeredInTime() async throws {
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let cache = try cache(origin)
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    await clock.waitForSleepers(1)
    #expect(origin.release("k") == 1)
    #expect(try await request.value == 7)
    #expect(clock.sleeperCount == 0)
    #expect(try await cache.value(for: "k") == 7, "a hit waits for nothing")
  }

  @Test("each key of a bulk request gets a stale value at the soft timeout, or fails at the hard one")
  func bulkRequests() async throws {
    let origin = GatedFetcher<String, Int> { _ in 0 }
    let cache = try cache(origin)
    try await storeStale(1, for: "stale", in: cache, origin: origin)

    let request = Task { await cache.values(for: ["stale", "cold"]) }
    await origin.waitForFetches(2)
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    await clock.waitForSleepers(1)  // the hard deadline, for the key still outstanding
    clock.advance(by: .seconds(4))
    let outcome = await request.value
    #expect(outcome.values == ["stale": 1])
    #expect((outcome.failures["cold"] as? AsyncCacheError)?.code == .timedOut)
    #expect(!origin.wasCancelled("stale"))
    #expect(origin.release("stale", returning: 2) == 1, "the stale key's load went on")
    await cache.waitUntilIdle()
    #expect(origin.wasCancelled("cold"), "no one else waited for the cold key")
    #expect(cache.cachedValue(for: "stale") == 2)
    #expect(cache.statistics.softTimeouts == 1 && cache.statistics.hardTimeouts == 1)

    let all = Task { try await cache.allValues(for: ["cold"]) }
    await origin.waitForFetches(1, for: "cold")
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(4))
    let error = await #expect(throws: AsyncCacheError.self) { try await all.value }
    #expect(error?.code == .timedOut)
  }

  @Test(
    "timeouts out of range are refused, naming the value",
    arguments: [
      (LoadTimeouts(soft: .zero), "soft timeout is"),
      (LoadTimeouts(hard: .seconds(-1)), "hard timeout is"),
      (LoadTimeouts(soft: .seconds(5), hard: .seconds(2)), "must be shorter than the hard timeout"),
    ])
  func validation(timeouts: LoadTimeouts, message: String) async throws {
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let error = #expect(throws: AsyncCacheError.self) { try self.cache(origin, timeouts: timeouts) }
    #expect(error?.code == .invalidConfiguration)
    #expect(error?.message.contains(message) == true)
    let cache = try cache(origin, timeouts: .none)
    let requestError = await #expect(throws: AsyncCacheError.self) {
      try await cache.value(for: "k", timeouts: timeouts)
    }
    #expect(requestError?.code == .invalidConfiguration)
    #expect(origin.callCount == 0)
  }
}
