import AsyncCache

/// The layer's way into a Redis Cluster: a ``RedisConnectionPool`` per master, and the map of
/// the 16384 hash slots to the masters that serve them.
///
/// - **Discovery.** The first operation reads the topology (`CLUSTER SLOTS`) from a seed; later
///   refreshes ask the known masters first, then the seeds. One refresh runs at a time; callers
///   that need one meanwhile wait for it.
/// - **Routing.** Commands are sent in groups whose keys share a slot. Groups for the same
///   master go as one pipeline; groups for different masters go concurrently.
/// - **Redirects.** `MOVED` repoints the slot at once, resends the group to its new master and
///   refreshes the whole topology in the background (at most once per ``refreshInterval`` of the
///   layer's clock). `ASK` resends the group to the node the
///   slot is migrating to, after `ASKING`, without repointing the slot. A group redirected more
///   than ``maximumRedirects`` times fails with ``RedisError/Code/routingFailed``.
/// - **Failures.** Each master's pool has its own circuit breaker, so a master that is down
///   fails its slots fast and leaves the others alone. A failure to reach a master (its breaker
///   open included) also refreshes the topology, at most once per ``refreshInterval``, so
///   that once the cluster has promoted a replica in its place, the slots point at it.
final class RedisClusterClient: Sendable {
  /// Commands whose keys are all in `slot`, in their wire form: one command with keys, first,
  /// and keyless ones (`PUBLISH`) after it. A redirected group is sent again whole.
  struct Group: Sendable {
    var slot: Int
    var writer: RESPCommandWriter
  }

  /// Redirects a group may follow before it fails.
  static let maximumRedirects = 5
  /// The least time between the refreshes that redirects and failures ask for.
  static let refreshInterval: Duration = .seconds(1)

  /// The nodes the topology is first read from.
  let seeds: [RedisEndpoint]
  /// The seeds, for messages.
  let name: String
  private let makePool: @Sendable (RedisEndpoint) -> RedisConnectionPool
  private let counters: RedisCounters
  private let onEvent: RedisEventSink
  private let clock: any CacheClock
  private let state: Locked<State>

  private struct State {
    /// The index in `nodes` of each slot's master, or -1 when no master is known for it.
    var slots = [Int16](repeating: -1, count: ClusterSlot.count)
    /// The masters the slots point at.
    var nodes: [RedisConnectionPool] = []
    /// Every pool in use: the masters', and those of nodes that left the topology (retired)
    /// or were only asked for it (seeds).
    var pools: [RedisEndpoint: RedisConnectionPool] = [:]
    /// Nodes that were not masters at the last refresh; their pools close at a later one with
    /// nothing in flight, so that commands sent to them finish.
    var retired: Set<RedisEndpoint> = []
    var topology: ClusterTopology?
    var refresh: Task<Void, any Error>?
    var lastRefresh: CacheInstant?
    var isShutDown = false

    mutating func pool(
      for endpoint: RedisEndpoint, make: (RedisEndpoint) -> RedisConnectionPool
    ) -> RedisConnectionPool {
      if let pool = pools[endpoint] { return pool }
      let pool = make(endpoint)
      pools[endpoint] = pool
      return pool
    }

    mutating func nodeIndex(
      for endpoint: RedisEndpoint, make: (RedisEndpoint) -> RedisConnectionPool
    ) -> Int16 {
      let pool = pool(for: endpoint, make: make)
      if let index = nodes.firstIndex(where: { $0 === pool }) { return Int16(index) }
      nodes.append(pool)
      return Int16(nodes.count - 1)
    }
  }

  init(
    seeds: [RedisEndpoint], counters: RedisCounters, clock: any CacheClock,
    onEvent: @escaping RedisEventSink,
    makePool: @escaping @Sendable (RedisEndpoint) -> RedisConnectionPool
  ) {
    self.seeds = seeds
    self.name = "the cluster of \(seeds.map(\.description).joined(separator: ", "))"
    self.counters = counters
    self.clock = clock
    self.onEvent = onEvent
    self.makePool = makePool
    self.state = Locked(State())
  }

  // MARK: - Sending

