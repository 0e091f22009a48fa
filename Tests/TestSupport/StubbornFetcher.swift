import AsyncCache

/// An origin that ignores cancellation, as a slow or careless one does: each call waits until
/// the test finishes it (``finish(call:with:)``), or until the test lets every call through
/// (``finishAll()``), and then returns however often its task was cancelled meanwhile.
package final class StubbornFetcher<Key: Hashable & Sendable, Value: Sendable>: AsyncFetcher, Sendable {
  private struct State {
    /// The calls not finished yet, by number (1-based, in the order they came).
    var waiting: [Int: (key: Key, continuation: CheckedContinuation<Value, Never>)] = [:]
    var calls = 0
    var finishesAll = false
    /// The waits for a number of calls, by id.
    var watchers: [UInt64: (calls: Int, continuation: UnsafeContinuation<Void, Never>)] = [:]
    var nextWatcher: UInt64 = 0
  }

  private let state = Locked(State())
  private let value: @Sendable (Key) -> Value

  /// Creates an origin whose calls answer `value(key)` when ``finishAll()`` lets them through.
  package init(value: @escaping @Sendable (Key) -> Value) {
    self.value = value
  }

  /// The calls made so far.
  package var callCount: Int { state.withLock { $0.calls } }

  /// Waits, whatever cancellation says, until the call is finished; returns its value.
  package func fetch(_ key: Key) async throws -> Value {
    await withCheckedContinuation { (continuation: CheckedContinuation<Value, Never>) in
      let (finished, watchers) = state.withLock { state -> (Bool, [UnsafeContinuation<Void, Never>]) in
        state.calls += 1
        if !state.finishesAll { state.waiting[state.calls] = (key, continuation) }
        let ready = state.watchers.filter { $0.value.calls <= state.calls }
        for id in ready.keys { state.watchers.removeValue(forKey: id) }
        return (state.finishesAll, ready.values.map(\.continuation))
      }
      for watcher in watchers { watcher.resume() }
      if finished { continuation.resume(returning: value(key)) }
    }
  }

  /// Returns `value` from call number `call` (1-based), if it waits.
  package func finish(call: Int, with value: Value) {
    state.withLock { $0.waiting.removeValue(forKey: call) }?.continuation.resume(returning: value)
  }

  /// Lets every call through, those waiting and those to come, each with the origin's value.
  package func finishAll() {
    let waiting = state.withLock { state in
      state.finishesAll = true
      defer { state.waiting = [:] }
      return state.waiting.values
    }
    for call in waiting { call.continuation.resume(returning: value(call.key)) }
  }

  /// Returns once `count` calls were made, or the task is cancelled (by a time limit, say).
  package func waitForCalls(_ count: Int) async {
    let id = state.withLock { state in
      state.nextWatcher += 1
      return state.nextWatcher
    }
    await waitForWatcher { continuation in
      state.withLock { state in
        guard state.calls < count else { return false }
        state.watchers[id] = (count, continuation)
        return true
      }
    } unregister: {
      self.state.withLock { $0.watchers.removeValue(forKey: id)?.continuation }
    }
  }
}
