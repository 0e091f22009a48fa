import AsyncCacheTesting
import Synchronization
import Testing

@testable import AsyncCache

/// A clock whose ``CacheClock/coarseNow`` lags its `now` by a fixed amount, as a coarse clock
/// does at its worst: shows which reads take the coarse time and which the exact one.
final class LaggingClock: CacheClock, Sendable {
  let base = ManualClock()
  let lag: Duration

  init(lag: Duration) { self.lag = lag }

  var now: CacheInstant { base.now }
  var coarseNow: CacheInstant { base.now.advanced(by: .zero - lag) }
  var minimumResolution: Duration { .nanoseconds(1) }
  func sleep(until deadline: CacheInstant, tolerance: Duration?) async throws {
    try await base.sleep(until: deadline, tolerance: tolerance)
  }
  func advance(by duration: Duration) { base.advance(by: duration) }
}

/// A clock of a user's that knows nothing of coarse time: it gets the default, `now`.
struct ExactOnlyClock: CacheClock {
  let base: ManualClock
  var now: CacheInstant { base.now }
  var minimumResolution: Duration { .nanoseconds(1) }
  func sleep(until deadline: CacheInstant, tolerance: Duration?) async throws {
    try await base.sleep(until: deadline, tolerance: tolerance)
  }
}

@Suite struct CacheClockTests {
  @Test func theWallClocksCoarseTimeIsNeverAheadAndLagsByAboutATick() {
    let clock = WallClock()
    #expect(clock.coarseResolution > .zero)
    #expect(clock.coarseResolution <= .milliseconds(100))
    for _ in 0..<1_000 {
      let before = clock.now
      let coarse = clock.coarseNow
      let after = clock.now
      #expect(coarse <= after, "a coarse reading is never ahead of the exact time")
      // A generous bound (a tick is 1 to 10 ms): a descheduled thread makes `after` later,
      // never `coarse` earlier than a tick before `before`.
      #expect(coarse >= before.advanced(by: .seconds(-1)))
    }
  }

  @Test func aClockWithoutACoarseReadingIsReadExactly() {
    let base = ManualClock()
    let clock = ExactOnlyClock(base: base)
    #expect(clock.coarseNow == base.now)
    base.advance(by: .nanoseconds(1))
    #expect(clock.coarseNow == base.now)
    #expect(ManualClock().coarseNow == ManualClock.defaultStart)
  }
}

/// Hits check expiry against the clock's coarse time; under a `ManualClock`, which reads
/// exactly, an entry expires at exactly its instant, whichever path reads it.
@Suite struct CoarseTimeTests {
  let clock = ManualClock()

  // MARK: The memory layer

