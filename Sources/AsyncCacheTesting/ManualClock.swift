public import AsyncCache

/// A clock whose time moves only when a test says so.
///
/// Inject it wherever a cache component takes a ``AsyncCache/CacheClock``; then expire entries
/// and fire timers deterministically with ``advance(by:)``, never by sleeping.
///
/// ```swift
/// @Test func entriesExpire() async throws {
///     let clock = ManualClock()
///     let memory = try MemoryLayer<String, Int>(configuration: .init(timeToLive: .seconds(60), clock: clock))
///     try memory.insert(1, for: "a")
///     clock.advance(by: .seconds(60))
///     #expect(memory.value(for: "a") == nil)
/// }
/// ```
///
/// Code that sleeps on the clock (`try await clock.sleep(for: .seconds(5))`) stays suspended
/// until the clock is advanced past its deadline. A test can await ``waitForSleepers(_:)``
/// to know that the code under test has reached its sleep, instead of yielding in a loop.
///
/// Safe from any context.
public final class ManualClock: CacheClock, Sendable {
  private struct Sleeper {
    var deadline: CacheInstant
    var continuation: UnsafeContinuation<Void, any Error>
  }

  private struct Watcher {
    var count: Int
    var continuation: UnsafeContinuation<Void, Never>
  }

  private struct State {
    var now: CacheInstant
    var nextID: UInt64 = 0
    var sleepers: [UInt64: Sleeper] = [:]
    var watchers: [UInt64: Watcher] = [:]

    mutating func makeID() -> UInt64 {
      nextID += 1
      return nextID
    }

    mutating func satisfiedWatchers() -> [UnsafeContinuation<Void, Never>] {
      let ready = watchers.filter { sleepers.count >= $0.value.count }
      for id in ready.keys { watchers[id] = nil }
      return ready.values.map(\.continuation)
    }
  }

  private let state: Locked<State>

  /// The default start: 2026-01-01 00:00:00 UTC.
  public static let defaultStart = CacheInstant(secondsSince1970: 1_767_225_600)

  /// Creates a clock that reads `now` until it is advanced.
  public init(now: CacheInstant = ManualClock.defaultStart) {
    state = Locked(State(now: now))
  }

  /// The current time of this clock.
  public var now: CacheInstant { state.withLock { $0.now } }

  /// The current time of this clock, exactly as ``now``: hits check expiry against it, so under
  /// a manual clock an entry expires at exactly its instant (the ``AsyncCache/WallClock`` lags
  /// here by up to a kernel tick).
  public var coarseNow: CacheInstant { now }

  /// One nanosecond.
  public var minimumResolution: Duration { .nanoseconds(1) }

  /// Suspends until the clock is advanced to `deadline` or later.
  ///
  /// - Throws: `CancellationError` if the task is cancelled first.
  public func sleep(until deadline: CacheInstant, tolerance: Duration? = nil) async throws {
    let id = state.withLock { $0.makeID() }
    try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
        let (outcome, watchers) = state.withLock {
          state -> (Result<Void, any Error>?, [UnsafeContinuation<Void, Never>]) in
          if Task.isCancelled { return (.failure(CancellationError()), []) }
          if deadline <= state.now { return (.success(()), []) }
          state.sleepers[id] = Sleeper(deadline: deadline, continuation: continuation)
          return (nil, state.satisfiedWatchers())
        }
        if let outcome { continuation.resume(with: outcome) }
        for watcher in watchers { watcher.resume() }
      }
    } onCancel: {
      state.withLock { $0.sleepers.removeValue(forKey: id) }?.continuation.resume(throwing: CancellationError())
    }
  }

  /// Moves time forward by `duration` and wakes every sleeper whose deadline has come, earliest
  /// first.
  public func advance(by duration: Duration) {
    precondition(duration >= .zero, "ManualClock cannot move backwards (advance(by: \(duration)))")
    move { $0.advanced(by: duration) }
  }

  /// Moves time forward to `instant` (if it is later than now) and wakes the sleepers due.
  public func advance(to instant: CacheInstant) {
    move { Swift.max($0, instant) }
  }

  /// Sets the time to `next(now)` and wakes the sleepers due, earliest first; one critical
  /// section, so concurrent advances compose.
  private func move(_ next: (CacheInstant) -> CacheInstant) {
    let woken = state.withLock { state -> [UnsafeContinuation<Void, any Error>] in
      state.now = next(state.now)
      let now = state.now
      let due = state.sleepers.filter { $0.value.deadline <= now }.sorted { $0.value.deadline < $1.value.deadline }
      for (id, _) in due { state.sleepers[id] = nil }
      return due.map(\.value.continuation)
    }
    for continuation in woken { continuation.resume() }
  }

  /// The number of tasks sleeping on this clock.
  public var sleeperCount: Int { state.withLock { $0.sleepers.count } }

  /// The earliest deadline of a sleeping task, if any.
  public var nextDeadline: CacheInstant? { state.withLock { $0.sleepers.values.map(\.deadline).min() } }

  /// Returns once at least `count` tasks are sleeping on this clock, or once the calling task
  /// is cancelled (a test's time limit ends a wait for a sleeper that never comes).
  public func waitForSleepers(_ count: Int = 1) async {
    let id = state.withLock { $0.makeID() }
    await waitForWatcher { continuation in
      state.withLock { state in
        guard state.sleepers.count < count else { return false }
        state.watchers[id] = Watcher(count: count, continuation: continuation)
        return true
      }
    } unregister: {
      self.state.withLock { $0.watchers.removeValue(forKey: id)?.continuation }
    }
  }
}
