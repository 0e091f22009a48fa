extension AsyncCacheLayer {
  /// A layer whose lookups pass what this layer returns through `transform`, which sees the key
  /// that was asked for: a thumbnail resized for the key's size, a value stamped with the key.
  /// Writes reach this layer unchanged.
  ///
  /// ```swift
  /// let fitted = thumbnails.postProcessing { key, image in image.fitted(to: key.size) }
  /// ```
  ///
  /// A failed `transform` becomes ``AsyncCacheError/Code/transformFailed`` (a ``CacheChain``
  /// records it and skips the layer).
  public nonisolated func postProcessing(
    _ transform: @escaping @Sendable (Key, Value) throws -> Value
  ) -> PostProcessedLayer<Self> {
    PostProcessedLayer(base: self, transform: .sync { try transform($0.key, $0.value) }, synchronousLookup: nil)
  }

  /// A layer whose lookups pass what this layer returns through `transform`, which may suspend:
  /// see ``AsyncCacheLayer/postProcessing(_:)-2kw6w``.
  public nonisolated func postProcessing(
    _ transform: @escaping @Sendable (Key, Value) async throws -> Value
  ) -> PostProcessedLayer<Self> {
    PostProcessedLayer(
      base: self, transform: .async { try await transform($0.key, $0.value) }, synchronousLookup: nil)
  }

  /// A layer that sends each key to this layer or to `other`, as `usesOther` decides: two
  /// equivalent layers chosen by key, a file layer for `file:` URLs and a network cache for
  /// the others, say.
  ///
  /// ```swift
  /// let images = network.lane(files) { url in url.isFileURL }
  /// ```
  ///
  /// `usesOther` must be fast and must not fail: it runs for every operation.
  /// ``AsyncCacheLayer/removeAll()`` and memory pressure reach both layers.
  public nonisolated func lane<Other: AsyncCacheLayer<Key, Value>>(
    _ other: Other,
    when usesOther: @escaping @Sendable (Key) -> Bool
  ) -> LaneLayer<Self, Other> {
    LaneLayer(primary: self, other: other, usesOther: usesOther)
  }
}

extension AsyncFetcher {
  /// An origin whose values pass through `transform`, which sees the key that was asked for.
  ///
  /// A failed `transform` throws ``AsyncCacheError/Code/transformFailed``.
  public func postProcessing(
    _ transform: @escaping @Sendable (Key, Value) async throws -> Value
  ) -> PostProcessedFetcher<Self> {
    PostProcessedFetcher(base: self, transform: transform)
  }
}

/// A layer whose lookups are post-processed: see ``AsyncCacheLayer/postProcessing(_:)-2kw6w``.
public final actor PostProcessedLayer<Base: AsyncCacheLayer>: WrappingCacheLayer {
  public typealias Key = Base.Key
  public typealias Value = Base.Value

  /// The layer whose values are post-processed.
  public nonisolated let base: Base
  @usableFromInline nonisolated let transform: OperatorFunction<(key: Key, value: Value), Value>
  @usableFromInline nonisolated let synchronousLookup: SynchronousLookupFunction<Key, Value>?

  @usableFromInline
  init(
    base: Base,
    transform: OperatorFunction<(key: Key, value: Value), Value>,
    synchronousLookup: SynchronousLookupFunction<Key, Value>?
  ) {
    self.base = base
    self.transform = transform
    self.synchronousLookup = synchronousLookup
  }

  /// The base layer's entry, its value post-processed, its expiry and metadata kept.
  @inlinable
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    guard let entry = try await base.entry(for: key) else { return nil }
    let value = try await transforming("post-processing the value of \(Base.self) for key \(describeKey(key))") {
      try await transform((key, entry.value))
    }
    return CacheEntry(value, expiresAt: entry.expiresAt, metadata: entry.metadata)
  }

  /// Stores `entry` in the base layer unchanged.
  @inlinable
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    try await base.insert(entry, for: key)
  }

  /// Revalidates `key` in the base layer, which stores what it is given (see
  /// ``AsyncCacheLayer/revalidate(_:for:replacing:)``: it compares expiries and metadata).
  public nonisolated func revalidate(
    _ entry: CacheEntry<Value>, for key: Key, replacing held: CacheEntry<Value>
  ) async throws -> Bool {
    try await base.revalidate(entry, for: key, replacing: held)
  }

  /// Removes `key` from the base layer.
  @inlinable
  public nonisolated func removeValue(for key: Key) async throws {
    try await base.removeValue(for: key)
  }

  /// The wrapped layer, which memory pressure, the environment, closing and emptying are passed on to.
  public nonisolated var wrappedLayer: any AsyncCacheLayer { base }
}