  @Test func aLayerEntryExpiresAtExactlyItsInstant() throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(timeToLive: .seconds(60), clock: clock))
    try memory.insert(1, for: "a")
    try memory.insert(2, for: "b", timeToLive: .seconds(10))
    clock.advance(by: .seconds(10) - .nanoseconds(1))
    #expect(memory.value(for: "b") == 2)
    #expect(memory.contains("b"))
    clock.advance(by: .nanoseconds(1))
    #expect(memory.value(for: "b") == nil)
    #expect(!memory.contains("b"))
    clock.advance(by: .seconds(50) - .nanoseconds(1))
    #expect(memory.entry(for: "a")?.value == 1)
    clock.advance(by: .nanoseconds(1))
    #expect(memory.entry(for: "a") == nil)
    #expect(memory.statistics.evictions[.expired] == 2)
  }

  @Test func hitsReadTheCoarseTimeAndWritesTheExactOne() throws {
    let clock = LaggingClock(lag: .milliseconds(4))
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    try memory.insert(1, for: "a", timeToLive: .seconds(1))
    // The expiry is reckoned from the exact time.
    #expect(memory.entry(for: "a")?.expiresAt == clock.now.advanced(by: .seconds(1)))
    // Past the expiry by less than the lag, a hit still serves it: it checks the coarse time.
    clock.advance(by: .seconds(1) + .milliseconds(3))
    #expect(memory.value(for: "a") == 1)
    #expect(memory.contains("a"))
    clock.advance(by: .milliseconds(1))
    #expect(memory.value(for: "a") == nil)
  }

  @Test func aClockWithoutACoarseReadingExpiresEntriesExactly() throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: ExactOnlyClock(base: clock)))
    try memory.insert(1, for: "a", timeToLive: .seconds(1))
    clock.advance(by: .seconds(1) - .nanoseconds(1))
    #expect(memory.value(for: "a") == 1)
    clock.advance(by: .nanoseconds(1))
    #expect(memory.value(for: "a") == nil)
  }

  // MARK: The loading cache

  func cache(
    _ memory: MemoryLayer<String, Int>, origin: some AsyncFetcher<String, Int>,
    _ configure: (inout LoadingCache<String, Int>.Configuration) -> Void
  ) throws -> LoadingCache<String, Int> {
    var configuration = LoadingCache<String, Int>.Configuration(clock: clock)
    configure(&configuration)
    return try LoadingCache(layers: [memory], origin: origin, configuration: configuration)
  }

  /// An origin that answers every key with the number of its calls so far: 1, 2, 3...
  func countingOrigin() -> ClosureFetcher<String, Int> {
    let calls = Atomic<Int>(0)
    return ClosureFetcher { _ in calls.add(1, ordering: .relaxed).newValue }
  }

  @Test func aLoadingCacheHitExpiresAtExactlyItsInstant() async throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let cache = try cache(memory, origin: countingOrigin()) { $0.timeToLive = .seconds(30) }
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(by: .seconds(30) - .nanoseconds(1))
    #expect(try await cache.value(for: "k") == 1)
    #expect(cache.cachedValue(for: "k") == 1)
    clock.advance(by: .nanoseconds(1))
    #expect(cache.cachedValue(for: "k") == nil)
    #expect(try await cache.value(for: "k") == 2)
    #expect(cache.statistics.loads == 2)
  }

  @Test func aStaleWhileRevalidateEntryTurnsStaleAndExpiresAtExactlyItsInstants() async throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let origin = GatedFetcher<String, Int> { _ in 2 }
    let cache = try cache(memory, origin: origin) {
      $0.timeToLive = .seconds(30)
      $0.staleWhileRevalidate = .seconds(10)
    }
    try await cache.insert(1, for: "k")
    clock.advance(by: .seconds(30) - .nanoseconds(1))
    #expect(try await cache.value(for: "k") == 1)
    #expect(cache.statistics.refreshes == 0, "fresh until its instant")
    clock.advance(by: .nanoseconds(1))
    #expect(try await cache.value(for: "k") == 1, "stale from its instant: served, and refreshed")
    #expect(cache.statistics.refreshes == 1)
    #expect(cache.statistics.staleServed == 1)
    // The refresh is held: at the end of the grace the stale value is no longer served.
    await origin.waitForFetches(1, for: "k")
    clock.advance(by: .seconds(10) - .nanoseconds(1))
    #expect(cache.cachedValue(for: "k") == 1)
    clock.advance(by: .nanoseconds(1))
    #expect(cache.cachedValue(for: "k") == nil)
    origin.open()
    await cache.waitUntilIdle()
    #expect(cache.cachedValue(for: "k") == 2)
  }

  @Test func aSlidingExtensionFallsDueAndExpiresAtExactlyItsInstants() async throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let cache = try cache(memory, origin: countingOrigin()) {
      $0.timeToLive = .seconds(10)
      $0.slidingExpiration = true
    }
    let start = clock.now
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(by: .seconds(5) - .nanoseconds(1))
    #expect(try await cache.value(for: "k") == 1)
    #expect(memory.entry(for: "k")?.expiresAt == start.advanced(by: .seconds(10)), "not due 1 ns before half")
    clock.advance(by: .nanoseconds(1))
    #expect(try await cache.value(for: "k") == 1)
    let extended = start.advanced(by: .seconds(15))
    #expect(memory.entry(for: "k")?.expiresAt == extended, "due at half, extended from the exact time")
    // Unread (a read would extend it again), it expires at exactly its new instant.
    clock.advance(to: extended.advanced(by: .nanoseconds(-1)))
    #expect(memory.value(for: "k") == 1)
    clock.advance(to: extended)
    #expect(memory.value(for: "k") == nil)
    #expect(try await cache.value(for: "k") == 2)
  }

  @Test func aSlidingExtensionIsReckonedFromTheExactTimeNotTheCoarseOne() async throws {
    let lagging = LaggingClock(lag: .milliseconds(4))
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: lagging))
    let cache = try LoadingCache(
      layers: [memory], origin: UnimplementedFetcher<String, Int>(),
      configuration: .init(timeToLive: .seconds(10), slidingExpiration: true, clock: lagging))
    try await cache.insert(1, for: "k")
    lagging.advance(by: .seconds(6))
    #expect(try await cache.value(for: "k") == 1)
    #expect(memory.entry(for: "k")?.expiresAt == lagging.now.advanced(by: .seconds(10)))
  }
}
