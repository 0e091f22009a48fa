import Synchronization

extension AsyncCacheLayer {
  /// A layer that lets at most `maximumConcurrentRequests` requests reach this one at a time;
  /// the others wait for a slot in the order they came.
  ///
  /// ```swift
  /// let database = try sqlite.cappingRequests(at: 4)   // a connection pool of 4, say
  /// ```
  ///
  /// Lookups, writes, removals and ``AsyncCacheLayer/removeAll()`` are requests; memory
  /// pressure is not. A request whose task is cancelled while it waits leaves the queue at once
  /// and throws `CancellationError`, without reaching this layer; one that holds a slot runs on
  /// and this layer sees its cancellation. A request that arrives while others wait queues
  /// behind them even if a slot has just freed up, so nobody waits forever.
  ///
  /// Safe from any context. A request that finds a free slot takes one uncontended lock to
  /// enter and one to leave, with no actor hop.
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` when `maximumConcurrentRequests`
  ///   is less than 1.
  public nonisolated func cappingRequests(at maximumConcurrentRequests: Int) throws -> RequestCappedLayer<Self> {
    try RequestCappedLayer(base: self, maximumConcurrentRequests: maximumConcurrentRequests)
  }
}

/// A layer in front of another that lets a fixed number of requests through at a time: see
/// ``AsyncCacheLayer/cappingRequests(at:)``.
public final actor RequestCappedLayer<Base: AsyncCacheLayer>: PassThroughCacheLayer {
  public typealias Key = Base.Key
  public typealias Value = Base.Value

  /// The layer the requests reach.
  public nonisolated let base: Base
  /// The most requests that reach ``base`` at once.
  public nonisolated let maximumConcurrentRequests: Int

  @usableFromInline nonisolated let queue: Locked<RequestCapStateMachine<UnsafeContinuation<Void, any Error>>>
  private nonisolated let nextRequestID = Atomic<UInt64>(0)

  init(base: Base, maximumConcurrentRequests: Int) throws {
    guard maximumConcurrentRequests >= 1 else {
      throw AsyncCacheError.invalidConfiguration(
        "cappingRequests(at:) needs at least 1 concurrent request for \(Base.self); it was given \(maximumConcurrentRequests)"
      )
    }
    self.base = base
    self.maximumConcurrentRequests = maximumConcurrentRequests
    self.queue = Locked(RequestCapStateMachine(limit: maximumConcurrentRequests))
  }

  /// The requests that have reached ``base`` and not returned yet. Safe from any context.
  public nonisolated var requestsInFlight: Int { queue.withLock { $0.running } }

  /// The requests waiting for a slot. Safe from any context.
  public nonisolated var requestsWaiting: Int { queue.withLock { $0.waitingCount } }

  /// Looks `key` up in the base layer once a slot is free.
  @inlinable
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    try await acquireSlot()
    defer { releaseSlot() }
    return try await base.entry(for: key)
  }

  /// Stores `entry` in the base layer once a slot is free.
  @inlinable
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    try await acquireSlot()
    defer { releaseSlot() }
    try await base.insert(entry, for: key)
  }

  /// Revalidates `key` in the base layer once a slot is free: a request like the others (see
  /// `AsyncCacheLayer.revalidate(_:for:replacing:)`).
  public nonisolated func revalidate(
    _ entry: CacheEntry<Value>, for key: Key, replacing held: CacheEntry<Value>
  ) async throws -> Bool {
    try await acquireSlot()
    defer { releaseSlot() }
    return try await base.revalidate(entry, for: key, replacing: held)
  }

  /// Removes `key` from the base layer once a slot is free.
  @inlinable
  public nonisolated func removeValue(for key: Key) async throws {
    try await acquireSlot()
    defer { releaseSlot() }
    try await base.removeValue(for: key)
  }

  /// Empties the base layer once a slot is free.
  @inlinable
  public nonisolated func removeAll() async throws {
    try await acquireSlot()
    defer { releaseSlot() }
    try await base.removeAll()
  }

  /// The wrapped layer, which memory pressure, the environment, closing and its load
  /// coordinator are passed on to, at once: they never wait for a slot.
  public nonisolated var passedThroughLayer: any AsyncCacheLayer<Key, Value> { base }

  // MARK: Slots

  @inlinable
  nonisolated func acquireSlot() async throws {
    if queue.withLock({ $0.tryAcquire() }) { return }
    try await waitForSlot()
  }

  /// Queues for a slot: the path of a request that found none free.
  @usableFromInline
  nonisolated func waitForSlot() async throws {
    let id = nextRequestID.wrappingAdd(1, ordering: .relaxed).newValue
    try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
        // Cancellation sets the flag before it runs `onCancel`: if `onCancel` found nothing to
        // remove because it ran before this line took the lock, the flag is already set here.
        switch queue.withLock({ $0.acquire(id, continuation, isCancelled: Task.isCancelled) }) {
        case .proceed: continuation.resume()
        case .cancelled: continuation.resume(throwing: CancellationError())
        case .wait: break
        }
      }
    } onCancel: {
      queue.withLock { $0.cancel(id) }?.resume(throwing: CancellationError())
    }
  }

  @inlinable
  nonisolated func releaseSlot() {
    queue.withLock { $0.release() }?.resume()
  }

  /// Returns once at least `count` requests wait for a slot, or once the calling task is
  /// cancelled (for tests: `AsyncCacheTesting` offers it as `waitForWaitingRequests(_:)`).
  package nonisolated func waitForWaiting(_ count: Int) async {
    let id = queue.withLock { $0.watchers.makeID() }
    await waitForWatcher { continuation in
      queue.withLock { $0.watch(id: id, count: count, continuation: continuation) }
    } unregister: {
      self.queue.withLock { $0.watchers.unwatch(id) }
    }
  }
}
