/// A layer that wraps another: an operator (``KeyMappedLayer``, ``CoalescingLayer``…), a
/// type-erased layer, or a layer of your own that adds behaviour in front of one.
///
/// A conforming type names the layer it wraps, and passes on to it what is not about entries:
/// memory pressure, the cache's environment (``AsyncCacheLayer/follow(_:)``) and closing, and
/// ``AsyncCacheLayer/removeAll()`` and ``AsyncCacheLayer/invalidate(tag:at:)``, which reach the
/// wrapped layer whatever the wrapper does to keys or values. It still implements the other
/// entry operations, which are its reason to be:
///
/// ```swift
/// actor AuditedLayer<Base: AsyncCacheLayer>: WrappingCacheLayer {
///   nonisolated let base: Base
///   init(_ base: Base) { self.base = base }
///   nonisolated var wrappedLayer: any AsyncCacheLayer { base }
///
///   func entry(for key: Base.Key) async throws -> CacheEntry<Base.Value>? {
///     print("read \(key)")
///     return try await base.entry(for: key)
///   }
///   func insert(_ entry: CacheEntry<Base.Value>, for key: Base.Key) async throws {
///     print("write \(key)")
///     try await base.insert(entry, for: key)
///   }
///   func removeValue(for key: Base.Key) async throws { try await base.removeValue(for: key) }
/// }
/// ```
///
/// A wrapper that stores what it is given, under the same keys, may also pass on the wrapped
/// layer's load coordinator: it conforms to ``PassThroughCacheLayer`` instead.
public protocol WrappingCacheLayer: AsyncCacheLayer {
  /// The wrapped layer.
  nonisolated var wrappedLayer: any AsyncCacheLayer { get }
}

extension WrappingCacheLayer {
  /// Passes the level to the wrapped layer.
  public nonisolated func handleMemoryPressure(_ level: MemoryPressureLevel) async {
    await wrappedLayer.handleMemoryPressure(level)
  }

  /// Passes the environment on to the wrapped layer.
  public nonisolated func follow(_ environment: CacheEnvironment) {
    wrappedLayer.follow(environment)
  }

  /// Closes the wrapped layer.
  public nonisolated func close() async throws {
    try await wrappedLayer.close()
  }

  /// Empties the wrapped layer.
  public nonisolated func removeAll() async throws {
    try await wrappedLayer.removeAll()
  }

  /// Invalidates `tag` in the wrapped layer.
  public nonisolated func invalidate(tag: String, at instant: CacheInstant) async throws {
    try await wrappedLayer.invalidate(tag: tag, at: instant)
  }
}

/// A wrapping layer that stores what it is given, under the same keys, in the layer it wraps:
/// that layer's load coordinator coordinates this one's loads too, and is passed on, as are
/// removals (``AsyncCacheLayer/removeValue(for:)``).
///
/// Conform by naming the wrapped layer with this layer's key and value types. Only a wrapper
/// whose entries are its wrapped layer's may: one that changes keys or values, or stores only
/// some of them, must offer no coordinator (the default of ``WrappingCacheLayer``), or a
/// coordinated load would be filled where the cache does not read it.
public protocol PassThroughCacheLayer: WrappingCacheLayer {
  /// The wrapped layer, whose keys and values are this layer's.
  nonisolated var passedThroughLayer: any AsyncCacheLayer<Key, Value> { get }
}

extension PassThroughCacheLayer {
  /// The wrapped layer.
  public nonisolated var wrappedLayer: any AsyncCacheLayer { passedThroughLayer }

  /// The wrapped layer's load coordinator.
  public nonisolated var loadCoordinator: (any LoadCoordinator<Key, Value>)? { passedThroughLayer.loadCoordinator }

  /// Removes `key` from the wrapped layer.
  public nonisolated func removeValue(for key: Key) async throws {
    try await passedThroughLayer.removeValue(for: key)
  }

  /// Revalidates `key` in the layer passed through.
  public nonisolated func revalidate(
    _ entry: CacheEntry<Value>, for key: Key, replacing held: CacheEntry<Value>
  ) async throws -> Bool {
    try await passedThroughLayer.revalidate(entry, for: key, replacing: held)
  }
}
