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
