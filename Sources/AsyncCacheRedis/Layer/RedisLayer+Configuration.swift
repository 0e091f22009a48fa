public import AsyncCache

/// Where a Redis server listens.
public struct RedisEndpoint: Sendable, Hashable, CustomStringConvertible {
  /// A host name or an IPv4 or IPv6 address.
  public var host: String
  /// The TCP port. Default 6379.
  public var port: Int

  /// Creates an endpoint.
  public init(host: String, port: Int = 6379) {
    self.host = host
    self.port = port
  }

  /// `host:port`.
  public var description: String { "\(host):\(port)" }
}

/// The Redis servers a ``RedisLayer`` uses: one server, or a Redis Cluster.
public enum RedisServers: Sendable, Hashable, CustomStringConvertible {
  /// One server: a standalone Redis, or a primary behind an address that follows failovers.
  case standalone(RedisEndpoint)
  /// A Redis Cluster, found through `seeds`: nodes of the cluster, any of which the layer
  /// asks for the rest of the topology (`CLUSTER SLOTS`). Give more than one, so that the
  /// layer starts while one is down.
  case cluster(seeds: [RedisEndpoint])

  /// The endpoints the layer is configured with.
  public var endpoints: [RedisEndpoint] {
    switch self {
    case .standalone(let endpoint): [endpoint]
    case .cluster(let seeds): seeds
    }
  }

  /// `host:port`, or `cluster of host:port, …`.
  public var description: String {
    switch self {
    case .standalone(let endpoint): endpoint.description
    case .cluster(let seeds): "cluster of \(seeds.map(\.description).joined(separator: ", "))"
    }
  }
}

extension RedisLayer {
  /// The server, credentials, limits and timing of a ``RedisLayer``.
  public struct Configuration: Sendable {
    /// The server, or the seed nodes of a cluster. Default `127.0.0.1:6379`, standalone.
    public var servers: RedisServers
    /// The ACL user for `AUTH`, or `nil` for the default user.
    public var username: String?
    /// The password for `AUTH`, or `nil` when the server requires none.
    public var password: String?
    /// The database `SELECT`ed on every connection. Default 0, the only one a cluster has.
    public var database: Int
    /// The name connections give themselves (`CLIENT SETNAME`), shown by `CLIENT LIST`, or
    /// `nil` for none. Letters, digits and punctuation only: no spaces.
    public var clientName: String?
    /// The most connections the layer opens for its operations, per server. Default 4.
    /// Commands from concurrent tasks share connections (pipelined), so a handful serves many
    /// tasks. Beside them, the layer may open one connection per server for the background
    /// deletion of entries dead by tag (named `<clientName>-dead-entries`, or `dead-entries`),
    /// and one for its subscription when invalidation or single flight is configured.
    public var maximumConnections: Int
    /// How long connecting may take once the name is resolved (resolution itself is bounded by
    /// the system's resolver). Default 1 second; at most a day.
    public var connectTimeout: Duration
    /// How long the server may take to answer a command. Default 500 ms; at most a day. A command that is not
    /// answered in time fails with ``RedisError/Code/timedOut`` and its connection is
    /// discarded. Keep it short: a cache that waits long for a slow server is slower than the
    /// layer below it.
    public var operationTimeout: Duration
    /// How long a lone command's caller waits for the reply on its own thread, on Linux, before
    /// the command goes to its connection's thread. Default 200 µs; at most 1 ms; `.zero` never.
    /// A command is lone when nothing else is in flight on its connection and no other caller
    /// in the process waits so: then the caller reads the reply itself, without the two thread
    /// hand-offs that cost as much as a loopback round trip. While it waits, its thread (one of
    /// the cooperative pool's) runs nothing else: set `.zero` for a service whose pool is busy
    /// with other work and whose Redis is near. A server whose round trips average more than
    /// the limit is not waited for. See ``RedisLayer/Statistics-swift.struct/repliesReadByCallers``.
    public var callerWaitLimit: Duration = .microseconds(200)
    /// The largest encoded value the layer sends; larger ones are refused with
    /// `PersistenceError.Code.valueTooLarge` before anything is sent. Default 16 MiB (Redis
    /// itself accepts up to 512 MiB).
    public var maximumValueSize: Int
    /// The lifetime of entries inserted without an expiry, or `nil` (the default) for none:
    /// then they stay until removed or evicted by the server's `maxmemory-policy`.
    public var timeToLive: Duration?
    /// Whether writes are announced to the other instances so that they drop the key from
    /// their upper layers, and how; `nil` (the default) for not at all. See
    /// ``RedisInvalidation`` and ``RedisLayer/forwardInvalidations(to:)``.
    public var invalidation: RedisInvalidation?
    /// Whether a `LoadingCache` over the layer loads each key once for every instance that
    /// shares the namespace, and how; `nil` (the default) for once per instance. With it, writes
    /// and removals also move the key's version forward, fencing out older loads' values. See
    /// ``RedisSingleFlight``.
    public var singleFlight: RedisSingleFlight?
    /// When the layer stops sending to a failing server and when it tries again.
    public var circuitBreaker: RedisCircuitBreakerPolicy
    /// The clock that expiry and the circuit breaker's delays are read from. Default: for expiry,
    /// the clock of the cache or chain the layer is put in (see `CacheEnvironment`), else
    /// `WallClock`; for the circuit breaker, the subscription's health checks and probes, and
    /// single flight's timers (lease waits, renewals, fills deferred while Redis is unreachable),
    /// `WallClock` (a cache's clock, which a test may hold still, does not reach them). Socket
    /// time limits are real time whatever the clock. The layer's `clock` tells the clock expiry
    /// is read from.
    @FollowsCache public var clock: any CacheClock
    /// Called with every ``RedisLayerEvent`` the layer's ``RedisLayer/events(bufferingNewest:)``
    /// sequences get, synchronously, possibly on a connection's thread: keep it short. Default
    /// `nil`.
    public var eventHandler: (@Sendable (RedisLayerEvent) -> Void)?