/// An origin whose values are post-processed: see ``AsyncFetcher/postProcessing(_:)``.
public struct PostProcessedFetcher<Base: AsyncFetcher>: AsyncFetcher {
  public typealias Key = Base.Key
  public typealias Value = Base.Value

  /// The origin whose values are post-processed.
  public let base: Base
  @usableFromInline let transform: @Sendable (Key, Value) async throws -> Value

  init(base: Base, transform: @escaping @Sendable (Key, Value) async throws -> Value) {
    self.base = base
    self.transform = transform
  }

  /// Fetches `key` from the base origin and post-processes the value.
  @inlinable
  public func fetch(_ key: Key) async throws -> Value {
    let value = try await base.fetch(key)
    return try await transforming("post-processing the value of \(Base.self) for key \(describeKey(key))") {
      try await transform(key, value)
    }
  }
}

/// Two equivalent layers chosen by key: see ``AsyncCacheLayer/lane(_:when:)``.
public final actor LaneLayer<Primary: AsyncCacheLayer, Other: AsyncCacheLayer<Primary.Key, Primary.Value>>:
  AsyncCacheLayer
{
  public typealias Key = Primary.Key
  public typealias Value = Primary.Value

  /// The layer for the keys `usesOther` refuses.
  public nonisolated let primary: Primary
  /// The layer for the keys `usesOther` accepts.
  public nonisolated let other: Other
  @usableFromInline nonisolated let usesOther: @Sendable (Key) -> Bool

  init(primary: Primary, other: Other, usesOther: @escaping @Sendable (Key) -> Bool) {
    self.primary = primary
    self.other = other
    self.usesOther = usesOther
  }

  /// Looks `key` up in its lane's layer.
  @inlinable
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    usesOther(key) ? try await other.entry(for: key) : try await primary.entry(for: key)
  }

  /// Stores `entry` in its lane's layer.
  @inlinable
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    if usesOther(key) { try await other.insert(entry, for: key) } else { try await primary.insert(entry, for: key) }
  }

  /// Revalidates `key` in its lane's layer (see ``AsyncCacheLayer/revalidate(_:for:replacing:)``).
  public nonisolated func revalidate(
    _ entry: CacheEntry<Value>, for key: Key, replacing held: CacheEntry<Value>
  ) async throws -> Bool {
    usesOther(key)
      ? try await other.revalidate(entry, for: key, replacing: held)
      : try await primary.revalidate(entry, for: key, replacing: held)
  }

  /// Removes `key` from its lane's layer.
  @inlinable
  public nonisolated func removeValue(for key: Key) async throws {
    if usesOther(key) { try await other.removeValue(for: key) } else { try await primary.removeValue(for: key) }
  }

  /// Empties both layers; throws the first error after trying both.
  @inlinable
  public nonisolated func removeAll() async throws {
    var firstError: (any Error)?
    do { try await primary.removeAll() } catch { firstError = error }
    do { try await other.removeAll() } catch { firstError = firstError ?? error }
    if let firstError { throw firstError }
  }

  /// Invalidates `tag` in both lanes; throws the first error after trying both.
  public nonisolated func invalidate(tag: String, at instant: CacheInstant) async throws {
    var firstError: (any Error)?
    do { try await primary.invalidate(tag: tag, at: instant) } catch { firstError = error }
    do { try await other.invalidate(tag: tag, at: instant) } catch { firstError = firstError ?? error }
    if let firstError { throw firstError }
  }

  /// Passes the level to both layers.
  public nonisolated func handleMemoryPressure(_ level: MemoryPressureLevel) async {
    await primary.handleMemoryPressure(level)
    await other.handleMemoryPressure(level)
  }

  /// Passes the environment on to both lanes.
  public nonisolated func follow(_ environment: CacheEnvironment) {
    primary.follow(environment)
    other.follow(environment)
  }

  /// Closes both lanes, the other one even when the primary's close throws (its error is
  /// thrown then).
  public nonisolated func close() async throws {
    var failure: (any Error)?
    do { try await primary.close() } catch { failure = error }
    try await other.close()
    if let failure { throw failure }
  }
}
