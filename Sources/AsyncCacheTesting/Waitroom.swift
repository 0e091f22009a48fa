import AsyncCache

/// Operations held by a test, keyed by `Key`, plus watchers that wait until enough are held. The
/// building block of the gated doubles.
///
/// Whether an operation is held is decided under the same lock that registers it, so a release
/// can never slip between "this operation must wait" and "it waits" and leave it held forever.
final class Waitroom<Key: Hashable & Sendable, Outcome: Sendable>: Sendable {
  private struct Pending {
    var key: Key
    var continuation: UnsafeContinuation<Outcome?, any Error>
  }

  private struct Watcher {
    var matches: @Sendable (Key) -> Bool
    var count: Int
    var continuation: UnsafeContinuation<Void, Never>
  }

  private struct State {
    var holdsEverything: Bool
    var held: Set<Key> = []
    var nextID: UInt64 = 0
    var pending: [UInt64: Pending] = [:]
    var order: [UInt64] = []
    var watchers: [UInt64: Watcher] = [:]
    var cancellations: [Key: Int] = [:]

    func isHeld(_ key: Key) -> Bool { holdsEverything || held.contains(key) }

    func pendingCount(where matches: (Key) -> Bool) -> Int {
      pending.values.reduce(0) { $0 + (matches($1.key) ? 1 : 0) }
    }

    mutating func makeID() -> UInt64 {
      nextID += 1
      return nextID
    }

    /// Removes and returns the watchers whose condition now holds.
    mutating func satisfiedWatchers() -> [UnsafeContinuation<Void, Never>] {
      let ready = watchers.filter { pendingCount(where: $0.value.matches) >= $0.value.count }
      for id in ready.keys { watchers[id] = nil }
      return ready.values.map(\.continuation)
    }

    /// Removes up to `limit` pending operations matching `select`, oldest first.
    mutating func take(limit: Int, where select: (Key) -> Bool) -> [Pending] {
      var taken: [Pending] = []
      var remaining: [UInt64] = []
      for id in order {
        if taken.count < limit, let entry = pending[id], select(entry.key) {
          taken.append(entry)
          pending[id] = nil
        } else {
          remaining.append(id)
        }
      }
      order = remaining
      return taken
    }
  }

  private let state: Locked<State>

  /// Creates a waitroom that holds every operation (`holdsEverything`) or only the keys
  /// passed to ``hold(_:)``.
  init(holdsEverything: Bool) {
    state = Locked(State(holdsEverything: holdsEverything))
  }

  /// Holds later operations of `key`.
  func hold(_ key: Key) {
    state.withLock { _ = $0.held.insert(key) }
  }

  /// Suspends until the test releases this operation if `key` is held now; returns `nil` at once
  /// otherwise.
  ///
  /// - Throws: `CancellationError` (counting a cancellation for `key`) if the task is cancelled
  ///   while held.
  func waitIfHeld(_ key: Key) async throws -> Outcome? {
    let id = state.withLock { state -> UInt64? in state.isHeld(key) ? state.makeID() : nil }
    guard let id else { return nil }
    return try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Outcome?, any Error>) in
        let (action, watchers) = state.withLock {
          state -> (Result<Outcome?, any Error>?, [UnsafeContinuation<Void, Never>]) in
          if Task.isCancelled {
            state.cancellations[key, default: 0] += 1
            return (.failure(CancellationError()), [])
          }
          // Checked again where it registers: the hold may have been lifted since.
          if !state.isHeld(key) { return (.success(nil), []) }
          state.pending[id] = Pending(key: key, continuation: continuation)
          state.order.append(id)
          return (nil, state.satisfiedWatchers())
        }
        if let action { continuation.resume(with: action) }
        for watcher in watchers { watcher.resume() }
      }
    } onCancel: {
      let continuation = state.withLock { state -> UnsafeContinuation<Outcome?, any Error>? in
        guard let entry = state.pending.removeValue(forKey: id) else { return nil }
        state.order.removeAll { $0 == id }
        state.cancellations[entry.key, default: 0] += 1
        return entry.continuation
      }
      continuation?.resume(throwing: CancellationError())
    }
  }

  /// Resumes up to `limit` held operations matching `select`, oldest first, with `outcome`;
  /// with `stopHolding`, operations matching `select` are no longer held afterwards (decided in
  /// the same critical section). Returns how many it resumed.
  @discardableResult
  func release(
    limit: Int = .max,
    stopHolding: Bool = false,
    where select: @escaping (Key) -> Bool,
    with outcome: (Key) -> Result<Outcome, any Error>
  ) -> Int {
    let released = state.withLock { state in
      if stopHolding {
        state.held = state.held.filter { !select($0) }
      }
      return state.take(limit: limit, where: select)
    }
    for entry in released { entry.continuation.resume(with: outcome(entry.key).map { $0 }) }
    return released.count
  }

  /// Stops holding anything and resumes every held operation.
  @discardableResult
  func openAndReleaseAll(with outcome: (Key) -> Result<Outcome, any Error>) -> Int {
    let released = state.withLock { state in
      state.holdsEverything = false
      state.held.removeAll()
      return state.take(limit: .max) { _ in true }
    }
    for entry in released { entry.continuation.resume(with: outcome(entry.key).map { $0 }) }
    return released.count
  }

  /// The keys of the held operations, oldest first.
  func pendingKeys() -> [Key] {
    state.withLock { state in state.order.compactMap { state.pending[$0]?.key } }
  }

  func pendingCount(where matches: (Key) -> Bool) -> Int {
    state.withLock { $0.pendingCount(where: matches) }
  }

  func cancellationCount(where matches: (Key) -> Bool) -> Int {
    state.withLock { state in state.cancellations.reduce(0) { $0 + (matches($1.key) ? $1.value : 0) } }
  }

  /// Returns once at least `count` held operations match `matches`, or once the calling task is
  /// cancelled.
  func waitUntilPending(_ count: Int, where matches: @escaping @Sendable (Key) -> Bool) async {
    let id = state.withLock { $0.makeID() }
    await waitForWatcher { continuation in
      state.withLock { state in
        guard state.pendingCount(where: matches) < count else { return false }
        state.watchers[id] = Watcher(matches: matches, count: count, continuation: continuation)
        return true
      }
    } unregister: {
      self.state.withLock { $0.watchers.removeValue(forKey: id)?.continuation }
    }
  }
}