  /// Sends every group to the master of its slot and returns each group's replies (error
  /// replies included), following redirects.
  ///
  /// - Throws: ``RedisError``: a master's failure (see ``RedisConnectionPool/send(_:)``),
  ///   ``RedisError/Code/routingFailed`` when a slot has no master or a group is redirected too
  ///   often; `CancellationError`.
  func send(_ groups: [Group]) async throws -> [[RESPValue]] {
    try await requireTopology()
    var results = [[RESPValue]](repeating: [], count: groups.count)
    // Each group still to send, and the node an ASK sent it to.
    var pending = groups.indices.map { (index: $0, asking: RedisEndpoint?.none) }
    var redirected = 0
    var refreshedForUnknownSlot = false
    while !pending.isEmpty {
      let batches: [(pool: RedisConnectionPool, attempts: [(index: Int, asking: RedisEndpoint?)])]
      switch route(pending, groups) {
      case .routed(let routed):
        batches = routed
      case .shutDown:
        throw shutDownError
      case .unknownSlot(let slot):
        // A slot with no master: the topology may be out of date. Read it once, then give up.
        guard !refreshedForUnknownSlot else {
          throw RedisError(
            code: .routingFailed,
            message: "no master of \(name) serves slot \(slot) (CLUSTER SLOTS does not list it): "
              + "the cluster is down or being set up")
        }
        refreshedForUnknownSlot = true
        try await refreshTopology()
        continue
      }
      let replies = try await sendBatches(batches, groups)
      pending = []
      for (batch, batchReplies) in zip(batches, replies) {
        var offset = 0
        for attempt in batch.attempts {
          if attempt.asking != nil { offset += 1 }  // ASKING's OK
          let count = groups[attempt.index].writer.commandCount
          let groupReplies = Array(batchReplies[offset..<offset + count])
          offset += count
          guard let redirect = redirect(in: groupReplies, from: batch.pool) else {
            results[attempt.index] = groupReplies
            continue
          }
          counters.redirects.add(1, ordering: .relaxed)
          guard redirected < Self.maximumRedirects else {
            throw RedisError(
              code: .routingFailed,
              message: "\(name) redirected a command for slot \(groups[attempt.index].slot) more than "
                + "\(Self.maximumRedirects) times; the last redirect was \(redirect.kind) to \(redirect.target)")
          }
          switch redirect.kind {
          case .moved:
            repoint(slot: redirect.slot, to: redirect.target)
            pending.append((attempt.index, nil))
          case .ask:
            pending.append((attempt.index, redirect.target))
          }
        }
      }
      if !pending.isEmpty { redirected += 1 }
    }
    return results
  }

  /// The masters, for commands that go to every one of them (`SCAN`, `PING`).
  func masters() async throws -> [RedisConnectionPool] {
    try await requireTopology()
    return try state.withLock { state throws(RedisError) in
      guard !state.isShutDown else { throw shutDownError }
      var seen = Set<ObjectIdentifier>()
      return state.slots.compactMap { index -> RedisConnectionPool? in
        guard index >= 0 else { return nil }
        let pool = state.nodes[Int(index)]
        return seen.insert(ObjectIdentifier(pool)).inserted ? pool : nil
      }
    }
  }

  /// Closes every pool; operations in flight and later ones fail with
  /// ``RedisError/Code/shutDown``.
  func shutDown() {
    let (pools, refresh) = state.withLock { state in
      state.isShutDown = true
      defer {
        state.pools = [:]
        state.nodes = []
        state.slots = [Int16](repeating: -1, count: ClusterSlot.count)
        state.retired = []
        state.refresh = nil
      }
      return (Array(state.pools.values), state.refresh)
    }
    refresh?.cancel()
    for pool in pools { pool.shutDown() }
  }

  /// Commands sent and not yet answered, on every node.
  var commandsInFlight: Int { state.withLock { $0.pools.values.reduce(0) { $0 + $1.commandsInFlight } } }

  /// The topology last read, if any.
  var topology: ClusterTopology? { state.withLock { $0.topology } }

  private enum Routing {
    case routed([(pool: RedisConnectionPool, attempts: [(index: Int, asking: RedisEndpoint?)])])
    case unknownSlot(Int)
    case shutDown
  }

