/// A cached value together with the instant it expires and what its origin said about it.
///
/// Layers exchange entries rather than bare values, so that when a hit in a lower layer
/// back-fills the layers above it, the copy keeps the original expiry and metadata: a value that
/// expires on disk in five minutes never lives forever in memory, and an entity tag stored with
/// it in SQLite comes back with it.
public struct CacheEntry<Value: Sendable>: Sendable {
  /// The cached value.
  public var value: Value

  /// When the entry expires, or `nil` if it never expires.
  ///
  /// An entry is expired at and after this instant; layers never return an expired entry.
  public var expiresAt: CacheInstant?

  /// The entry's validators, tags and production time; empty (the default) when its origin gave
  /// none. See ``EntryMetadata``.
  public var metadata: EntryMetadata

  /// Creates an entry without metadata.
  ///
  /// - Parameters:
  ///   - value: The value to cache.
  ///   - expiresAt: When the entry expires; `nil` (the default) for never.
  @inlinable
  public init(_ value: Value, expiresAt: CacheInstant? = nil) {
    self.value = value
    self.expiresAt = expiresAt
    self.metadata = EntryMetadata()
  }

  /// Creates an entry with metadata.
  ///
  /// - Parameters:
  ///   - value: The value to cache.
  ///   - expiresAt: When the entry expires; `nil` for never.
  ///   - metadata: Its validators, tags and production time.
  @inlinable
  public init(_ value: Value, expiresAt: CacheInstant?, metadata: EntryMetadata) {
    self.value = value
    self.expiresAt = expiresAt
    self.metadata = metadata
  }

  /// Whether the entry has expired at `instant`.
  @inlinable
  public func isExpired(at instant: CacheInstant) -> Bool {
    guard let expiresAt else { return false }
    return expiresAt <= instant
  }

  /// Returns a copy that expires no later than `limit`.
  @inlinable
  public func expiring(noLaterThan limit: CacheInstant?) -> CacheEntry {
    guard let limit else { return self }
    var copy = self
    copy.expiresAt = Swift.min(expiresAt ?? .distantFuture, limit)
    return copy
  }
}

extension CacheEntry: Equatable where Value: Equatable {}
extension CacheEntry: Hashable where Value: Hashable {}
