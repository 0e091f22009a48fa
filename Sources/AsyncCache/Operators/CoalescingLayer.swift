import Synchronization

extension AsyncCacheLayer {
  /// A layer that shares one lookup of this layer among the concurrent requests for a key:
  /// ten requests for a row that is being read cause one read.
  ///
  /// ```swift
  /// let chain = try CacheChain([memory, sqlite.coalescingLookups()])
  /// ```
  ///
  /// A ``LoadingCache`` already coalesces the loads behind its layers; this is for layers that
  /// are slow to read in chains without an origin, or read outside a loading cache.
  ///
  /// - A request whose task is cancelled leaves at once with `CancellationError`; the lookup
  ///   goes on for the others and is cancelled when the last one leaves.
  /// - Errors are shared like values, and never kept: the next request asks again.
  /// - A write or a removal through this layer detaches the key's lookup in flight once it is
  ///   done: requests that came before it get what the lookup read; requests after it start a
  ///   new lookup, which sees the write. Writes themselves are not coalesced.
  /// - The shared lookup runs in its own task, at the highest priority of the requests waiting
  ///   for it.
  ///
  /// Safe from any context. Each lookup costs one lock to join and one task for the key.
  public nonisolated func coalescingLookups() -> CoalescingLayer<Self> {
    CoalescingLayer(base: self)
  }
}

/// A layer that shares concurrent lookups of the same key: see
/// ``AsyncCacheLayer/coalescingLookups()``.
public final actor CoalescingLayer<Base: AsyncCacheLayer>: PassThroughCacheLayer {
  public typealias Key = Base.Key
  public typealias Value = Base.Value

  private typealias Waiter = UnsafeContinuation<CacheEntry<Value>?, any Error>

  /// The layer whose lookups are shared.
  public nonisolated let base: Base

  private typealias Lookups = SharedLookupsStateMachine<Key, Waiter, Task<Void, Never>>

  private nonisolated let lookups = Locked(Lookups())
  private nonisolated let nextRequestID = Atomic<UInt64>(0)

  init(base: Base) {
    self.base = base
  }

  /// The lookups of the base layer in flight. Safe from any context.
  public nonisolated var lookupsInFlight: Int { lookups.withLock { $0.lookupCount } }

  /// Joins the lookup of `key` in flight, or starts one.
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    let id = nextRequestID.wrappingAdd(1, ordering: .relaxed).newValue
    if #available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, visionOS 26.0, *) {
      // A request escalated while it waits raises its lookup's priority too.
      return try await withTaskPriorityEscalationHandler {
        try await wait(for: key, as: id)
      } onPriorityEscalated: { _, newPriority in
        if let task = lookups.withLock({ $0.raise(waiter: id, to: newPriority) }) {
          escalate(task, to: newPriority)
        }
      }
    } else {
      return try await wait(for: key, as: id)
    }
  }

  private nonisolated func wait(for key: Key, as id: UInt64) async throws -> CacheEntry<Value>? {
    try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: Waiter) in
        let priority = Task.currentPriority
        var raised: Task<Void, Never>?
        var isWatched = false
        let joined = lookups.withLock { state -> Lookups.JoinAction in
          let action = state.join(key, waiter: id, continuation, priority: priority, isCancelled: Task.isCancelled)
          switch action {
          case .start(let lookupID):
            // Started under the lock, so that a request cancelled at once finds the task to
            // cancel. The task takes the lock only when it finishes, after this returns.
            state.started(lookupID, work: Task { await self.look(up: key, lookupID: lookupID) })
          case .joined:
            raised = state.raise(waiter: id, to: priority)
          case .cancelled:
            break
          }
          isWatched = !state.watchers.isEmpty
          return action
        }
        if let raised { escalate(raised, to: priority) }
        // After the escalation: a test that waits for the requests to share the lookup finds it
        // at their highest priority.
        if isWatched { lookups.withLock { $0.resumeSatisfiedWatchers() } }
        if joined == .cancelled { continuation.resume(throwing: CancellationError()) }
      }
    } onCancel: {
      let (waiter, abandoned) = lookups.withLock { $0.leave(waiter: id) }
      waiter?.resume(throwing: CancellationError())
      abandoned?.cancel()
    }
  }

  private nonisolated func look(up key: Key, lookupID: UInt64) async {
    let result: Result<CacheEntry<Value>?, any Error>
    do {
      result = .success(try await base.entry(for: key))
    } catch {
      result = .failure(error)
    }
    for waiter in lookups.withLock({ $0.finish(lookupID) }) {
      waiter.resume(with: result)
    }
  }

  /// Stores `entry` in the base layer; requests that come after it start a new lookup.
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    defer { lookups.withLock { $0.detach(key) } }
    try await base.insert(entry, for: key)
  }

  /// Revalidates `key` in the base layer (see `AsyncCacheLayer.revalidate(_:for:replacing:)`);
  /// requests that come after it start a new lookup, which sees the new expiry and metadata.
  public nonisolated func revalidate(
    _ entry: CacheEntry<Value>, for key: Key, replacing held: CacheEntry<Value>
  ) async throws -> Bool {
    defer { lookups.withLock { $0.detach(key) } }
    return try await base.revalidate(entry, for: key, replacing: held)
  }

  /// Removes `key` from the base layer; requests that come after it start a new lookup.
  public nonisolated func removeValue(for key: Key) async throws {
    defer { lookups.withLock { $0.detach(key) } }
    try await base.removeValue(for: key)
  }

  /// Empties the base layer; requests that come after it start new lookups.
  public nonisolated func removeAll() async throws {
    defer { lookups.withLock { $0.detachAll() } }
    try await base.removeAll()
  }

  /// The wrapped layer, which memory pressure, the environment, closing and its load
  /// coordinator are passed on to.
  public nonisolated var passedThroughLayer: any AsyncCacheLayer<Key, Value> { base }

  /// Returns once at least `count` requests wait for the lookup of `key` that new requests
  /// would join, or once the calling task is cancelled (for tests: `AsyncCacheTesting` offers
  /// it as `waitForLookups(_:for:)`).
  package nonisolated func waitForWaiters(_ count: Int, for key: Key) async {
    let id = lookups.withLock { $0.watchers.makeID() }
    await waitForWatcher { continuation in
      lookups.withLock { $0.watch(id: id, key: key, count: count, continuation: continuation) }
    } unregister: {
      self.lookups.withLock { $0.watchers.unwatch(id) }
    }
  }
}
