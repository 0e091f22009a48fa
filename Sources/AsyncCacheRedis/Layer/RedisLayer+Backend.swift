import AsyncCache

extension RedisLayer {
  /// Sends the commands of `writer`, all for `key`, as one pipeline to the server (or the
  /// cluster's master) that holds it; throws the first error reply as a ``RedisError``.
  ///
  /// - Parameters:
  ///   - tolerating: The start of an error reply to return rather than throw.
  ///   - cancellable: Whether the calling task's cancellation gives the commands up.
  ///     When `false`, they run and are answered whatever happens to the task.
  nonisolated func run(
    _ writer: RESPCommandWriter, named name: String, key: String, tolerating: String? = nil,
    cancellable: Bool = true
  ) async throws -> [RESPValue] {
    switch backend {
    case .standalone(let pool):
      return try await run(writer, named: name, on: pool, tolerating: tolerating, cancellable: cancellable)
    case .cluster(let cluster):
      let group = RedisClusterClient.Group(slot: Int(ClusterSlot.of(prefix: keyPrefix, key: key)), writer: writer)
      guard cancellable else {
        // A cluster's sends may run in child tasks, which a cancellation reaches: in a task of
        // their own.
        return try await Task { try await self.run([group], named: name, in: cluster, tolerating: tolerating)[0] }
          .value
      }
      return try await run([group], named: name, in: cluster, tolerating: tolerating)[0]
    }
  }

  /// Sends the commands of `writer` as one pipeline on `pool`; throws the first error reply as
  /// a ``RedisError``.
  nonisolated func run(
    _ writer: RESPCommandWriter, named name: String, on pool: RedisConnectionPool, tolerating: String? = nil,
    cancellable: Bool = true
  ) async throws -> [RESPValue] {
    let replies: [RESPValue]
    do {
      replies = try await pool.send(writer, cancellable: cancellable)
    } catch let error as RedisError {
      counters.failures.add(1, ordering: .relaxed)
      throw error
    }
    try checkErrors(in: replies, named: name, server: pool.server, tolerating: tolerating)
    return replies
  }

  /// Sends each group to its slot's master; throws the first error reply as a ``RedisError``.
  nonisolated func run(
    _ groups: [RedisClusterClient.Group], named name: String, in cluster: RedisClusterClient,
    tolerating: String? = nil
  ) async throws -> [[RESPValue]] {
    let replies: [[RESPValue]]
    do {
      replies = try await cluster.send(groups)
    } catch let error as RedisError {
      counters.failures.add(1, ordering: .relaxed)
      throw error
    }
    for groupReplies in replies {
      try checkErrors(in: groupReplies, named: name, server: cluster.name, tolerating: tolerating)
    }
    return replies
  }

  private nonisolated func checkErrors(
    in replies: [RESPValue], named name: String, server: String, tolerating: String? = nil
  ) throws {
    for reply in replies {
      if case .error(let text) = reply {
        if let tolerating, text.hasPrefix(tolerating) { continue }
        // A key of another type under the namespace is not a value this layer can read: a
        // miss, as MGET's nil for it is (see `storedValue(from:key:command:)`).
        if name == "GET" && text.hasPrefix("WRONGTYPE") { continue }
        counters.failures.add(1, ordering: .relaxed)
        throw RedisError.reply(text, to: name, server: server)
      }
    }
  }

  /// Commands sent and not yet answered, on every connection.
  nonisolated var commandsInFlight: Int {
    switch backend {
    case .standalone(let pool): pool.commandsInFlight
    case .cluster(let cluster): cluster.commandsInFlight
    }
  }

  nonisolated func unexpected(_ reply: RESPValue, to command: String) -> RedisError {
    counters.failures.add(1, ordering: .relaxed)
    return RedisError(
      code: .protocolError,
      message:
        "\(configuration.servers) answered \(command) with an unexpected reply: \(String(describing: reply).prefix(200))"
    )
  }

  /// The server, or the cluster's masters: where commands without a key go.
  nonisolated func servers() async throws -> [RedisConnectionPool] {
    switch backend {
    case .standalone(let pool):
      return [pool]
    case .cluster(let cluster):
      do {
        return try await cluster.masters()
      } catch let error as RedisError {
        counters.failures.add(1, ordering: .relaxed)
        throw error
      }
    }
  }
}

extension RedisLayer {
  /// Where a layer's commands go.
  enum Backend: Sendable {
    case standalone(RedisConnectionPool)
    case cluster(RedisClusterClient)

    /// The pool of the configured server, or the client of the configured cluster (whose pools
    /// are made alike), with the configuration's limits and timing.
    ///
    /// - Parameters:
    ///   - clock: The clock of the timers (the circuit breakers').
    ///   - outage: The layer's record of which of its pieces cannot reach Redis.
    ///   - onEvent: Where the connections' events are reported.
    init(
      configuration: Configuration, clock: any CacheClock, counters: RedisCounters, outage: RedisOutage,
      onEvent: @escaping RedisEventSink
    ) {
      let makePool: @Sendable (RedisEndpoint) -> RedisConnectionPool = { endpoint in
        RedisConnectionPool(
          options: RedisConnectionPool.Options(
            host: endpoint.host, port: endpoint.port, connectTimeout: configuration.connectTimeout,
            operationTimeout: configuration.operationTimeout,
            callerWaitLimit: configuration.callerWaitLimit.nanoseconds,
            maximumConnections: configuration.maximumConnections, handshake: configuration.handshake,
            circuitBreaker: configuration.circuitBreaker,
            clock: clock, outage: outage),
          counters: counters, onEvent: onEvent)
      }
      switch configuration.servers {
      case .standalone(let endpoint):
        self = .standalone(makePool(endpoint))
      case .cluster(let seeds):
        self = .cluster(
          RedisClusterClient(
            seeds: seeds, counters: counters, clock: clock, onEvent: onEvent, makePool: makePool))
      }
    }

    func shutDown() {
      switch self {
      case .standalone(let pool): pool.shutDown()
      case .cluster(let cluster): cluster.shutDown()
      }
    }

    var cluster: RedisClusterClient? {
      if case .cluster(let cluster) = self { cluster } else { nil }
    }

    /// Where the invalidation subscription connects: the server, or a master of the cluster
    /// (a cluster passes published messages on to every node).
    /// Whether the server (every master of the cluster) answers a `PING` within the operation
    /// timeout, through the layer's connections.
    func answersPing() async -> Bool {
      let pools: [RedisConnectionPool]
      switch self {
      case .standalone(let pool):
        pools = [pool]
      case .cluster(let cluster):
        guard let masters = try? await cluster.masters() else { return false }
        pools = masters
      }
      for pool in pools {
        guard (try? await pool.send(RESPCommandWriter([RESPCommand("PING")]))) != nil else { return false }
      }
      return true
    }

    func subscriptionEndpoint() async throws -> RedisEndpoint {
      switch self {
      case .standalone(let pool):
        return RedisEndpoint(host: pool.options.host, port: pool.options.port)
      case .cluster(let cluster):
        guard let master = try await cluster.masters().randomElement() else {
          throw RedisError(code: .routingFailed, message: "\(cluster.name) has no master to subscribe on")
        }
        return RedisEndpoint(host: master.options.host, port: master.options.port)
      }
    }
  }
}
