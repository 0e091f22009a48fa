import Synchronization

/// A read registered with a ``WriteCoordinator``: it learns whether a write overtook it.
struct ReadToken<Key: Hashable & Sendable>: Sendable {
  let key: Key
  let id: UInt64
}

/// Orders the writes of a ``CacheChain`` per key and tells reads whether a write overtook them;
/// see ``WriteCoordinatorStateMachine`` for the rules.
///
/// Locks are never held across a suspension: waiting writers suspend on continuations that are
/// resumed after the state machine's lock is released.
final class WriteCoordinator<Key: Hashable & Sendable>: Sendable {
  private let state = Mutex(WriteCoordinatorStateMachine<Key>())

  init() {}

  // MARK: Reads

  func beginRead(_ key: Key) -> ReadToken<Key> {
    ReadToken(key: key, id: state.withLock { $0.beginRead(key) })
  }

  func endRead(_ token: ReadToken<Key>) {
    state.withLock { $0.endRead(token.key, id: token.id) }
  }

  func isOvertaken(_ token: ReadToken<Key>) -> Bool {
    state.withLock { $0.isOvertaken(token.key, id: token.id) }
  }

  /// Marks `token` as overtaken, so that it commits nothing.
  func overtake(_ token: ReadToken<Key>) {
    state.withLock { $0.overtake(token.key, id: token.id) }
  }

  // MARK: Writes

  /// Waits until the caller holds `key` exclusively; overtakes every read of `key` in progress
  /// except `exempt`. Balance with ``releaseWrite(_:)``.
  ///
  /// - Throws: `CancellationError` if the task is cancelled while waiting; the key is not held
  ///   then.
  nonisolated(nonsending) func acquireWrite(_ key: Key, exempt: ReadToken<Key>? = nil) async throws {
    if state.withLock({ $0.requestWrite(key, exempt: exempt?.id) }) { return }
    let id = state.withLock { $0.makeID() }
    try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
        // Decided under the lock: the cancellation flag is set before `onCancel` runs, so either
        // this sees it and never queues, or `onCancel` finds the queued writer.
        let action = state.withLock { state -> WaitAction in
          if Task.isCancelled { return .cancel }
          return state.enqueue(key, id: id, continuation: continuation) == nil ? .wait : .proceed
        }
        action.apply(to: continuation)
      }
    } onCancel: {
      state.withLock { $0.cancelWaiting(key, id: id) }?.resume(throwing: CancellationError())
    }
  }

  func releaseWrite(_ key: Key) {
    for continuation in state.withLock({ $0.releaseWrite(key) }) { continuation.resume() }
  }

  /// Waits until the caller holds every key exclusively; overtakes every read in progress.
  /// Balance with ``releaseGlobalWrite()``.
  nonisolated(nonsending) func acquireGlobalWrite() async throws {
    if state.withLock({ $0.requestGlobalWrite() }) { return }
    let id = state.withLock { $0.makeID() }
    try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
        let action = state.withLock { state -> WaitAction in
          if Task.isCancelled { return .cancel }
          return state.enqueueGlobal(id: id, continuation: continuation) == nil ? .wait : .proceed
        }
        action.apply(to: continuation)
      }
    } onCancel: {
      let (cancelled, granted) = state.withLock { $0.cancelGlobalWaiting(id: id) }
      cancelled?.resume(throwing: CancellationError())
      for continuation in granted { continuation.resume() }
    }
  }

  func releaseGlobalWrite() {
    for continuation in state.withLock({ $0.releaseGlobalWrite() }) { continuation.resume() }
  }

  private enum WaitAction {
    case proceed, wait, cancel

    func apply(to continuation: UnsafeContinuation<Void, any Error>) {
      switch self {
      case .proceed: continuation.resume()
      case .wait: break
      case .cancel: continuation.resume(throwing: CancellationError())
      }
    }
  }

  /// Whether nothing is registered (for tests and invariants).
  var isIdle: Bool { state.withLock { $0.isIdle } }
}
