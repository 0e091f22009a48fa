extension AsyncCacheLayer {
  /// A layer that takes keys of another type and asks this one with the key `transform`
  /// returns: a domain struct in front of a layer keyed by its `String` identifier, say.
  ///
  /// ```swift
  /// let byUser = memory.mappingKeys { (user: User) in user.id }   // MemoryLayer<String, Avatar>
  /// ```
  ///
  /// The transform runs for every operation (lookups, writes, removals) and may be `async` and
  /// throw: its error becomes ``AsyncCacheError/Code/transformFailed``, which a ``CacheChain``
  /// records and treats as a skip of this layer. It must map distinct keys to distinct keys.
  public nonisolated func mappingKeys<NewKey: Hashable & Sendable>(
    _ transform: @escaping @Sendable (NewKey) throws -> Key
  ) -> KeyMappedLayer<NewKey, Self> {
    KeyMappedLayer(base: self, transform: .sync(transform), synchronousLookup: nil)
  }

  /// A layer that takes keys of another type and asks this one with the key `transform`
  /// returns, where the transform may suspend, as the synchronous overload does.
  public nonisolated func mappingKeys<NewKey: Hashable & Sendable>(
    _ transform: @escaping @Sendable (NewKey) async throws -> Key
  ) -> KeyMappedLayer<NewKey, Self> {
    KeyMappedLayer(base: self, transform: .async(transform), synchronousLookup: nil)
  }

  /// A layer of values of another type, converted on the way in and out by `transform`: a
  /// layer of `Data` seen as a layer of decoded models, say.
  ///
  /// ```swift
  /// let users = disk.mappingValues(.json(User.self))   // DiskLayer<Int, Data> → <Int, User>
  /// ```
  ///
  /// Expiry travels unchanged. A failed conversion becomes
  /// ``AsyncCacheError/Code/transformFailed`` (a ``CacheChain`` records it and skips the layer).
  public nonisolated func mappingValues<NewValue: Sendable>(
    _ transform: ValueTransform<Value, NewValue>
  ) -> ValueMappedLayer<NewValue, Self> {
    ValueMappedLayer(base: self, transform: transform, synchronousLookup: nil)
  }

  /// A layer consulted only for the keys `predicate` accepts: for the others, lookups miss and
  /// writes and removals do nothing.
  ///
  /// ```swift
  /// let database = sqlite.onlyIf { _ in await settings.offlineMode }
  /// ```
  ///
  /// The predicate runs for every operation but ``AsyncCacheLayer/removeAll()``, which always
  /// reaches the layer. It may be `async` and may throw: its error becomes
  /// ``AsyncCacheError/Code/conditionFailed``, which a ``CacheChain`` passes to the caller,
  /// whatever the layer's failure policy.
  public nonisolated func onlyIf(
    _ predicate: @escaping @Sendable (Key) throws -> Bool
  ) -> ConditionalLayer<Self> {
    ConditionalLayer(base: self, predicate: .sync(predicate), synchronousLookup: nil)
  }

  /// A layer consulted only for the keys `predicate` accepts, where the predicate may suspend
  /// (to read a setting from an actor, say), as the synchronous overload does.
  public nonisolated func onlyIf(
    _ predicate: @escaping @Sendable (Key) async throws -> Bool
  ) -> ConditionalLayer<Self> {
    ConditionalLayer(base: self, predicate: .async(predicate), synchronousLookup: nil)
  }
}

/// A layer in front of another that takes keys of another type: see
/// ``AsyncCacheLayer/mappingKeys(_:)-39ac1``.
public final actor KeyMappedLayer<Key: Hashable & Sendable, Base: AsyncCacheLayer>: WrappingCacheLayer {
  public typealias Value = Base.Value

  /// The layer asked with the transformed keys.
  public nonisolated let base: Base
  @usableFromInline nonisolated let transform: OperatorFunction<Key, Base.Key>
  @usableFromInline nonisolated let synchronousLookup: SynchronousLookupFunction<Key, Value>?

  @usableFromInline
  init(
    base: Base, transform: OperatorFunction<Key, Base.Key>, synchronousLookup: SynchronousLookupFunction<Key, Value>?
  ) {
    self.base = base
    self.transform = transform
    self.synchronousLookup = synchronousLookup
  }

  @inlinable
  nonisolated func baseKey(_ key: Key) async throws -> Base.Key {
    try await transforming("the key transform in front of \(Base.self) for key \(describeKey(key))") {
      try await transform(key)
    }
  }

  /// Looks up the transformed key in the base layer.
  @inlinable @inline(__always)
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    if transform.isSynchronous {
      let baseKey = try transformingNow("the key transform in front of \(Base.self) for key \(describeKey(key))") {
        try transform.synchronous!(key)
      }
      return try await base.entry(for: baseKey)
    }
    return try await base.entry(for: baseKey(key))
  }

  /// Stores `entry` under the transformed key in the base layer.
  @inlinable
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    try await base.insert(entry, for: baseKey(key))
  }

  /// Revalidates the transformed key in the base layer (see
  /// ``AsyncCacheLayer/revalidate(_:for:replacing:)``).
  public nonisolated func revalidate(
    _ entry: CacheEntry<Value>, for key: Key, replacing held: CacheEntry<Value>
  ) async throws -> Bool {
    try await base.revalidate(entry, for: baseKey(key), replacing: held)
  }

  /// Removes the transformed key from the base layer.
  @inlinable
  public nonisolated func removeValue(for key: Key) async throws {
    try await base.removeValue(for: baseKey(key))
  }

  /// The wrapped layer, which memory pressure, the environment, closing and emptying are passed on to.
  public nonisolated var wrappedLayer: any AsyncCacheLayer { base }
}

