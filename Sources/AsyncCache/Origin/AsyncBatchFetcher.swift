/// An origin that fetches many values in one call: an API with a bulk endpoint, a database
/// query with `IN (…)`, a Redis `MGET`.
///
/// Give one to a ``LoadingCache`` and its bulk requests (``LoadingCache/values(for:)``,
/// ``LoadingCache/allValues(for:)``) load all their missing keys with one call instead of one
/// call per key. Conforming types:
/// - return the values they have, by key; a key left out of the result fails with
///   ``AsyncCacheError/Code/notFound``;
/// - throw when the call as a whole fails: every key of the batch fails with that error;
/// - throw `CancellationError` (not a platform error) when the task is cancelled.
public protocol AsyncBatchFetcher<Key, Value>: Sendable {
  /// The type of the keys.
  associatedtype Key: Hashable & Sendable
  /// The type of the fetched values.
  associatedtype Value: Sendable

  /// The most keys one call may ask for; larger batches are split. Default: no limit.
  var maximumBatchSize: Int { get }

  /// Fetches the values of `keys` (distinct, at most ``maximumBatchSize``).
  func fetch(_ keys: [Key]) async throws -> [Key: Value]
}

extension AsyncBatchFetcher {
  /// No limit.
  public var maximumBatchSize: Int { .max }
}

/// A batch fetcher made of a closure.
///
/// ```swift
/// let batches = ClosureBatchFetcher(maximumBatchSize: 100) { (ids: [Int]) in
///     try await api.users(ids).reduce(into: [:]) { $0[$1.id] = $1 }
/// }
/// ```
public struct ClosureBatchFetcher<Key: Hashable & Sendable, Value: Sendable>: AsyncBatchFetcher {
  /// The most keys one call may ask for.
  public let maximumBatchSize: Int
  private let body: @Sendable ([Key]) async throws -> [Key: Value]

  /// Creates a batch fetcher that calls `body` with at most `maximumBatchSize` keys (values
  /// below 1 count as 1).
  public init(maximumBatchSize: Int = .max, _ body: @escaping @Sendable ([Key]) async throws -> [Key: Value]) {
    self.maximumBatchSize = Swift.max(maximumBatchSize, 1)
    self.body = body
  }

  /// Calls the closure.
  public func fetch(_ keys: [Key]) async throws -> [Key: Value] {
    try await body(keys)
  }
}
