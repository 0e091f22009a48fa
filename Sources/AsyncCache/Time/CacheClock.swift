/// A clock whose instants are wall-clock ``CacheInstant`` values: the time source every cache
/// component reads.
///
/// Everything that reads the time takes a clock, so tests can inject
/// `AsyncCacheTesting.ManualClock` and move time only when they say so. Use ``WallClock`` in
/// production.
///
/// Hits read ``coarseNow`` instead of `now`: a clock can offer a cheaper reading there, at the
/// price of a bounded lag. Custom clocks need not implement it; the default is `now`.
public protocol CacheClock: Clock where Instant == CacheInstant {
  /// The current time as a cheap reading that may lag `now` by a small bound the clock
  /// documents, and is never later than `now`: what a cache hit checks expiry against.
  ///
  /// A hit of an entry that expires reads it, so it must be cheap and must not block. An entry
  /// may be served up to that bound past its expiry; writes, which compute expiries, read
  /// `now`. The default implementation returns `now` (no lag).
  var coarseNow: CacheInstant { get }
}

extension CacheClock {
  /// The current time, exactly: `now`.
  public var coarseNow: CacheInstant { now }
}

/// The system's real-time clock.
///
/// `now` reads `CLOCK_REALTIME`; `sleep(until:)` sleeps for the remaining duration on the
/// continuous clock, so a wall-clock jump during a sleep does not stretch or cut it short.
/// ``coarseNow`` reads a cheaper clock that lags by at most ``coarseResolution``.
/// Safe from any context. Reading `now` or `coarseNow` never suspends.
public struct WallClock: CacheClock {
  /// Creates the system wall clock.
  public init() {}

  /// The current wall-clock time.
  public var now: CacheInstant {
    CacheInstant(nanosecondsSince1970: SystemTime.realtimeNanoseconds())
  }

  /// The current wall-clock time as of the last kernel tick: at most ``coarseResolution``
  /// earlier than ``now``, never later.
  ///
  /// On Linux it reads `CLOCK_REALTIME_COARSE` (about 8 ns, against 31 ns for `now`, measured
  /// on a 2-core x86_64 VM), without reading the clock hardware. (A memory hit on this clock
  /// reads neither: it reads a time the library publishes; see <doc:FreshnessAndStatistics>.)
  /// It is the time of the kernel's last tick, so it lags by about one tick
  /// (``coarseResolution``: 4 ms on most Linux distributions, 1 to 10 ms by the kernel's `HZ`),
  /// a little more when the tick itself runs late: with 4 ms ticks on a busy 2-core VM, 1 to
  /// 5 ms for 99.8% of reads and 9.4 ms at worst. A clock of your own that forwards to it lets
  /// hits serve an entry that much past its expiry, never earlier. On Apple platforms, which
  /// have no coarse wall clock, it reads `CLOCK_REALTIME` through `clock_gettime_nsec_np`, at
  /// its resolution of 1 µs.
  public var coarseNow: CacheInstant {
    CacheInstant(nanosecondsSince1970: SystemTime.coarseRealtimeNanoseconds())
  }

  /// The resolution of ``coarseNow``, which lags ``now`` by about that much (Linux: one kernel
  /// tick, as `clock_getres(CLOCK_REALTIME_COARSE)` reports it, plus the tick's own delay;
  /// Apple platforms: 1 µs).
  public var coarseResolution: Duration { .nanoseconds(SystemTime.coarseResolution) }

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
