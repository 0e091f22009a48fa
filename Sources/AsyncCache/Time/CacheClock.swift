/// A clock whose instants are wall-clock ``CacheInstant`` values: the time source every cache
/// component reads.
///
/// Everything that reads the time takes a clock, so tests can inject
/// `AsyncCacheTesting.ManualClock` and move time only when they say so. Use ``WallClock`` in
/// production.
public protocol CacheClock: Clock where Instant == CacheInstant {}

/// The system's real-time clock.
///
/// `now` reads `CLOCK_REALTIME`; `sleep(until:)` sleeps for the remaining duration on the
/// continuous clock, so a wall-clock jump during a sleep does not stretch or cut it short.
/// Safe from any context. Reading `now` never suspends.
public struct WallClock: CacheClock {
  /// Creates the system wall clock.
  public init() {}

  /// The current wall-clock time.
  public var now: CacheInstant {
    CacheInstant(nanosecondsSince1970: SystemTime.realtimeNanoseconds())
  }

  /// One nanosecond.
  public var minimumResolution: Duration { .nanoseconds(1) }

  /// Suspends until `deadline`, or throws `CancellationError` if the task is cancelled first.
  public func sleep(until deadline: CacheInstant, tolerance: Duration? = nil) async throws {
    let remaining = now.duration(to: deadline)
    if remaining > .zero {
      try await ContinuousClock().sleep(for: remaining, tolerance: tolerance)
    } else {
      try Task.checkCancellation()
    }
  }
}

extension CacheClock where Self == WallClock {
  /// The system wall clock.
  public static var wall: WallClock { WallClock() }
}
