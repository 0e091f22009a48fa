import AsyncCacheTesting
import Synchronization
import TestSupport
import Testing

@testable import AsyncCache

// Review of issue 21: failing tests for what the change promises and does not do.

/// A task executor that runs its jobs last-in first-out, when the test says so: a legal
/// schedule the global pool can also produce (nothing orders a group's child tasks).
final class StackExecutor: TaskExecutor, Sendable {
  private let jobs = Mutex<[UnownedJob]>([])

  func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    jobs.withLock { $0.append(job) }
  }

  /// Runs jobs, newest first, until none is left.
  func runUntilIdle() {
    while let job = jobs.withLock({ $0.popLast() }) {
      job.runSynchronously(on: asUnownedTaskExecutor())
    }
  }

  /// Runs jobs as they come, from a task of its own, until that task is cancelled.
  func pump() -> Task<Void, Never> {
    Task.detached {
      while !Task.isCancelled {
        self.runUntilIdle()
        await Task.yield()
      }
    }
  }
}

/// A clock over a `ManualClock` on which a sleep moves time to its deadline at once: the
/// deadline passes before anything else runs.
struct HastyClock: CacheClock {
  let base: ManualClock
  var now: CacheInstant { base.now }
  var minimumResolution: Duration { .nanoseconds(1) }
  func sleep(until deadline: CacheInstant, tolerance: Duration?) async throws {
    if deadline > base.now { base.advance(to: deadline) }
  }
}

/// Timeouts whatever order the request's child tasks run in, a kept load's retries, and the
/// attempts a load reports: cases a fresh-eyes review of the load timeouts found.
@Suite("LoadingCache load timeouts, in every order", .timeLimit(.minutes(3)))
struct LoadingCacheTimeoutOrderingTests {
  let clock = ManualClock()

  /// A cache with a hard timeout of 2 s on a clock whose sleeps end at once, their deadline
  /// reached: the deadline passes before anything else runs.
  func hastyCache() throws -> LoadingCache<String, Int> {
    try LoadingCache(
      layers: [try MemoryLayer<String, Int>(configuration: .init(clock: clock))],
      origin: GatedFetcher<String, Int> { _ in 7 },
      configuration: .init(clock: HastyClock(base: clock), loadTimeouts: LoadTimeouts(hard: .seconds(2))))
  }

  // MARK: 1. A deadline that passes before the wait joined its load is lost

  @Test("a hard timeout that passes before the request joined its load still fails the request")
  func hardDeadlineBeforeJoin() async throws {
    let executor = StackExecutor()
    let cache = try hastyCache()
    let request = Task(executorPreference: executor) { try await cache.value(for: "k") }
    // The request's body adds the wait, then the deadline; the deadline's task runs first.
    executor.runUntilIdle()
    let pump = executor.pump()
    defer { pump.cancel() }
    let error = await #expect(throws: AsyncCacheError.self) { try await request.value }
    #expect(error?.code == .timedOut)
    #expect(clock.now == ManualClock.defaultStart.advanced(by: .seconds(2)), "the hard deadline passed")
    #expect(cache.statistics.hardTimeouts == 1)
    await cache.waitUntilIdle()
    #expect(cache.statistics.cancelledLoads == 1, "no one else waited: the load was cancelled")
  }

  @Test("a bulk request's hard timeout that passes before its keys joined their loads still fails them")
  func bulkHardDeadlineBeforeJoin() async throws {
    let executor = StackExecutor()
    let cache = try hastyCache()
    let request = Task(executorPreference: executor) { await cache.values(for: ["a"]) }
    executor.runUntilIdle()
    let pump = executor.pump()
    defer { pump.cancel() }
    let outcome = await request.value
    #expect((outcome.failures["a"] as? AsyncCacheError)?.code == .timedOut)
    #expect(cache.statistics.hardTimeouts == 1)
    await cache.waitUntilIdle()
  }

  // MARK: 2. A load kept after a soft timeout waits at the urgent-work gate, unlike a refresh

  @Test("a load kept after a soft timeout retries while urgent loads run, as a refresh does")
  func keptLoadIsNotHeldAtTheGate() async throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let origin = GatedFetcher<String, Int> { _ in 0 }
    let cache = try LoadingCache(
      layers: [memory], origin: origin,
      configuration: .init(
        timeToLive: .seconds(60), staleIfError: .seconds(600), clock: clock,
        retryPolicy: RetryPolicy(maximumAttempts: 3, initialDelay: .seconds(1), jitter: 0),
        loadTimeouts: LoadTimeouts(soft: .seconds(1))))
    // A stale value for "k".
    let first = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    origin.release("k", returning: 1)
    #expect(try await first.value == 1)
    clock.advance(by: .seconds(61))

    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    #expect(try await request.value == 1, "stale at the soft timeout; the load goes on, owned by the cache")

    // Urgent work for another key, then the kept load's attempt fails and is retried.
    let other = Task { try await cache.value(for: "other", timeouts: .none) }
    await origin.waitForFetches(1, for: "other")
    origin.release("k", throwing: TestError("transient"))
    await clock.waitForSleepers(1)  // the retry delay
    clock.advance(by: .seconds(1))

    enum Next: Sendable { case fetched, heldAtGate }
    let next = await withTaskGroup(of: Next.self) { group in
      group.addTask {
        await origin.waitForFetches(1, for: "k")
        return .fetched
      }
      group.addTask {
        await cache.waitForLoadsWaitingForUrgentWork(1)
        return .heldAtGate
      }
      let first = await group.next()!
      group.cancelAll()
      // A fetch wait cannot be cancelled: end the urgent work, which lets the kept load through.
      if first == .heldAtGate { origin.release("other") }
      await group.waitForAll()
      return first
    }
    #expect(next == .fetched, "the kept load waits for every urgent load to end before it retries")

    origin.open()
    _ = try await other.value
    await cache.waitUntilIdle()
  }

  // MARK: 3. loadFailed counts an attempt that never reached the origin

  @Test("a load abandoned at the urgent-work gate reports 0 attempts, as it asked the origin 0 times")
  func attemptsOfALoadAbandonedAtTheGate() async throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let origin = GatedFetcher<String, Int> { _ in 0 }
    let cache = try LoadingCache(layers: [memory], origin: origin, configuration: .init(clock: clock))
    let events = cache.events()
    let urgent = Task { try await cache.value(for: "urgent") }
    await origin.waitForFetches(1, for: "urgent")
    let ticket = cache.makePrefetchTicket()
    let prefetch = Task { await cache.prefetch("background", ticket: ticket, skipsTopLayer: false) }
    await cache.waitForLoadsWaitingForUrgentWork(1)
    cache.withdraw(ticket, for: "background")
    _ = await prefetch.value
    origin.release("urgent")
    _ = try await urgent.value
    await cache.waitUntilIdle()

    #expect(origin.callCount(for: "background") == 0)
    let attempts = await events.drained().compactMap { event -> Int? in
      if case .loadFailed("background", _, let attempts, _) = event { return attempts }
      return nil
    }
    #expect(attempts == [0], "CacheEvent.loadFailed: attempts is the number of origin calls")
  }
}
