/// Something waiting for a load: a request, which wants the value; a prefetch, which wants to
/// know where the value came from; or a bulk request, which collects the values of many keys.
@usableFromInline
enum LoadWaiter<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  case request(UnsafeContinuation<Value, any Error>)
  case prefetch(UnsafeContinuation<LoadSource, any Error>)
  case bulk(BulkCollector<Key, Value>)

  /// How the waiter joins a load: what makes it urgent, and counted as a request.
  @inlinable
  var kind: LoadTable<Key, Value>.JoinKind {
    switch self {
    case .request: .request
    case .prefetch: .prefetch
    case .bulk: .bulk
    }
  }

  /// Answers the waiter with the outcome of the load of `key`: its value, and where it came
  /// from (both computed once per load, not once per waiter).
  @inlinable
  func resume(value: Result<Value, any Error>, source: Result<LoadSource, any Error>, key: Key) {
    switch self {
    // `resume(returning:)` and `resume(throwing:)`, not `resume(with:)`: in generic code that
    // one is a call that looks its types up, once per waiter.
    case .request(let continuation):
      switch value {
      case .success(let value): continuation.resume(returning: value)
      case .failure(let error): continuation.resume(throwing: error)
      }
    case .prefetch(let continuation):
      switch source {
      case .success(let source): continuation.resume(returning: source)
      case .failure(let error): continuation.resume(throwing: error)
      }
    case .bulk(let collector): collector.deliver(value, for: key)
    }
  }

  /// Answers a waiter that left (its task was cancelled). A bulk request handles its own
  /// cancellation, so it is not answered here.
  @inlinable
  func resume(throwing error: any Error) {
    switch self {
    case .request(let continuation): continuation.resume(throwing: error)
    case .prefetch(let continuation): continuation.resume(throwing: error)
    case .bulk: break
    }
  }
}

/// Collects the outcomes of the keys of one bulk request, and resumes the request once every
/// key is answered, or at the first failure when it fails fast.
@usableFromInline
final class BulkCollector<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  @usableFromInline
  struct State: Sendable {
    @usableFromInline var values: [Key: Value] = [:]
    @usableFromInline var failures: [Key: any Error] = [:]
    @usableFromInline var outstanding: Set<Key>
    @usableFromInline var continuation: UnsafeContinuation<Void, any Error>?
    /// The request was resumed: later outcomes are dropped.
    @usableFromInline var isDone = false
  }

  @usableFromInline let failsFast: Bool
  @usableFromInline let state: Locked<State>

  @usableFromInline
  init(keys: [Key], failsFast: Bool) {
    self.failsFast = failsFast
    self.state = Locked(State(outstanding: Set(keys)))
  }

  /// Stores the continuation the request waits on; resumes it at once if nothing is outstanding.
  /// It is only ever resumed normally: the outcome is in the collector.
  @usableFromInline
  func wait(with continuation: UnsafeContinuation<Void, any Error>) {
    let resume = state.withLock { state -> Bool in
      if state.outstanding.isEmpty || state.isDone {
        state.isDone = true
        return true
      }
      state.continuation = continuation
      return false
    }
    if resume { continuation.resume() }
  }

  /// Records the outcome of `key`; resumes the request when it was the last key, or on a
  /// failure when the request fails fast.
  @usableFromInline
  func deliver(_ result: Result<Value, any Error>, for key: Key) {
    let continuation = state.withLock { state -> UnsafeContinuation<Void, any Error>? in
      guard !state.isDone, state.outstanding.remove(key) != nil else { return nil }
      switch result {
      case .success(let value): state.values[key] = value
      case .failure(let error): state.failures[key] = error
      }
      let failed = if case .failure = result { true } else { false }
      guard state.outstanding.isEmpty || (failsFast && failed) else { return nil }
      state.isDone = true
      defer { state.continuation = nil }
      return state.continuation
    }
    continuation?.resume()
  }

  /// Fails every outstanding key with `error` (the request was cancelled) and resumes the request.
  @usableFromInline
  func failOutstanding(with error: any Error) {
    let continuation = state.withLock { state -> UnsafeContinuation<Void, any Error>? in
      guard !state.isDone else { return nil }
      for key in state.outstanding { state.failures[key] = error }
      state.outstanding = []
      state.isDone = true
      defer { state.continuation = nil }
      return state.continuation
    }
    continuation?.resume()
  }

  /// The keys not answered yet, and what was collected.
  @usableFromInline
  var snapshot: (outstanding: Set<Key>, values: [Key: Value], failures: [Key: any Error]) {
    state.withLock { ($0.outstanding, $0.values, $0.failures) }
  }
}
