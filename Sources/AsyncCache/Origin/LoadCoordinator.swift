/// Makes the processes that share a layer load each key once between them: a single flight
/// for a fleet, where the load table gives one per process.
///
/// A layer that many processes share (a Redis server under each instance's memory layer) offers
/// one through ``AsyncCacheLayer/loadCoordinator``, and a ``LoadingCache`` over that layer uses
/// it for every load that reaches its origin, the keys of a batch origin's calls included:
///
/// 1. The cache ``claim(_:supersedes:)``s the key. The coordinator grants the load to one
///    process, or waits for the process that holds it and returns what it stored.
/// 2. The process granted the load asks its origin, then ``complete(_:token:with:)``s the claim:
///    the coordinator stores the entry in its layer, unless a write or a removal of the key
///    came after the grant (the entry is refused then, and the cache stores it nowhere), and
///    tells the waiting processes. A failure or a cancellation ends the claim too, so that the
///    waiters get the error or one of them takes over.
///
/// A coordinator never fails a request because it cannot reach its store: it answers
/// ``LoadClaim/uncoordinated`` and the process loads on its own. Such a load is not fenced, so
/// the cache stores its value in every layer but the coordinator's: it never overwrites there
/// what a write made while it ran.
///
/// Requests of one process for one key are coalesced by the cache before they reach the
/// coordinator: a process holds at most one claim per key.
public protocol LoadCoordinator<Key, Value>: Sendable {
  /// The type of the keys.
  associatedtype Key: Hashable & Sendable
  /// The type of the cached values.
  associatedtype Value: Sendable

  /// Claims the load of `key` for this process, or waits until the process that holds it
  /// completes it.
  ///
  /// - Parameters:
  ///   - key: The key that no layer has.
  ///   - supersedes: The expiry of the newest entry the cache found and declined (a stale one,
  ///     being refreshed), or `nil`: an entry the layer holds is the answer only if it expires
  ///     later than this.
  /// - Returns: Whether to load (and the claim's token), the entry another process stored, or
  ///   ``LoadClaim/uncoordinated`` when the coordination cannot be reached.
  /// - Throws: ``AsyncCacheError/Code/failedElsewhere`` when the process that held the load
  ///   failed; `CancellationError` when the calling task is cancelled while it waits.
  func claim(_ key: Key, supersedes: CacheInstant?) async throws -> LoadClaim<Value>

  /// Claims the load of `key` as ``claim(_:supersedes:)`` does, unless another process holds
  /// it: then returns `nil` at once instead of waiting.
  ///
  /// A bulk request whose keys are fetched by a batch origin claims them all with this first,
  /// fetches those it was granted in one call, and only then waits for the others with
  /// ``claim(_:supersedes:)``. So it never holds the loads it was granted while it waits for
  /// another process, which may be waiting for one of them. The default implementation calls
  /// ``claim(_:supersedes:)``, which may wait: implement this in a coordinator whose claims
  /// wait, or two batches that each hold a key the other wants wait for each other until one
  /// of the claims gives up.
  ///
  /// - Returns: The claim, or `nil` when another process holds the load of `key`.
  /// - Throws: `CancellationError` when the calling task is cancelled.
  func claimUnlessHeld(_ key: Key, supersedes: CacheInstant?) async throws -> LoadClaim<Value>?

  /// Ends the claim `token` on `key` with what the load brought.
  ///
  /// A success is stored in the coordinator's layer and announced; a failure is announced to
  /// the waiting processes (a `CancellationError` releases the claim silently, so that one of
  /// them takes over at once). Never throws, and finishes its work even when the calling task
  /// is cancelled.
  ///
  /// - Returns: What became of the entry, for a success (``LeaseCompletion/notStored`` for a
  ///   failure).
  func complete(_ key: Key, token: UInt64, with result: Result<CacheEntry<Value>, any Error>) async
    -> LeaseCompletion
}

extension LoadCoordinator {
  /// Calls ``claim(_:supersedes:)``, which may wait for the process that holds the load.
  public func claimUnlessHeld(_ key: Key, supersedes: CacheInstant?) async throws -> LoadClaim<Value>? {
    try await claim(key, supersedes: supersedes)
  }
}

/// What a ``LoadCoordinator`` answers a claim with.
public enum LoadClaim<Value: Sendable>: Sendable {
  /// This process loads the key; complete the claim with `token` when the load ends.
  case granted(token: UInt64)
  /// Another process loaded the key meanwhile: this is the entry it stored in the coordinator's
  /// layer.
  case loadedElsewhere(CacheEntry<Value>)
  /// The coordination cannot be reached (its server is down or slow): load without it, and
  /// store the value in every layer but the coordinator's.
  case uncoordinated
}

/// What became of the entry a granted load completed its claim with.
public enum LeaseCompletion: Sendable, Hashable {
  /// The coordinator stored it in its layer: store it in the other layers.
  case stored
  /// A write or a removal of the key came after the claim was granted, or another process
  /// took the claim over: the entry is older than what the layer holds now. Store it nowhere
  /// (the requests that asked for it still get it).
  case superseded
  /// The coordinator could not store it (its server failed): store it in the other layers.
  case notStored
}
