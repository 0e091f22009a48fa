public import Synchronization  // Atomic

#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Android)
  import Android
#endif

/// The wall-clock time that memory hits check expiry against (with the ``WallClock``): a
/// background thread publishes `CLOCK_REALTIME` every ``period`` while hits read it, so that a
/// hit far from its entry's expiry reads one shared word instead of calling the clock.
///
/// The published time lags the exact time by up to a period, more when the publishing thread
/// is late. So a hit uses it only for an entry that expires more than ``margin`` after it;
/// closer to its expiry, the hit reads the exact clock. An entry is therefore served until
/// exactly its expiry, never after, unless the publisher is more than `margin - period` late (a
/// process starved of CPU, or resumed from suspension in the moment before the thread runs):
/// then by as much more. What a hit returns as its time (for the freshness decisions of
/// stale-while-revalidate and refresh ahead) lags by up to about a period.
///
/// The thread starts on the first read and stops after ``idleTicks`` periods without one; while
/// it is stopped, reads take the exact clock and the next one starts it again. When the thread
/// cannot be started (a thread limit), reads take the exact clock and try again a second later.
/// The child of a `fork()` made while it runs has no thread: a `pthread_atfork` handler
/// unpublishes the time in the child, whose first hit takes the exact clock and starts a thread
/// of its own (`_Fork()`, `vfork()` and a bare `clone()` run no handlers: a child made so that
/// does not exec may read a time that no longer moves).
///
/// Lock-free, so that the handler only stores atomics, whatever the parent's threads held.
@usableFromInline
final class PublishedWallTime: Sendable {
  /// Starts a thread that runs its argument; returns `pthread_create`'s result (0 on success).
  package typealias ThreadStarter = @Sendable (_ body: @escaping @Sendable () -> Void) -> Int32

  /// The process's publisher, which every memory layer on the ``WallClock`` reads.
  @usableFromInline static let shared = PublishedWallTime(registersForkHandler: true) { body in
    // It mostly sleeps and must run soon when it wakes.
    DetachedThread(label: "AsyncCache time", reactsQuickly: true, body: body).start()
  }

  /// How often the time is published: 4 ms, about one Linux kernel tick (the lag of
  /// `CLOCK_REALTIME_COARSE`, which hits read before), at 250 wake-ups a second while hits come.
  static let period: Int64 = 4_000_000
  /// How far past the published time an expiry must be for a hit to decide with it: 50 ms, so
  /// that the publisher may run 46 ms late before an entry is served past its expiry.
  @usableFromInline static let margin: Int64 = 50_000_000
  /// The periods without a read after which the publisher stops: one second.
  static let idleTicks = 250
  /// How long after a failed start of the thread the next read tries again: one second.
  static let retryDelay: Int64 = 1_000_000_000

  /// Nanoseconds since 1970 as of the last publication; 0 while nothing publishes.
  @usableFromInline let published = Atomic<Int64>(0)
  /// Whether a hit read ``published`` since the publisher's last tick. Written only when it is
  /// `false`: once a tick by at most a few readers, so that hits do not fight over its line.
  @usableFromInline let wasRead = Atomic<Bool>(false)
  /// Whether the publisher runs: set by the read that starts it, cleared by the publisher as it
  /// stops (after it unpublished), or when its thread could not start.
  let running = Atomic<Bool>(false)
  /// The publisher's periods in a row without a read; written by the publisher only.
  let idle = Atomic<Int>(0)
  /// Before this time (nanoseconds since 1970), reads do not try to start the publisher: its
  /// thread failed to start.
  let retryAfter = Atomic<Int64>(.min)
  /// Starts the publisher's thread; `nil` for tests, which call ``tick(now:)`` themselves.
  let startThread: ThreadStarter?
  /// Whether the first start registers the fork handler that forgets ``shared``'s publisher in
  /// the child (only ``shared``: the handler names it).
  let registersForkHandler: Bool
  /// Whether the fork handler is registered.
  let forkHandlerRegistered = Atomic<Bool>(false)

