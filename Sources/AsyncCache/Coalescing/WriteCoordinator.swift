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
  typealias Machine = WriteCoordinatorStateMachine<Key, UnsafeContinuation<Void, any Error>>

  private struct Watcher {
    var condition: @Sendable (Machine) -> Bool
    var continuation: UnsafeContinuation<Void, Never>
  }

  private let locked = Locked((machine: Machine(), watchers: [Watcher]()))

  init() {}

  /// Runs `body` on the state machine under the lock, then wakes the watchers whose condition
  /// now holds (there are none outside tests).
  private func mutate<Result>(_ body: (inout Machine) -> Result) -> Result {
    let (result, ready) = locked.withLock { locked -> (Result, [UnsafeContinuation<Void, Never>]) in
      let result = body(&locked.machine)
      guard !locked.watchers.isEmpty else { return (result, []) }
      let machine = locked.machine
      var ready: [UnsafeContinuation<Void, Never>] = []
      locked.watchers.removeAll { watcher in
        guard watcher.condition(machine) else { return false }
        ready.append(watcher.continuation)
        return true
      }
      return (result, ready)
    }
    for continuation in ready { continuation.resume() }
    return result
  }

  /// Returns once `condition` holds for the state (for tests: it replaces polling).
  func waitUntil(_ condition: @escaping @Sendable (Machine) -> Bool) async {
    await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
      let holds = locked.withLock { locked -> Bool in
        if condition(locked.machine) { return true }
        locked.watchers.append(Watcher(condition: condition, continuation: continuation))
        return false
      }
      if holds { continuation.resume() }
    }
  }

  // MARK: Reads

  func beginRead(_ key: Key) -> ReadToken<Key> {
    ReadToken(key: key, id: mutate { $0.beginRead(key) })
  }

  func endRead(_ token: ReadToken<Key>) {
    mutate { $0.endRead(token.key, id: token.id) }
  }

  func isOvertaken(_ token: ReadToken<Key>) -> Bool {
    mutate { $0.isOvertaken(token.key, id: token.id) }
  }

  /// Marks `token` as overtaken, so that it commits nothing.
  func overtake(_ token: ReadToken<Key>) {
    mutate { $0.overtake(token.key, id: token.id) }
  }

  // MARK: Writes

  /// Waits until the caller holds `key` exclusively; overtakes every read of `key` in
  /// progress. Balance with ``releaseWrite(_:)``.
  ///
  /// - Throws: `CancellationError` if the task is cancelled while waiting; the key is not held
  ///   then.
  nonisolated(nonsending) func acquireWrite(_ key: Key) async throws {
    if mutate({ $0.requestWrite(key) }) { return }
    try await waitForKey(key)
  }

  /// For a read that wants to write back what it read: waits until the caller holds the key,
  /// unless a write overtook the read (before or while waiting). Returns `true` when the
  /// caller holds the key, to be balanced with ``releaseWrite(_:)``; `false` when it must not
  /// write (nothing is held then). A cancelled wait also returns `false`.
  nonisolated(nonsending) func acquireCommit(_ token: ReadToken<Key>) async -> Bool {
    switch mutate({ $0.requestCommit(token.key, id: token.id) }) {
    case .overtaken:
      return false
    case .acquired:
      return true
    case .mustWait:
      do {
        try await waitForKey(token.key)
      } catch {
        return false
      }
      if isOvertaken(token) {
        releaseWrite(token.key)
        return false
      }
      return true
    }
  }

  private nonisolated(nonsending) func waitForKey(_ key: Key) async throws {
    let id = mutate { $0.makeID() }
    try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
        // Decided under the lock: the cancellation flag is set before `onCancel` runs, so either
        // this sees it and never queues, or `onCancel` finds the queued writer.
        let action = mutate { state -> WaitAction in
          if Task.isCancelled { return .cancel }
          return state.enqueue(key, id: id, continuation: continuation) == nil ? .wait : .proceed
        }
        action.apply(to: continuation)
      }
    } onCancel: {
      mutate { $0.cancelWaiting(key, id: id) }?.resume(throwing: CancellationError())
    }
  }

  func releaseWrite(_ key: Key) {
    for continuation in mutate({ $0.releaseWrite(key) }) { continuation.resume() }
  }

  /// Waits until the caller holds every key exclusively; overtakes every read in progress.
  /// Balance with ``releaseGlobalWrite()``.
  nonisolated(nonsending) func acquireGlobalWrite() async throws {
    if mutate({ $0.requestGlobalWrite() }) { return }
    let id = mutate { $0.makeID() }
    try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
        let action = mutate { state -> WaitAction in
          if Task.isCancelled { return .cancel }
          return state.enqueueGlobal(id: id, continuation: continuation) == nil ? .wait : .proceed
        }
        action.apply(to: continuation)
      }
    } onCancel: {
      let (cancelled, granted) = mutate { $0.cancelGlobalWaiting(id: id) }
      cancelled?.resume(throwing: CancellationError())
      for continuation in granted { continuation.resume() }
    }
  }

  func releaseGlobalWrite() {
    for continuation in mutate({ $0.releaseGlobalWrite() }) { continuation.resume() }
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

  /// Returns once `count` writers are queued for `key` (for tests).
  func waitForQueuedWriters(_ count: Int, for key: Key) async {
    await waitUntil { $0.queuedWriterCount(for: key) >= count }
  }

  /// Whether nothing is registered (for tests and invariants).
  var isIdle: Bool { locked.withLock { $0.machine.isIdle } }
}
