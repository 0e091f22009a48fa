internal import Foundation  // Thread
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
/// hit reads one shared word instead of calling the clock.
///
/// The published time lags the exact time by up to a period, more when the publishing thread
/// is late. So a hit uses it only for an entry that expires more than ``margin`` after it;
/// closer to its expiry, the hit reads the exact clock. An entry is therefore served until
/// exactly its expiry, never after, unless the publisher is more than `margin - period` late
/// (a process starved of CPU, or resumed from suspension in the moment before the thread runs).
/// What a hit returns as its time (the freshness decisions of stale-while-revalidate and refresh
/// ahead) lags by up to about a period.
///
/// The thread starts on the first read and stops after ``idleTicks`` periods without one;
/// while it is stopped the next read takes the exact clock and starts it again.
@usableFromInline
final class PublishedWallTime: Sendable {
  /// The process's publisher, which every memory layer on the ``WallClock`` reads.
  @usableFromInline static let shared = PublishedWallTime(startsThread: true)

  /// How often the time is published: 4 ms, about one Linux kernel tick (the lag of
  /// `CLOCK_REALTIME_COARSE`, which hits read before), at 250 wake-ups a second while hits come.
  static let period: Int64 = 4_000_000
  /// How far past the published time an expiry must be for a hit to decide with it: 50 ms, so
  /// that the publisher may run 46 ms late before an entry is served past its expiry.
  @usableFromInline static let margin: Int64 = 50_000_000
  /// The periods without a read after which the publisher stops: one second.
  static let idleTicks = 250

  /// Nanoseconds since 1970 as of the last publication; 0 while nothing publishes.
  @usableFromInline let published = Atomic<Int64>(0)
  /// Whether a hit read ``published`` since the publisher's last tick. Written only when it is
  /// `false`: once a tick by at most a few readers, so that hits do not fight over its line.
  @usableFromInline let wasRead = Atomic<Bool>(false)
  /// The publisher's state: whether it runs, and its periods in a row without a read.
  let publisher = Mutex<(running: Bool, idle: Int)>((false, 0))
  /// Whether starting the publisher starts a thread that ticks; `false` for tests, which call
  /// ``tick(now:)`` themselves.
  let startsThread: Bool

  /// - Parameter startsThread: Whether a thread ticks; tests pass `false` and tick by hand.
  package init(startsThread: Bool) {
    self.startsThread = startsThread
  }

  /// A time to check `expiry` (nanoseconds since 1970) against: the published time when
  /// `expiry` is more than ``margin`` after it, else the exact time. Never later than the exact
  /// time. Cheap and never blocks, except the read that starts the publisher.
  @inlinable
  @inline(__always)
  package func time(checking expiry: Int64) -> Int64 {
    let recent = published.load(ordering: .relaxed)
    guard recent != 0 else { return start() }
    if !wasRead.load(ordering: .relaxed) { wasRead.store(true, ordering: .relaxed) }
    return expiry > recent &+ Self.margin ? recent : SystemTime.realtimeNanoseconds()
  }

  /// Reads the exact time, and starts the publisher if it does not run.
  @usableFromInline
  func start() -> Int64 {
    let now = SystemTime.realtimeNanoseconds()
    let starts = publisher.withLock { state in
      guard !state.running else { return false }
      state = (true, 0)
      published.store(now, ordering: .relaxed)
      return true
    }
    if starts && startsThread {
      Thread.detachNewThread { [self] in
        Thread.current.name = "AsyncCache time"
        repeat {
          var pause = timespec(tv_sec: 0, tv_nsec: Int(Self.period))
          nanosleep(&pause, nil)
        } while tick(now: SystemTime.realtimeNanoseconds())
      }
    }
    return now
  }

  /// One period of the publisher: publishes `now` (nanoseconds since 1970), or stops after
  /// ``idleTicks`` periods without a read. Returns whether it still runs.
  package func tick(now: Int64) -> Bool {
    publisher.withLock { state in
      state.idle = wasRead.exchange(false, ordering: .relaxed) ? 0 : state.idle + 1
      if state.idle >= Self.idleTicks {
        // Under the lock: a read that starts the publisher again waits for this.
        published.store(0, ordering: .relaxed)
        state.running = false
        return false
      }
      published.store(now, ordering: .relaxed)
      return true
    }
  }
}