    /// An async function that returns when the service running the layer on its own (its
    /// `run()`) should shut down gracefully: pass swift-service-lifecycle's `gracefulShutdown`.
    /// Default `nil`: `run()` ends when its task is cancelled or the layer is closed. A layer in a
    /// `LoadingCache` is closed by the cache's own `run()` or `close()`.
    public var gracefulShutdown: (@Sendable () async throws -> Void)?
    /// Where the layer logs every ``RedisLayerEvent``: the first failure of an outage (a
    /// circuit that opens or the subscription breaking, whichever comes first) or a value it
    /// cannot read (`warning`); the end of the outage, when the last of them answers again, and
    /// the layer's close, with the deletions of dead entries it dropped (`notice`); a connection
    /// made or discarded (`info`); the rest of an outage (the probes that fail, the other
    /// servers, the attempts to subscribe again: `debug`). Default: the logger of the cache or chain the layer is put in (see
    /// `CacheEnvironment`), else `CacheLogger.disabled`. Errors the layer throws are not logged by
    /// it: its `CacheChain` logs them.
    @FollowsCache public var logger: CacheLogger

    /// Creates a configuration for one server at `endpoint`; see ``init(cluster:)`` for a
    /// Redis Cluster.
    public init(
      endpoint: RedisEndpoint = RedisEndpoint(host: "127.0.0.1"),
      username: String? = nil,
      password: String? = nil,
      database: Int = 0,
      clientName: String? = nil,
      maximumConnections: Int = 4,
      connectTimeout: Duration = .seconds(1),
      operationTimeout: Duration = .milliseconds(500),
      maximumValueSize: Int = 16 << 20,
      timeToLive: Duration? = nil,
      invalidation: RedisInvalidation? = nil,
      singleFlight: RedisSingleFlight? = nil,
      circuitBreaker: RedisCircuitBreakerPolicy = RedisCircuitBreakerPolicy(),
      clock: (any CacheClock)? = nil,
      eventHandler: (@Sendable (RedisLayerEvent) -> Void)? = nil,
      logger: CacheLogger? = nil
    ) {
      self.servers = .standalone(endpoint)
      self.username = username
      self.password = password
      self.database = database
      self.clientName = clientName
      self.maximumConnections = maximumConnections
      self.connectTimeout = connectTimeout
      self.operationTimeout = operationTimeout
      self.maximumValueSize = maximumValueSize
      self.timeToLive = timeToLive
      self.invalidation = invalidation
      self.singleFlight = singleFlight
      self.circuitBreaker = circuitBreaker
      self._clock = .clock(clock)
      self.eventHandler = eventHandler
      self._logger = .logger(logger)
    }

    /// Creates a configuration for the Redis Cluster that `seeds` belong to, with the other
    /// settings at their defaults; set them on the result.
    ///
    /// ```swift
    /// var configuration = RedisLayer<String, Data>.Configuration(cluster: [
    ///     RedisEndpoint(host: "10.0.0.11"), RedisEndpoint(host: "10.0.0.12"),
    ///     RedisEndpoint(host: "10.0.0.13"),
    /// ])
    /// configuration.password = secret
    /// ```
    public init(cluster seeds: [RedisEndpoint]) {
      self.init()
      servers = .cluster(seeds: seeds)
    }