  /// The groups by the pool they go to, in the order each pool was first needed.
  private func route(_ pending: [(index: Int, asking: RedisEndpoint?)], _ groups: [Group]) -> Routing {
    state.withLock { state -> Routing in
      guard !state.isShutDown else { return .shutDown }
      var batches: [(pool: RedisConnectionPool, attempts: [(index: Int, asking: RedisEndpoint?)])] = []
      var batchOfPool: [ObjectIdentifier: Int] = [:]
      for attempt in pending {
        let pool: RedisConnectionPool
        if let asking = attempt.asking {
          pool = state.pool(for: asking, make: makePool)
        } else {
          let slot = groups[attempt.index].slot
          let index = state.slots[slot]
          guard index >= 0 else { return .unknownSlot(slot) }
          pool = state.nodes[Int(index)]
        }
        if let batch = batchOfPool[ObjectIdentifier(pool)] {
          batches[batch].attempts.append(attempt)
        } else {
          batchOfPool[ObjectIdentifier(pool)] = batches.count
          batches.append((pool, [attempt]))
        }
      }
      return .routed(batches)
    }
  }

  /// Sends each batch as one pipeline, concurrently, and returns their replies in order.
  private func sendBatches(
    _ batches: [(pool: RedisConnectionPool, attempts: [(index: Int, asking: RedisEndpoint?)])], _ groups: [Group]
  ) async throws -> [[RESPValue]] {
    func writer(for attempts: [(index: Int, asking: RedisEndpoint?)]) -> RESPCommandWriter {
      if attempts.count == 1 && attempts[0].asking == nil { return groups[attempts[0].index].writer }
      var writer = RESPCommandWriter(
        reservingCapacity: attempts.reduce(0) { $0 + groups[$1.index].writer.bytes.count + 20 })
      for attempt in attempts {
        // ASKING covers the next command: a group holds one keyed command, first, and keyless
        // ones (PUBLISH) after it.
        if attempt.asking != nil { writer.append(RESPCommand("ASKING")) }
        writer.append(contentsOf: groups[attempt.index].writer)
      }
      return writer
    }
    if batches.count == 1 {
      return [try await send(writer(for: batches[0].attempts), to: batches[0].pool)]
    }
    return try await withThrowingTaskGroup(of: (Int, [RESPValue]).self) { group in
      for (number, batch) in batches.enumerated() {
        let writer = writer(for: batch.attempts)
        group.addTask { (number, try await self.send(writer, to: batch.pool)) }
      }
      var replies = [[RESPValue]](repeating: [], count: batches.count)
      for try await (number, batchReplies) in group { replies[number] = batchReplies }
      return replies
    }
  }

  /// Sends on one node's pool; a failure to reach the node refreshes the topology, which finds
  /// the replica that may have taken its place.
  private func send(_ writer: RESPCommandWriter, to pool: RedisConnectionPool) async throws -> [RESPValue] {
    do {
      return try await pool.send(writer)
    } catch let error as RedisError {
      switch error.code {
      case .connectionFailed, .connectionClosed, .timedOut, .unavailable: refreshInBackground(rateLimited: true)
      default: break
      }
      throw error
    }
  }

  /// The redirect among `replies`, if any.
  private func redirect(in replies: [RESPValue], from pool: RedisConnectionPool) -> ClusterRedirect? {
    for reply in replies {
      if case .error(let text) = reply, text.hasPrefix("MOVED ") || text.hasPrefix("ASK "),
        let redirect = ClusterRedirect(errorText: text, askedHost: pool.options.host)
      {
        return redirect
      }
    }
    return nil
  }

  /// Points `slot` at `target` (after `MOVED`) and refreshes the rest in the background.
  private func repoint(slot: Int, to target: RedisEndpoint) {
    state.withLock { state in
      guard !state.isShutDown else { return }
      state.slots[slot] = state.nodeIndex(for: target, make: makePool)
    }
    refreshInBackground(rateLimited: true)
  }

  // MARK: - The topology

