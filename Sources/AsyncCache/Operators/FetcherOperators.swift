extension AsyncFetcher {
  /// An origin that takes keys of another type and fetches the key `transform` returns: a
  /// domain struct in front of a fetcher of URLs, say.
  ///
  /// ```swift
  /// let avatars = http.mappingKeys { (user: User) in user.avatarURL }
  /// ```
  ///
  /// A failed transform throws ``AsyncCacheError/Code/transformFailed`` to the caller (the
  /// origin is the last stop: there is nothing to skip to).
  public func mappingKeys<NewKey: Hashable & Sendable>(
    _ transform: @escaping @Sendable (NewKey) async throws -> Key
  ) -> KeyMappedFetcher<NewKey, Self> {
    KeyMappedFetcher(base: self, transform: transform)
  }

  /// An origin whose values are converted by `transform` on the way out: the `Data` of a
  /// response decoded into a model, say. One way only: a fetcher is never written to.
  ///
  /// ```swift
  /// let users = http.mappingValues { data in try JSONDecoder().decode(User.self, from: data) }
  /// ```
  ///
  /// A failed conversion throws ``AsyncCacheError/Code/transformFailed``.
  public func mappingValues<NewValue: Sendable>(
    _ transform: @escaping @Sendable (Value) async throws -> NewValue
  ) -> ValueMappedFetcher<NewValue, Self> {
    ValueMappedFetcher(base: self, transform: transform)
  }
}

/// An origin in front of another that takes keys of another type: see
/// ``AsyncFetcher/mappingKeys(_:)``.
public struct KeyMappedFetcher<Key: Hashable & Sendable, Base: AsyncFetcher>: AsyncFetcher {
  public typealias Value = Base.Value

  /// The origin asked with the transformed keys.
  public let base: Base
  @usableFromInline let transform: @Sendable (Key) async throws -> Base.Key

  init(base: Base, transform: @escaping @Sendable (Key) async throws -> Base.Key) {
    self.base = base
    self.transform = transform
  }

  /// Fetches the transformed key from the base origin.
  @inlinable
  public func fetch(_ key: Key) async throws -> Value {
    let baseKey = try await transforming("the key transform in front of \(Base.self) for key \(describeKey(key))") {
      try await transform(key)
    }
    return try await base.fetch(baseKey)
  }
}

/// An origin in front of another that converts its values: see
/// ``AsyncFetcher/mappingValues(_:)``.
public struct ValueMappedFetcher<Value: Sendable, Base: AsyncFetcher>: AsyncFetcher {
  public typealias Key = Base.Key

  /// The origin whose values are converted.
  public let base: Base
  @usableFromInline let transform: @Sendable (Base.Value) async throws -> Value

  init(base: Base, transform: @escaping @Sendable (Base.Value) async throws -> Value) {
    self.base = base
    self.transform = transform
  }

  /// Fetches `key` from the base origin and converts the value.
  @inlinable
  public func fetch(_ key: Key) async throws -> Value {
    let value = try await base.fetch(key)
    return try await transforming("converting the value of \(Base.self) for key \(describeKey(key))") {
      try await transform(value)
    }
  }
}
