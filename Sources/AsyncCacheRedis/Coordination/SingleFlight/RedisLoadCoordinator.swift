public import AsyncCache

/// The `LoadCoordinator` of a ``RedisLayer`` configured with ``RedisSingleFlight``: what a
/// `LoadingCache` over the layer claims its loads through (see ``RedisLayer/loadCoordinator``).
public struct RedisLoadCoordinator<Key: Hashable & Sendable, Value: Sendable>: LoadCoordinator {
  /// The layer whose namespace the leases are taken in.
  public let layer: RedisLayer<Key, Value>

  /// Claims the load of `key`: a lease in Redis, or a wait for the instance that holds it.
  /// Never fails because Redis fails: the answer is `LoadClaim.uncoordinated` then.
  public func claim(_ key: Key, supersedes: CacheInstant?) async throws -> LoadClaim<Value> {
    // Never `nil`: a claim that waits ends with an entry, a lease or no coordination.
    try await layer.claimLoad(of: key, supersedes: supersedes, waiting: true) ?? .uncoordinated
  }

  /// Claims the load of `key` as ``claim(_:supersedes:)`` does, but returns `nil` at once when
  /// another instance holds its lease.
  public func claimUnlessHeld(_ key: Key, supersedes: CacheInstant?) async throws -> LoadClaim<Value>? {
    try await layer.claimLoad(of: key, supersedes: supersedes, waiting: false)
  }

  /// Stores the value under the lease (a fenced fill) and announces it, or announces the failure.
  public func complete(
    _ key: Key, token: UInt64, with result: Result<CacheEntry<Value>, any Error>
  ) async -> LeaseCompletion {
    await layer.completeLoad(of: key, token: token, with: result)
  }
}
