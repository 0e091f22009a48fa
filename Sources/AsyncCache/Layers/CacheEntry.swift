/// A cached value together with the instant it expires.
///
/// Layers exchange entries rather than bare values, so that when a hit in a lower layer
/// back-fills the layers above it, the copy keeps the original expiry: a value that expires
/// on disk in five minutes never lives forever in memory.
public struct CacheEntry<Value: Sendable>: Sendable {
  /// The cached value.
  public var value: Value

  /// When the entry expires, or `nil` if it never expires.
  ///
  /// An entry is expired at and after this instant; layers never return an expired entry.
  public var expiresAt: CacheInstant?

  /// Creates an entry.
  ///
  /// - Parameters:
  ///   - value: The value to cache.
  ///   - expiresAt: When the entry expires; `nil` (the default) for never.
  @inlinable
  public init(_ value: Value, expiresAt: CacheInstant? = nil) {
    self.value = value
    self.expiresAt = expiresAt
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
