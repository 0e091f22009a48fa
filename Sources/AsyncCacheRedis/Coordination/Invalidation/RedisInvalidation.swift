import AsyncCache

/// How the instances that share a ``RedisLayer`` namespace tell each other about writes, so
/// that each drops its own copies of a key from the layers above Redis.
///
/// With it set in the layer's configuration, every write and removal the layer makes is
/// followed, in the same pipeline, by a `PUBLISH` on the namespace's channel naming the key and
/// the instance. A layer that forwards invalidations (``RedisLayer/forwardInvalidations(to:)``)
/// subscribes to the channel and removes the keys that *other* instances wrote from the layers
/// it was given; messages of its own are ignored.
///
/// Pub/sub delivers a message at most once, to the subscribers connected at the time. When the
/// subscription breaks (or the first attempt to subscribe fails), the layer subscribes again,
/// after the circuit breaker's delays, and then empties the layers it forwards to, because
/// messages sent in between are lost.
///
/// With ``Mode-swift.struct/serverAssisted``, the server itself tells every instance about
/// every change to the namespace's keys, whoever made it: another service, a script,
/// `redis-cli`. See ``Mode-swift.struct``.
public struct RedisInvalidation: Sendable, Hashable {
  /// How changes reach the other instances.
  public struct Mode: Sendable, Hashable, CustomStringConvertible {
    private let name: String

    /// Every write and removal of a layer is followed by a `PUBLISH` on the namespace's
    /// channel, naming the key and the instance: only changes made through this library are
    /// announced, and an instance ignores its own. Works with every Redis, and on a cluster.
    public static let publish = Mode(name: "publish")
    /// Redis client-side caching: the subscription connection turns on
    /// `CLIENT TRACKING … REDIRECT <itself> BCAST PREFIX <namespace's prefix>` and subscribes to
    /// `__redis__:invalidate`. The server reports every key of the namespace that anyone
    /// modifies (and a flush of the database), this instance's own writes included: after a
    /// write, the next read of the key on the writing instance goes to Redis once. Nothing is
    /// published on writes. Needs Redis 6 or later and one server (not a cluster, whose nodes
    /// each track their own keys).
    public static let serverAssisted = Mode(name: "serverAssisted")

    public var description: String { name }
  }

  /// How changes reach the other instances. Default ``Mode-swift.struct/publish``.
  public var mode: Mode

  /// The pub/sub channel, or `nil` (the default) for `asynccache:invalidations:<namespace>`.
  /// Every instance of a namespace must use the same one.
  public var channel: String?
  /// How often the subscription is checked with `PING`, so that a connection that died
  /// without closing (a host that vanished) is noticed within this interval and the operation
  /// timeout, and replaced. Default 10 seconds, on the layer's clock (as are the delays before
  /// subscribing again).
  public var healthCheckInterval: Duration

  /// Creates invalidation settings.
  public init(mode: Mode = .publish, channel: String? = nil, healthCheckInterval: Duration = .seconds(10)) {
    self.mode = mode
    self.channel = channel
    self.healthCheckInterval = healthCheckInterval
  }

  /// The channel on which a server that tracks keys for a client (`CLIENT TRACKING`) reports
  /// them, in RESP2.
  static let trackingChannel = Array("__redis__:invalidate".utf8)

  /// The channel for `namespace`.
  func channel(for namespace: String) -> String {
    channel ?? "asynccache:invalidations:\(namespace)"
  }
}