  /// - Parameters:
  ///   - registersForkHandler: Register the handler that forgets ``shared``'s publisher in the
  ///     child of a fork; only for ``shared``.
  ///   - startThread: Starts the publisher's thread; `nil` for tests, which tick by hand.
  init(registersForkHandler: Bool = false, startThread: ThreadStarter?) {
    self.registersForkHandler = registersForkHandler
    self.startThread = startThread
  }

  /// A time to check `expiry` (nanoseconds since 1970) against: the published time when
  /// `expiry` is more than ``margin`` after it, else the exact time. Never later than the exact
  /// time. Cheap and lock-free; the read that starts the publisher starts a thread.
  @inlinable
  @inline(__always)
  package func time(checking expiry: Int64) -> Int64 {
    let recent = published.load(ordering: .relaxed)
    guard recent != 0 else { return start() }
    if !wasRead.load(ordering: .relaxed) { wasRead.store(true, ordering: .relaxed) }
    return expiry > recent &+ Self.margin ? recent : SystemTime.realtimeNanoseconds()
  }

  /// Reads the exact time, and starts the publisher if it does not run (and did not just fail
  /// to start).
  @usableFromInline
  func start() -> Int64 {
    let now = SystemTime.realtimeNanoseconds()
    guard now >= retryAfter.load(ordering: .relaxed),
      running.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged
    else { return now }
    // Checked again now that the publisher is ours: a start that failed since the check above
    // set it, and released `running` after.
    guard now >= retryAfter.load(ordering: .relaxed) else {
      running.store(false, ordering: .releasing)
      return now
    }
    if registersForkHandler && !forkHandlerRegistered.exchange(true, ordering: .relaxed) {
      // Registered here, not in `shared`'s initializer: a fork during that initializer would
      // run a handler that waits for it in the child for ever.
      pthread_atfork(nil, nil) { PublishedWallTime.shared.forgetAfterFork() }
    }
    idle.store(0, ordering: .relaxed)
    // Read once the publisher is ours: a reader preempted before it must not publish an old time.
    let published = SystemTime.realtimeNanoseconds()
    self.published.store(published, ordering: .relaxed)
    if let startThread {
      let result = startThread { [self] in
        repeat {
          var pause = timespec(tv_sec: 0, tv_nsec: Int(Self.period))
          nanosleep(&pause, nil)
        } while tick(now: SystemTime.realtimeNanoseconds())
      }
      if result != 0 {
        // No thread publishes: reads take the exact time, and try again later.
        self.published.store(0, ordering: .relaxed)
        retryAfter.store(published &+ Self.retryDelay, ordering: .relaxed)
        running.store(false, ordering: .releasing)
      }
    }
    return published
  }

  /// One period of the publisher: publishes `now` (nanoseconds since 1970), or stops after
  /// ``idleTicks`` periods without a read. Returns whether it still runs.
  package func tick(now: Int64) -> Bool {
    let idleTicks = wasRead.exchange(false, ordering: .relaxed) ? 0 : idle.load(ordering: .relaxed) &+ 1
    idle.store(idleTicks, ordering: .relaxed)
    if idleTicks >= Self.idleTicks {
      // Unpublished first: a read that sees `running` cleared starts a publisher of its own.
      published.store(0, ordering: .relaxed)
      running.store(false, ordering: .releasing)
      return false
    }
    published.store(now, ordering: .relaxed)
    return true
  }

  /// Forgets the publisher, in the child of a fork only (which has no publishing thread): called
  /// on a publisher whose thread runs, it would let a second one start. Only atomics, so safe
  /// whatever the parent's threads were doing.
  package func forgetAfterFork() {
    published.store(0, ordering: .relaxed)
    idle.store(0, ordering: .relaxed)
    running.store(false, ordering: .releasing)
  }
}
