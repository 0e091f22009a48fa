import AsyncCacheTesting
import TestSupport
import Testing

@testable import AsyncCache

@Suite("LoadingCache retries", .timeLimit(.minutes(3)))
struct LoadingCacheRetryTests {
  struct Transient: Error, Equatable {}
  struct NotFound: Error, Equatable {}

  /// Observes a cache's retries, failures and stale values served after failures.
  final class Events: Sendable {
    private let sequence = Locked<CacheEvents<String>?>(nil)
    func observe(_ cache: LoadingCache<String, String>) { sequence.withLock { $0 = cache.events() } }
    /// Ends the observation; the events it saw, as lines.
    func all() async -> [String] {
      guard let events = sequence.withLock({ $0 }) else { return [] }
      return await events.drained().compactMap { event in
        switch event {
        case .retrying(let key, let attempt, let error, let delay): "retrying \(key) \(attempt) \(error) \(delay)"
        case .loadFailed(let key, let error, let attempts, _): "failed \(key) \(attempts) \(error)"
        case .servedStale(let key, let error): "served stale \(key) \(error)"
        default: nil
        }
      }
    }
  }

  static func policy(attempts: Int = 4) -> RetryPolicy {
    RetryPolicy(
      maximumAttempts: attempts, initialDelay: .milliseconds(100), multiplier: 2, maximumDelay: .milliseconds(300),
      jitter: 0, classify: { $0 is NotFound ? .fatal : .transient })
  }

