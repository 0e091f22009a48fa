package import AsyncCache

/// A batch origin that records which caller asked for which keys, and holds every call until
/// the test opens it: the batch counterpart of `GatedFetcher`, for one cache or a fleet's
/// instances sharing it.
package final class GatedBatchOrigin<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  private struct State {
    var calls: [(caller: String, keys: [Key])] = []
    var outcome: Result<Void, any Error>?
    var waiting: [UnsafeContinuation<Void, Never>] = []
  }
  private let state = Locked(State())
  private let value: @Sendable (_ caller: String, _ key: Key) -> Value

  /// Creates an origin, closed, whose answer for `key` asked by `caller` is `value(caller, key)`.
  package init(value: @escaping @Sendable (_ caller: String, _ key: Key) -> Value) {
    self.value = value
  }

  /// The batch fetcher of `caller`: it answers every key it is asked for but `omitting`.
  package func fetcher(for caller: String = "", omitting: Set<Key> = []) -> ClosureBatchFetcher<Key, Value> {
    ClosureBatchFetcher { keys in
      try await self.enter(caller, asking: keys)
      return Dictionary(
        uniqueKeysWithValues: keys.filter { !omitting.contains($0) }.map { ($0, self.value(caller, $0)) })
    }
  }

  /// The calls so far, in order.
  package var calls: [(caller: String, keys: [Key])] { state.withLock { $0.calls } }

  /// How often each key was asked for, by all callers together.
  package var asksPerKey: [Key: Int] {
    calls.reduce(into: [:]) { counts, call in for key in call.keys { counts[key, default: 0] += 1 } }
  }

  /// Lets every call held, and every call to come, through: answered, or failed with `error`.
  package func open(throwing error: (any Error)? = nil) {
    let waiting = state.withLock { state in
      state.outcome = error.map { .failure($0) } ?? .success(())
      defer { state.waiting = [] }
      return state.waiting
    }
    for continuation in waiting { continuation.resume() }
  }

  /// Records a call and waits until the origin is open. A call is held even when its task is
  /// cancelled, as an origin slow to stop would be; it throws `CancellationError` once let through.
  private func enter(_ caller: String, asking keys: [Key]) async throws {
    await withUnsafeContinuation { continuation in
      let proceed = state.withLock { state in
        state.calls.append((caller, keys))
        if state.outcome != nil { return true }
        state.waiting.append(continuation)
        return false
      }
      if proceed { continuation.resume() }
    }
    try Task.checkCancellation()
    try state.withLock { $0.outcome }?.get()
  }
}