    func validate() throws {
      let check = ConfigurationCheck("RedisLayer")
      func invalid(_ sentence: String) -> AsyncCacheError { check.invalid(sentence) }
      if case .cluster(let seeds) = servers {
        guard !seeds.isEmpty else { throw invalid("a cluster needs at least one seed endpoint") }
        guard database == 0 else {
          throw invalid("a Redis Cluster has database 0 only, got database \(database)")
        }
      }
      for endpoint in servers.endpoints {
        guard !endpoint.host.isEmpty else { throw invalid("the endpoint \(endpoint) has an empty host") }
        guard (1...65535).contains(endpoint.port) else {
          throw invalid("the port of \(endpoint) must be in 1...65535")
        }
      }
      if username != nil && password == nil { throw invalid("a username needs a password") }
      try check.requireNotNegative("database", database)
      if let clientName {
        try check.require(
          !clientName.isEmpty && !clientName.contains(where: { $0 == " " || $0.isNewline }), "clientName",
          is: clientName.debugDescription, mustBe: "non-empty and free of spaces and newlines")
      }
      try check.requirePositive("maximumConnections", maximumConnections)
      try check.require(
        callerWaitLimit >= .zero && callerWaitLimit <= .milliseconds(1), "callerWaitLimit",
        is: callerWaitLimit.readable, mustBe: "in [0, 1 ms]")
      // A day at most: a cache that waits longer has stopped being one, and deadlines stay
      // far from overflowing the monotonic clock.
      for (name, timeout) in [("connectTimeout", connectTimeout), ("operationTimeout", operationTimeout)] {
        try check.require(
          timeout > .zero && timeout <= .seconds(86_400), name, is: timeout.readable, mustBe: "in (0, 1 day]")
      }
      let largestValue = (512 << 20) - RedisEnvelope.maximumHeaderSize
      try check.require(
        (1...largestValue).contains(maximumValueSize), "maximumValueSize", is: "\(maximumValueSize)",
        mustBe: "in 1...\(largestValue)")
      try check.requirePositive("timeToLive", timeToLive)
      if let invalidation {
        if let channel = invalidation.channel, channel.isEmpty { throw invalid("invalidation.channel is empty") }
        if invalidation.mode == .serverAssisted, case .cluster = servers {
          throw invalid(
            "invalidation.mode serverAssisted needs one server: each node of a cluster tracks its own keys; use publish"
          )
        }
        try check.requirePositive("invalidation.healthCheckInterval", invalidation.healthCheckInterval)
      }
      if let singleFlight {
        if let channel = singleFlight.channel, channel.isEmpty { throw invalid("singleFlight.channel is empty") }
        try check.require(
          singleFlight.leaseTime >= .milliseconds(30) && singleFlight.leaseTime <= .seconds(86_400),
          "singleFlight.leaseTime", is: singleFlight.leaseTime.readable, mustBe: "in [30ms, 1 day]")
        if let invalidation, invalidation.mode == .publish,
          invalidation.channel(for: "") == singleFlight.channel(for: "")
        {
          throw invalid("singleFlight.channel and invalidation.channel must differ")
        }
        // Another namespace's default channel of the other kind: its messages would be taken
        // for this one's.
        if let channel = singleFlight.channel, channel.hasPrefix("asynccache:invalidations:") {
          throw invalid("singleFlight.channel \(channel.debugDescription) is named like an invalidation channel")
        }
        if let channel = invalidation?.channel, channel.hasPrefix("asynccache:loads:") {
          throw invalid("invalidation.channel \(channel.debugDescription) is named like a load channel")
        }
      }
      try check.requirePositive("circuitBreaker.failureThreshold", circuitBreaker.failureThreshold)
      guard circuitBreaker.initialDelay > .zero, circuitBreaker.maximumDelay >= circuitBreaker.initialDelay else {
        throw invalid(
          "circuitBreaker needs 0 < initialDelay <= maximumDelay, got \(circuitBreaker.initialDelay.readable) "
            + "and \(circuitBreaker.maximumDelay.readable)")
      }
    }

    /// The commands every new connection sends first.
    var handshake: [RESPCommand] {
      var commands: [RESPCommand] = []
      if let password {
        if let username {
          commands.append(RESPCommand("AUTH", username, password))
        } else {
          commands.append(RESPCommand("AUTH", password))
        }
      }
      if database != 0 { commands.append(RESPCommand("SELECT", String(database))) }
      if let clientName { commands.append(RESPCommand("CLIENT", "SETNAME", clientName)) }
      return commands
    }
  }
}
