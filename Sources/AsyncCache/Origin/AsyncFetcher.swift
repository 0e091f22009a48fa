/// A read-only origin of values: the network, a database, a computation.
///
/// A ``LoadingCache`` calls its fetcher on a miss in every layer. Conforming types:
/// - return the value, or throw when there is none or it could not be fetched;
/// - throw `CancellationError` (not a platform error) when the task is cancelled.
public protocol AsyncFetcher<Key, Value>: Sendable {
  /// The type of the keys.
  associatedtype Key: Hashable & Sendable
  /// The type of the fetched values.
  associatedtype Value: Sendable

  /// Fetches the value for `key`.
  func fetch(_ key: Key) async throws -> Value
}

/// A fetcher made of a closure.
///
/// ```swift
/// let origin = ClosureFetcher { (id: Int) in try await api.user(id) }
/// ```
public struct ClosureFetcher<Key: Hashable & Sendable, Value: Sendable>: AsyncFetcher {
  private let body: @Sendable (Key) async throws -> Value

  /// Creates a fetcher that calls `body`.
  public init(_ body: @escaping @Sendable (Key) async throws -> Value) {
    self.body = body
  }

  /// Calls the closure.
  public func fetch(_ key: Key) async throws -> Value {
    try await body(key)
  }
}
