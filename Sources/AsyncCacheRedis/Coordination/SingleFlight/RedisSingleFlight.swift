import AsyncCache

/// One load per key for the whole fleet: the instances that share a ``RedisLayer`` namespace
/// ask the origin once between them for a key that none has (see
/// <doc:RunningOnManyMachines#One-load-per-key-for-the-fleet>).
///
/// With it set in the layer's configuration, a `LoadingCache` over the layer claims a lease for
/// the key in Redis before it asks its origin. The instance that gets the lease loads, stores
/// the value (if no write or removal of the key came after the lease was granted: a fenced
/// fill) and announces it on the namespace's load channel; the others wait for the
/// announcement and read the value from Redis. Every instance of a namespace must set it:
/// an instance without it neither waits for leases nor moves the key's version forward when it
/// writes.
public struct RedisSingleFlight: Sendable, Hashable {
  /// How long a lease lasts unless its holder renews it: the longest the other instances wait
  /// for an instance that died in the middle of a load. The holder renews it every third of
  /// this while its load runs, so a load may take longer. Default 5 seconds; from 30 ms to one
  /// day.
  public var leaseTime: Duration
  /// The pub/sub channel of the load announcements, or `nil` (the default) for
  /// `asynccache:loads:<namespace>`. Every instance of a namespace must use the same one, and
  /// no other namespace's: neither one of theirs nor a name of the
  /// `asynccache:invalidations:` family (refused).
  public var channel: String?
  /// How often the holder renews its lease; `nil` for a third of the lease time. Tests set it
  /// shorter, to see renewals without waiting for them.
  var renewalInterval: Duration?

  /// Creates single-flight settings.
  public init(leaseTime: Duration = .seconds(5), channel: String? = nil) {
    self.leaseTime = leaseTime
    self.channel = channel
  }

  /// The channel for `namespace`.
  func channel(for namespace: String) -> String {
    channel ?? "asynccache:loads:\(namespace)"
  }

  /// The lease time in whole milliseconds.
  var leaseMilliseconds: Int64 { max(1, leaseTime.saturatingMilliseconds) }

  /// How long a key's version outlives its last lease, write or removal, in milliseconds: long
  /// enough that a holder cut off from Redis cannot see its own token come back.
  var versionMilliseconds: Int64 { max(60_000, leaseMilliseconds * 4) }
}

extension Duration {
  /// The duration in whole milliseconds, rounded down, within `Int64`.
  var saturatingMilliseconds: Int64 {
    let (seconds, attoseconds) = components
    let (product, overflow) = seconds.multipliedReportingOverflow(by: 1000)
    guard !overflow else { return seconds < 0 ? .min : .max }
    return product &+ attoseconds / 1_000_000_000_000_000
  }
}