  /// Returns once a topology has been read.
  private func requireTopology() async throws {
    let ready = try state.withLock { state throws(RedisError) in
      guard !state.isShutDown else { throw shutDownError }
      return state.topology != nil
    }
    if ready { return }
    try await refreshTopology()
  }

  /// Reads the topology again, or waits for the refresh under way.
  func refreshTopology() async throws {
    let task = try state.withLock { state throws(RedisError) in
      guard !state.isShutDown else { throw shutDownError }
      if let refresh = state.refresh { return refresh }
      let refresh = Task { try await self.discover() }
      state.refresh = refresh
      return refresh
    }
    try await task.value
  }

  /// Starts a refresh unless one is under way (or, when `rateLimited`, one ran within the last
  /// ``refreshInterval``).
  private func refreshInBackground(rateLimited: Bool) {
    let now = clock.now
    state.withLock { state in
      guard !state.isShutDown, state.refresh == nil else { return }
      if rateLimited, let last = state.lastRefresh, last.duration(to: now) < Self.refreshInterval { return }
      state.refresh = Task { try await self.discover() }
    }
  }

  /// Asks the known masters, then the seeds, for the topology, and installs the first answer.
  private func discover() async throws {
    defer {
      let now = clock.now
      state.withLock { state in
        state.refresh = nil
        state.lastRefresh = now
      }
    }
    let candidates = state.withLock { state in
      var candidates = state.topology?.masters ?? []
      for seed in seeds where !candidates.contains(seed) { candidates.append(seed) }
      return candidates
    }
    var lastError: (any Error)?
    for endpoint in candidates {
      let pool = try state.withLock { state throws(RedisError) in
        guard !state.isShutDown else { throw shutDownError }
        return state.pool(for: endpoint, make: makePool)
      }
      do {
        let reply = try await pool.send(RESPCommandWriter([RESPCommand("CLUSTER", "SLOTS")]))[0]
        if case .error(let text) = reply {
          let error = RedisError.reply(text, to: "CLUSTER SLOTS", server: pool.server)
          lastError =
            text.contains("cluster support disabled")
            ? RedisError(
              code: .serverError,
              message: "\(pool.server) is not a Redis Cluster node (\(text)); configure the layer with its "
                + "endpoint instead of as a cluster")
            : error
          continue
        }
        let topology = try ClusterTopology(slotsReply: reply, askedHost: endpoint.host, server: pool.server)
        guard !topology.ranges.isEmpty else {
          lastError = RedisError(
            code: .routingFailed, message: "\(pool.server) lists no slots: the cluster is not set up yet")
          continue
        }
        install(topology)
        return
      } catch {
        lastError = error
      }
    }
    throw lastError ?? RedisError(code: .routingFailed, message: "\(name) has no node to ask for its topology")
  }

  /// Points every slot at its master, and closes the pools of nodes that left the topology at
  /// the refresh before.
  private func install(_ topology: ClusterTopology) {
    let (changed, closing) = state.withLock { state -> (Bool, [RedisConnectionPool]) in
      guard !state.isShutDown else { return (false, []) }
      let changed = state.topology != topology
      state.topology = topology
      state.nodes = []
      var slots = [Int16](repeating: -1, count: ClusterSlot.count)
      for range in topology.ranges {
        let index = state.nodeIndex(for: range.master, make: makePool)
        for slot in range.slots { slots[slot] = index }
      }
      state.slots = slots
      let masters = Set(topology.masters)
      var closing: [RedisConnectionPool] = []
      // A pool retired at the refresh before is closed once it has nothing in flight.
      for endpoint in state.retired where !masters.contains(endpoint) {
        if let pool = state.pools[endpoint], pool.commandsInFlight == 0 {
          state.pools.removeValue(forKey: endpoint)
          closing.append(pool)
        }
      }
      state.retired = Set(state.pools.keys).subtracting(masters)
      return (changed, closing)
    }
    counters.topologyRefreshes.add(1, ordering: .relaxed)
    for pool in closing { pool.shutDown() }
    if changed { onEvent(.topologyChanged(masters: topology.masters), nil) }
  }

  private var shutDownError: RedisError {
    RedisError(code: .shutDown, message: "the Redis layer for \(name) was shut down")
  }
}
