import AsyncCache

/// Suspended operations keyed by `Key`, released by the test, plus watchers that wait until
/// enough operations are suspended. The building block of the gated doubles.
final class Waitroom<Key: Hashable & Sendable, Outcome: Sendable>: Sendable {
  private struct Pending {
    var key: Key
    var continuation: UnsafeContinuation<Outcome, any Error>
  }

  private struct Watcher {
    var key: Key?
    var count: Int
    var continuation: UnsafeContinuation<Void, Never>
  }

  private struct State {
    var nextID: UInt64 = 0
    var pending: [UInt64: Pending] = [:]
    var order: [UInt64] = []
    var watchers: [UInt64: Watcher] = [:]
    var cancellations: [Key: Int] = [:]

    func pendingCount(for key: Key?) -> Int {
      guard let key else { return pending.count }
      return pending.values.reduce(0) { $0 + ($1.key == key ? 1 : 0) }
    }

    /// Removes and returns the watchers whose condition now holds.
    mutating func satisfiedWatchers() -> [UnsafeContinuation<Void, Never>] {
      let ready = watchers.filter { pendingCount(for: $0.value.key) >= $0.value.count }
      for id in ready.keys { watchers[id] = nil }
      return ready.values.map(\.continuation)
    }

    mutating func take(_ select: (Key) -> Bool, limit: Int) -> [UnsafeContinuation<Outcome, any Error>] {
      var taken: [UnsafeContinuation<Outcome, any Error>] = []
      var remaining: [UInt64] = []
      for id in order {
        if taken.count < limit, let entry = pending[id], select(entry.key) {
          taken.append(entry.continuation)
          pending[id] = nil
        } else {
          remaining.append(id)
        }
      }
      order = remaining
      return taken
    }
  }

  private let state = Locked(State())

  init() {}

  /// Suspends until the test releases this operation; throws `CancellationError` (and counts a
  /// cancellation for `key`) if the task is cancelled first.
  func wait(for key: Key) async throws -> Outcome {
    let id = state.withLock { state -> UInt64 in
      state.nextID += 1
      return state.nextID
    }
    return try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Outcome, any Error>) in
        let (cancelled, watchers) = state.withLock { state -> (Bool, [UnsafeContinuation<Void, Never>]) in
          if Task.isCancelled {
            state.cancellations[key, default: 0] += 1
            return (true, [])
          }
          state.pending[id] = Pending(key: key, continuation: continuation)
          state.order.append(id)
          return (false, state.satisfiedWatchers())
        }
        if cancelled { continuation.resume(throwing: CancellationError()) }
        for watcher in watchers { watcher.resume() }
      }
    } onCancel: {
      let continuation = state.withLock { state -> UnsafeContinuation<Outcome, any Error>? in
        guard let entry = state.pending.removeValue(forKey: id) else { return nil }
        state.order.removeAll { $0 == id }
        state.cancellations[entry.key, default: 0] += 1
        return entry.continuation
      }
      continuation?.resume(throwing: CancellationError())
    }
  }

  /// Resumes up to `limit` operations of `key` (all keys when `nil`), oldest first, with
  /// `outcome`. Returns how many it resumed.
  @discardableResult
  func release(_ key: Key?, limit: Int = .max, with outcome: Result<Outcome, any Error>) -> Int {
    let released = state.withLock { state in state.take({ key == nil || $0 == key }, limit: limit) }
    for continuation in released { continuation.resume(with: outcome) }
    return released.count
  }

  /// Resumes every operation, computing each outcome from its key.
  @discardableResult
  func releaseAll(with outcome: (Key) -> Result<Outcome, any Error>) -> Int {
    let released = state.withLock { state -> [(Key, UnsafeContinuation<Outcome, any Error>)] in
      let all = state.order.compactMap { id in state.pending[id].map { ($0.key, $0.continuation) } }
      state.pending.removeAll()
      state.order.removeAll()
      return all
    }
    for (key, continuation) in released { continuation.resume(with: outcome(key)) }
    return released.count
  }

  /// The keys of the suspended operations, oldest first.
  func pendingKeys() -> [Key] {
    state.withLock { state in state.order.compactMap { state.pending[$0]?.key } }
  }

  func pendingCount(for key: Key?) -> Int {
    state.withLock { $0.pendingCount(for: key) }
  }

  func cancellationCount(for key: Key?) -> Int {
    state.withLock { state in
      guard let key else { return state.cancellations.values.reduce(0, +) }
      return state.cancellations[key, default: 0]
    }
  }

  /// Returns once at least `count` operations of `key` (of any key when `nil`) are suspended.
  func waitUntilPending(_ count: Int, for key: Key?) async {
    let id = state.withLock { state -> UInt64 in
      state.nextID += 1
      return state.nextID
    }
    await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
      let ready = state.withLock { state -> Bool in
        if state.pendingCount(for: key) >= count { return true }
        state.watchers[id] = Watcher(key: key, count: count, continuation: continuation)
        return false
      }
      if ready { continuation.resume() }
    }
  }
}
