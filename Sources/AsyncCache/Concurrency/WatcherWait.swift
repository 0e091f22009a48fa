/// Suspends until a watcher is resumed by whoever keeps it, or until the calling task is
/// cancelled: the shape of every "return once N are waiting" helper a test awaits, so that a
/// test's time limit ends a wait for something that never happens instead of hanging the run.
///
/// - Parameters:
///   - register: Under the owner's lock, keeps the continuation to resume once the condition
///     holds and returns `true`, or returns `false` (keeping nothing) when it holds already.
///   - unregister: Under the owner's lock, removes the continuation `register` kept and returns
///     it, or `nil` if it was resumed already. Both closures know the watcher by an identifier
///     the caller chose before calling.
///
/// A cancellation that lands before `register` finds nothing to remove; the task then sees
/// itself cancelled once registered and removes its own watcher. Removal is under the lock, so
/// the continuation is resumed exactly once, by the owner, by the handler or here.
package func waitForWatcher(
  register: (UnsafeContinuation<Void, Never>) -> Bool,
  unregister: @escaping @Sendable () -> UnsafeContinuation<Void, Never>?
) async {
  await withTaskCancellationHandler {
    await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
      guard register(continuation) else { return continuation.resume() }
      if Task.isCancelled { unregister()?.resume() }
    }
  } onCancel: {
    unregister()?.resume()
  }
}

/// The watchers of an owner's count, for tests: each waits until the count it names, for a
/// subject (a key, or `Void` for the owner's one count), reaches the number it gives. Kept
/// under the owner's lock, with the state it counts; ``waitForWatcher(register:unregister:)``
/// is the waiting side.
@usableFromInline
package struct CountWatchers<Subject> {
  private var watchers: [(id: UInt64, subject: Subject, count: Int, continuation: UnsafeContinuation<Void, Never>)] =
    []
  private var lastID: UInt64 = 0

  @usableFromInline
  package init() {}

  /// Whether no watcher waits.
  package var isEmpty: Bool { watchers.isEmpty }

  /// An identifier for a watcher.
  package mutating func makeID() -> UInt64 {
    lastID += 1
    return lastID
  }

  /// Keeps watcher `id`, resumed once the count of `subject` reaches `count`; returns `false`
  /// (and keeps nothing) when it does already, at `current`.
  package mutating func watch(
    id: UInt64, _ subject: Subject, count: Int, current: Int, continuation: UnsafeContinuation<Void, Never>
  ) -> Bool {
    guard current < count else { return false }
    watchers.append((id, subject, count, continuation))
    return true
  }

  /// Removes watcher `id` and returns it, unless it was resumed already.
  package mutating func unwatch(_ id: UInt64) -> UnsafeContinuation<Void, Never>? {
    guard let index = watchers.firstIndex(where: { $0.id == id }) else { return nil }
    return watchers.remove(at: index).continuation
  }

  /// Resumes, and forgets, the watchers whose subject's count, as `currentCount` gives it, has
  /// reached theirs. Resuming under the owner's lock is fine: it only enqueues the watching
  /// task.
  package mutating func resumeSatisfied(currentCount: (Subject) -> Int) {
    watchers.removeAll { watcher in
      guard currentCount(watcher.subject) >= watcher.count else { return false }
      watcher.continuation.resume()
      return true
    }
  }
}

extension CountWatchers: Sendable where Subject: Sendable {}
