extension AsyncCacheLayer {
  /// This layer behind a concrete type that names only its key and value types.
  ///
  /// `any AsyncCacheLayer<Key, Value>` stores a composed layer in a property without spelling
  /// its type, and is all a ``CacheChain`` or a ``LoadingCache`` needs. It cannot take further
  /// operators (`mappingKeys`, `onlyIf`, …), because an existential does not conform to the
  /// protocol: erase it when the layer must go on composing.
  ///
  /// ```swift
  /// let users: AnyCacheLayer<String, User> = disk.mappingValues(.json(User.self)).eraseToAnyLayer()
  /// let byID = users.mappingKeys { (id: UserID) in id.rawValue }   // still composes
  /// ```
  ///
  /// Erasing an ``AnyCacheLayer`` returns it unchanged.
  public nonisolated func eraseToAnyLayer() -> AnyCacheLayer<Key, Value> {
    AnyCacheLayer(self)
  }
}

/// A layer of a given key and value type, whatever its concrete type: see
/// ``AsyncCacheLayer/eraseToAnyLayer()``.
///
/// Each operation costs one call through the existential on top of the wrapped layer's own.
public final actor AnyCacheLayer<Key: Hashable & Sendable, Value: Sendable>: PassThroughCacheLayer {
  /// The wrapped layer.
  public nonisolated let base: any AsyncCacheLayer<Key, Value>

  /// Wraps `base`; an ``AnyCacheLayer`` is not wrapped twice.
  public init(_ base: any AsyncCacheLayer<Key, Value>) {
    self.base = (base as? AnyCacheLayer<Key, Value>)?.base ?? base
  }

  /// Looks `key` up in the wrapped layer.
  @inlinable
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    try await base.entry(for: key)
  }

  /// Stores `entry` in the wrapped layer.
  @inlinable
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    try await base.insert(entry, for: key)
  }

  /// The wrapped layer, which removals, memory pressure, the environment, closing and its load
  /// coordinator are passed on to.
  public nonisolated var passedThroughLayer: any AsyncCacheLayer<Key, Value> { base }
}

extension AsyncFetcher {
  /// This origin behind a concrete type that names only its key and value types, for an origin
  /// kept in a property that must go on composing: `any AsyncFetcher<Key, Value>` serves a
  /// ``LoadingCache`` but takes no operators. Erasing an ``AnyFetcher`` returns it unchanged.
  ///
  /// ```swift
  /// let origin: AnyFetcher<URL, Data> = http.postProcessing(validate).eraseToAnyFetcher()
  /// ```
  public func eraseToAnyFetcher() -> AnyFetcher<Key, Value> {
    AnyFetcher(self)
  }
}

/// An origin of a given key and value type, whatever its concrete type: see
/// ``AsyncFetcher/eraseToAnyFetcher()``.
public struct AnyFetcher<Key: Hashable & Sendable, Value: Sendable>: AsyncFetcher {
  /// The wrapped origin.
  public let base: any AsyncFetcher<Key, Value>

  /// Wraps `base`; an ``AnyFetcher`` is not wrapped twice.
  public init(_ base: any AsyncFetcher<Key, Value>) {
    self.base = (base as? AnyFetcher<Key, Value>)?.base ?? base
  }

  /// Fetches `key` from the wrapped origin.
  @inlinable
  public func fetch(_ key: Key) async throws -> Value {
    try await base.fetch(key)
  }
}