  static func cache(
    _ origin: GatedFetcher<String, String>, clock: ManualClock, events: Events, policy: RetryPolicy = policy()
  ) throws -> LoadingCache<String, String> {
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, String>()], origin: origin, configuration: .init(clock: clock, retryPolicy: policy))
    events.observe(cache)
    return cache
  }

  @Test("transient failures are retried after growing delays on the cache's clock, capped, until one succeeds")
  func schedule() async throws {
    let clock = ManualClock()
    let origin = GatedFetcher<String, String> { "value of \($0)" }
    let events = Events()
    let cache = try Self.cache(origin, clock: clock, events: events)
    let request = Task { try await cache.value(for: "k") }

    for (attempt, delay) in [(1, 100), (2, 200), (3, 300)] {
      await origin.waitForFetches(1, for: "k")
      #expect(origin.release("k", throwing: Transient()) == 1)
      await clock.waitForSleepers(1)
      clock.advance(by: .milliseconds(delay - 1))
      #expect(clock.sleeperCount == 1, "attempt \(attempt + 1) waits its whole delay")
      clock.advance(by: .milliseconds(1))
    }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    #expect(try await request.value == "value of k")
    #expect(origin.callCount(for: "k") == 4)
    #expect(
      await events.all() == [
        "retrying k 1 Transient() 0.1 seconds", "retrying k 2 Transient() 0.2 seconds",
        "retrying k 3 Transient() 0.3 seconds",
      ])
    #expect(cache.cachedValue(for: "k") == "value of k")
  }

  @Test("a fatal error is never retried: the failure is reported after one attempt")
  func fatal() async throws {
    let clock = ManualClock()
    let origin = GatedFetcher<String, String> { $0 }
    let events = Events()
    let cache = try Self.cache(origin, clock: clock, events: events)
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", throwing: NotFound()) == 1)
    await #expect(throws: NotFound.self) { try await request.value }
    #expect(origin.callCount(for: "k") == 1)
    #expect(await events.all() == ["failed k 1 NotFound()"])
  }

  @Test("after the last attempt the transient error reaches every waiter, reported as not fatal")
  func exhausted() async throws {
    let clock = ManualClock()
    let origin = GatedFetcher<String, String> { $0 }
    let events = Events()
    let cache = try Self.cache(origin, clock: clock, events: events, policy: Self.policy(attempts: 2))
    let first = Task { try await cache.value(for: "k") }
    let second = Task { try await cache.value(for: "k") }
    await cache.waitForRequests(2, for: "k")
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", throwing: Transient()) == 1)
    await clock.waitForSleepers(1)
    clock.advance(by: .milliseconds(100))
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", throwing: Transient()) == 1)
    await #expect(throws: Transient.self) { try await first.value }
    await #expect(throws: Transient.self) { try await second.value }
    #expect(origin.callCount(for: "k") == 2, "one retry loop for both waiters")
    #expect(await events.all() == ["retrying k 1 Transient() 0.1 seconds", "failed k 2 Transient()"])
  }

  @Test("a load whose last waiter leaves during a retry delay is cancelled, and retries no more")
  func cancelledDuringDelay() async throws {
    let clock = ManualClock()
    let origin = GatedFetcher<String, String> { $0 }
    let events = Events()
    let cache = try Self.cache(origin, clock: clock, events: events)
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", throwing: Transient()) == 1)
    await clock.waitForSleepers(1)
    request.cancel()
    await #expect(throws: CancellationError.self) { try await request.value }
    // Cancelling the load cancelled its sleep at once: nothing is left to wake.
    #expect(clock.sleeperCount == 0)
    clock.advance(by: .seconds(10))
    #expect(origin.callCount(for: "k") == 1)
  }

  @Test("the default policy never retries")
  func neverByDefault() async throws {
    let origin = GatedFetcher<String, String> { $0 }
    let cache = try LoadingCache(layers: [MemoryLayer<String, String>()], origin: origin)
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", throwing: Transient()) == 1)
    await #expect(throws: Transient.self) { try await request.value }
    #expect(origin.callCount(for: "k") == 1)
  }

  @Test("delays grow by the multiplier up to the cap, and jitter only shortens them", arguments: [0.0, 0.5, 1.0])
  func delays(jitter: Double) {
    let policy = RetryPolicy(
      initialDelay: .milliseconds(100), multiplier: 3, maximumDelay: .seconds(1), jitter: jitter)
    #expect(
      (1...5).map(policy.baseDelay(beforeRetry:)) == [
        .milliseconds(100), .milliseconds(300), .milliseconds(900), .seconds(1), .seconds(1),
      ])
    #expect(policy.delay(beforeRetry: 2, unit: 0) == .milliseconds(300))
    #expect(policy.delay(beforeRetry: 2, unit: 0.5) == .milliseconds(300) * (1 - jitter / 2))
    #expect(RetryPolicy.never.maximumAttempts == 1)
  }

  struct Busy: Error, Equatable {
    var retryAfter: Duration
  }

  @Test("an error that asks for a delay is retried no sooner; one that asks for more than the maximum delay is not")
  func retryAfter() async throws {
    let clock = ManualClock()
    let origin = GatedFetcher<String, String> { "value of \($0)" }
    let events = Events()
    var policy = Self.policy()
    policy.retryAfter = { ($0 as? Busy)?.retryAfter }
    let cache = try Self.cache(origin, clock: clock, events: events, policy: policy)
    let request = Task { try await cache.value(for: "k") }

    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", throwing: Busy(retryAfter: .milliseconds(250))) == 1)
    await clock.waitForSleepers(1)
    clock.advance(by: .milliseconds(249))
    #expect(clock.sleeperCount == 1, "the policy's 100 ms is not enough")
    clock.advance(by: .milliseconds(1))
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", throwing: Busy(retryAfter: .milliseconds(50))) == 1)
    await clock.waitForSleepers(1)
    clock.advance(by: .milliseconds(200))
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", throwing: Busy(retryAfter: .milliseconds(301))) == 1)
    // A retry scheduled anyway would wait on the manual clock for ever: end it at the time limit.
    await #expect(throws: Busy.self) {
      try await withTaskCancellationHandler {
        try await request.value
      } onCancel: {
        request.cancel()
      }
    }
    #expect(origin.callCount(for: "k") == 3)
    #expect(
      await events.all() == [
        "retrying k 1 Busy(retryAfter: 0.25 seconds) 0.25 seconds",
        "retrying k 2 Busy(retryAfter: 0.05 seconds) 0.2 seconds",
        "failed k 3 Busy(retryAfter: 0.301 seconds)",
      ])

    #expect(policy.delay(beforeRetry: 1, after: Busy(retryAfter: .milliseconds(300)), unit: 0) == .milliseconds(300))
    #expect(policy.delay(beforeRetry: 1, after: Busy(retryAfter: .milliseconds(301)), unit: 0) == nil)
    #expect(policy.delay(beforeRetry: 1, after: Transient(), unit: 0) == .milliseconds(100))
    #expect(RetryPolicy().retryAfter(Busy(retryAfter: .seconds(1))) == nil, "no error asks by default")
  }
}
