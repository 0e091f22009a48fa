/// A level of a cache: memory, a database, files, a shared server.
///
/// Layers are actors and compose into a ``CacheChain``. They exchange ``CacheEntry`` values,
/// which carry the expiry along with the value.
///
/// Conforming types follow these rules:
/// - A miss is `nil`, never an error. Throw only when the layer *failed* (the disk is gone,
///   the server is down): the chain's ``LayerFailurePolicy`` decides what a failure means.
/// - A layer never returns an entry that has expired by its own clock.
/// - `CancellationError` passes through unwrapped.
/// - A layer should not abandon a write half-way because the calling task was cancelled.
///
/// Requirements may be implemented by `nonisolated` synchronous methods, as ``MemoryLayer``
/// does, when the layer keeps its state behind a lock.
///
/// Generic code reads a value with `try await layer.entry(for: key)?.value`. Concrete layers add
/// their own conveniences; the protocol declares none, because in `async` code Swift prefers an
/// `async` overload, which would shadow a layer's synchronous `value(for:)`.
public protocol AsyncCacheLayer<Key, Value>: Actor {
  /// The type of the keys.
  associatedtype Key: Hashable & Sendable
  /// The type of the cached values.
  associatedtype Value: Sendable

  /// Returns the unexpired entry for `key`, or `nil` when the layer has none.
  ///
  /// - Throws: An error only when the layer failed, never for a miss.
  func entry(for key: Key) async throws -> CacheEntry<Value>?

  /// Stores `entry` for `key`, replacing any previous entry.
  ///
  /// A layer may keep the entry for a shorter time than `entry.expiresAt` (it may evict it or
  /// cap its lifetime), never longer.
  func insert(_ entry: CacheEntry<Value>, for key: Key) async throws

  /// Removes the entry for `key`, if any.
  func removeValue(for key: Key) async throws

  /// Removes every entry.
  func removeAll() async throws

  /// Releases memory according to `level`.
  ///
  /// The default implementation does nothing, which suits layers that hold no memory of note.
  /// Implement it as an `async` method (it may be `nonisolated`): in `async` code Swift prefers
  /// an `async` overload, so a synchronous implementation would lose to the default when
  /// called on the concrete type.
  func handleMemoryPressure(_ level: MemoryPressureLevel) async

  /// Takes the clock and logger of the cache or chain the layer is put in, for a layer created
  /// without its own (see ``CacheEnvironment``).
  ///
  /// A ``LoadingCache`` and a ``CacheChain`` call it once, as they are created, on each layer
  /// they hold. Follow the first environment that sets a value and ignore later ones; a layer
  /// that wraps others passes the environment on to them. The default implementation does
  /// nothing, which suits layers that read no clock and log nothing.
  nonisolated func follow(_ environment: CacheEnvironment)

  /// Finishes the layer's work and releases what it holds: writes it buffers reach their
  /// store, connections and files close, its event sequences end.
  ///
  /// ``CacheChain/close()`` and ``LoadingCache/close()`` call it on each of their layers, once
  /// nothing else writes to them; a layer that wraps others passes it on. What the layer does
  /// when used after `close()` is its own to document (persistent layers throw a `closed`
  /// error). The default implementation does nothing, which suits layers that buffer nothing
  /// and hold nothing open. Implement it as an `async` method: in `async` code Swift prefers an
  /// `async` overload, so a synchronous implementation would lose to the default when called
  /// on the concrete type.
  ///
  /// - Throws: What the layer could not finish (a buffered write that failed).
  func close() async throws

  /// What makes the processes that share this layer load each key once between them, or `nil`
  /// (see ``LoadCoordinator``).
  ///
  /// A ``LoadingCache`` uses the coordinator of the first of its layers that offers one for
  /// every load that reaches its origin. The default implementation offers none.
  /// ``AnyCacheLayer``, ``CoalescingLayer`` and ``RequestCappedLayer`` pass their base layer's
  /// on: they store what they are given (``PassThroughCacheLayer``). Layers that change or
  /// filter what they store (the value transforms and conditions of the operators, any other
  /// ``WrappingCacheLayer``) and a nested ``CacheChain`` offer none, so a cache over them loads
  /// without coordination.
  nonisolated var loadCoordinator: (any LoadCoordinator<Key, Value>)? { get }

  /// Gives the entry stored for `key`, if it is `held` (the same expiry and the same metadata),
  /// the expiry and metadata of `entry` — whose value is `held`'s — without writing the value
  /// again: the revalidation of an entry whose origin said it did not change (see
  /// ``EntryFetcher``).
  ///
  /// Returns whether it did. `false` (the layer holds no such entry, or cannot change one in
  /// place) makes the caller ``insert(_:for:)`` `entry` whole instead. Compare the metadata as
  /// well as the expiry: another version of the value written with the same expiry must not
  /// take `held`'s validators. The default
  /// implementation returns `false`; ``MemoryLayer`` and `RedisLayer` change the entry in place
  /// (a Redis entry's value does not cross the network again), and the layers that store what
  /// they are given (``PassThroughCacheLayer``) pass it on.
  ///
  /// - Throws: What the layer could not do; the caller then records a failure of the layer.
  func revalidate(_ entry: CacheEntry<Value>, for key: Key, replacing held: CacheEntry<Value>) async throws -> Bool

  /// Makes every entry the layer holds that is filed under `tag` (``EntryMetadata/tags``) and
  /// was produced at or before `instant` (``EntryMetadata/producedAt``; any entry filed under
  /// `tag` that does not say) a miss from now on: ``CacheChain/invalidate(tag:)`` and
  /// ``LoadingCache/invalidate(tag:)`` call it on every layer.
  ///
  /// Record the instant and check entries against it when they are read, rather than look for
  /// them: an invalidation costs O(1) whatever the number of entries (see
  /// <doc:Semantics#Tags>). The chain over the layer checks what the layer answers with against
  /// its own record for as long as it lives, so the default implementation, which does
  /// nothing, is right for a layer that loses its entries with the process and shares them
  /// with no other. A layer that keeps them across restarts (``MemoryLayer`` snapshots aside)
  /// or shares them between processes must record the invalidation where they live: the SQLite,
  /// file, `UserDefaults` and Redis layers do. ``MemoryLayer`` records it too, so that its
  /// synchronous hits honour it. Layers that wrap others pass it on
  /// (``WrappingCacheLayer``).
  ///
  /// - Throws: What the layer could not record.
  func invalidate(tag: String, at instant: CacheInstant) async throws
}

extension AsyncCacheLayer {
  /// Does nothing.
  public func handleMemoryPressure(_ level: MemoryPressureLevel) async {}

  /// Does nothing.
  public nonisolated func follow(_ environment: CacheEnvironment) {}

  /// Does nothing.
  public nonisolated func close() async throws {}

  /// None.
  public nonisolated var loadCoordinator: (any LoadCoordinator<Key, Value>)? { nil }

  /// Records nothing: the chain over the layer holds the layer's entries filed under `tag` dead
  /// for as long as it lives.
  public nonisolated func invalidate(tag: String, at instant: CacheInstant) async throws {}

  /// Changes nothing in place: returns `false`, so that the caller stores `entry` whole.
  public nonisolated func revalidate(
    _ entry: CacheEntry<Value>, for key: Key, replacing held: CacheEntry<Value>
  ) async throws -> Bool {
    false
  }
}