/// A layer in front of another that converts its values: see
/// ``AsyncCacheLayer/mappingValues(_:)``.
public final actor ValueMappedLayer<Value: Sendable, Base: AsyncCacheLayer>: WrappingCacheLayer {
  public typealias Key = Base.Key

  /// The layer that stores the converted values.
  public nonisolated let base: Base
  /// The conversion between the base layer's values and this layer's.
  public nonisolated let transform: ValueTransform<Base.Value, Value>
  @usableFromInline nonisolated let synchronousLookup: SynchronousLookupFunction<Key, Value>?

  @usableFromInline
  init(
    base: Base, transform: ValueTransform<Base.Value, Value>, synchronousLookup: SynchronousLookupFunction<Key, Value>?
  ) {
    self.base = base
    self.transform = transform
    self.synchronousLookup = synchronousLookup
  }

  /// Looks `key` up in the base layer and decodes the value, keeping its expiry.
  @inlinable @inline(__always)
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    guard let stored = try await base.entry(for: key) else { return nil }
    let value: Value
    if transform.decoder.isSynchronous {
      value = try transformingNow("decoding the value of \(Base.self) for key \(describeKey(key))") {
        try transform.decoder.synchronous!(stored.value)
      }
    } else {
      value = try await transforming("decoding the value of \(Base.self) for key \(describeKey(key))") {
        try await transform.decode(stored.value)
      }
    }
    return CacheEntry(value, expiresAt: stored.expiresAt, metadata: stored.metadata)
  }

  /// Encodes the value and stores it in the base layer with the same expiry and metadata.
  @inlinable
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    let stored = try await transforming("encoding a value for \(Base.self) for key \(describeKey(key))") {
      try await transform.encode(entry.value)
    }
    try await base.insert(CacheEntry(stored, expiresAt: entry.expiresAt, metadata: entry.metadata), for: key)
  }

  /// Removes `key` from the base layer.
  @inlinable
  public nonisolated func removeValue(for key: Key) async throws {
    try await base.removeValue(for: key)
  }

  /// The wrapped layer, which memory pressure, the environment, closing and emptying are passed on to.
  public nonisolated var wrappedLayer: any AsyncCacheLayer { base }
}

/// A layer consulted only for some keys: see ``AsyncCacheLayer/onlyIf(_:)-7sup4``.
public final actor ConditionalLayer<Base: AsyncCacheLayer>: WrappingCacheLayer {
  public typealias Key = Base.Key
  public typealias Value = Base.Value

  /// The layer consulted when the predicate accepts the key.
  public nonisolated let base: Base
  @usableFromInline nonisolated let predicate: OperatorFunction<Key, Bool>
  @usableFromInline nonisolated let synchronousLookup: SynchronousLookupFunction<Key, Value>?

  @usableFromInline
  init(base: Base, predicate: OperatorFunction<Key, Bool>, synchronousLookup: SynchronousLookupFunction<Key, Value>?) {
    self.base = base
    self.predicate = predicate
    self.synchronousLookup = synchronousLookup
  }

  @inlinable
  nonisolated func accepts(_ key: Key) async throws -> Bool {
    do {
      return try await predicate(key)
    } catch {
      throw conditionFailure(error, key: key)
    }
  }

  /// ``accepts(_:)`` for a synchronous predicate, on the hit path.
  @inlinable @inline(__always)
  nonisolated func acceptsNow(_ key: Key, _ body: (Key) throws -> Bool) throws -> Bool {
    do {
      return try body(key)
    } catch {
      throw conditionFailure(error, key: key)
    }
  }

  @inlinable
  nonisolated func conditionFailure(_ error: any Error, key: Key) -> any Error {
    AsyncCache.conditionFailure(error, in: Base.self, key: key)
  }

  /// The base layer's entry when the predicate accepts `key`; `nil` otherwise.
  @inlinable @inline(__always)
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    if predicate.isSynchronous {
      guard try acceptsNow(key, predicate.synchronous!) else { return nil }
    } else {
      guard try await accepts(key) else { return nil }
    }
    return try await base.entry(for: key)
  }

  /// Stores `entry` in the base layer when the predicate accepts `key`.
  @inlinable
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    guard try await accepts(key) else { return }
    try await base.insert(entry, for: key)
  }

  /// Revalidates `key` in the base layer when the predicate accepts it (see
  /// ``AsyncCacheLayer/revalidate(_:for:replacing:)``).
  public nonisolated func revalidate(
    _ entry: CacheEntry<Value>, for key: Key, replacing held: CacheEntry<Value>
  ) async throws -> Bool {
    guard try await accepts(key) else { return false }
    return try await base.revalidate(entry, for: key, replacing: held)
  }

  /// Removes `key` from the base layer when the predicate accepts it.
  @inlinable
  public nonisolated func removeValue(for key: Key) async throws {
    guard try await accepts(key) else { return }
    try await base.removeValue(for: key)
  }

  /// The wrapped layer, which memory pressure, the environment, closing and emptying are passed on to.
  public nonisolated var wrappedLayer: any AsyncCacheLayer { base }
}

/// The error of a condition whose predicate threw `error` for `key`: `CancellationError`
/// unwrapped, ``AsyncCacheError/Code/conditionFailed`` otherwise.
@usableFromInline
func conditionFailure(_ error: any Error, in layer: Any.Type, key: some Any) -> any Error {
  guard !(error is CancellationError) else { return CancellationError() }
  return AsyncCacheError(
    code: .conditionFailed,
    message: "the condition in front of \(layer) failed for key \(describeKey(key))",
    underlying: error)
}
