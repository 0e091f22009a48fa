import AsyncCache
import Synchronization

// The lazy clean-up of entries killed by a tag invalidation: a read that finds one dead hands
// it to the layer's cleaner and returns; the cleaner deletes it later, off the read path, on a
// connection of its own.
extension RedisLayer {
  /// Deletes, in the background, the entries reads found dead by tag, each only if its key
  /// still holds an envelope that begins with the header it was read with (its expiry, version
  /// and metadata: so its tags and the instant it was produced). The value does not cross the
  /// network again, and an entry written since, with another header, stays.
  ///
  /// What it promises the read path:
  /// - **Reads send no writes.** A read hands its dead entries over (one lock) and returns; it
  ///   never waits for a deletion, so a cancelled read returns at once.
  /// - **A connection of its own.** The deletions go through a pool of one connection, with its
  ///   own circuit breaker: while writes are paused (`CLIENT PAUSE WRITE`, as a failover does),
  ///   only the deletions wait, and no read is queued behind one.
  /// - **Quiet failures.** A deletion that fails is counted in
  ///   ``Statistics/deadEntryDeletionsFailed`` only (not in ``Statistics/failures``, not in the
  ///   layer's breaker), logged at debug, and the entry is left for a later read, a write of
  ///   its key or its expiry.
  /// - **Batched.** Pending deletions go out together: one script per 512 keys (per slot in a
  ///   cluster), pipelined on the one connection to each server. A failure counts the keys of
  ///   the scripts it failed, once: in a cluster, a master that fails fails its own.
  /// - **Bounded.** At most ``capacity`` entries wait; past that, a dead entry is left for a
  ///   later read to hand over again.
  final class DeadEntryCleaner: Sendable {
    /// The most entries that wait for deletion.
    static var capacity: Int { 4_096 }
    /// The most keys one script deletes.
    static var batchSize: Int { 512 }

    private struct State {
      /// Full keys (prefix included), and the header each was read with.
      var pending: [[UInt8]: [UInt8]] = [:]
      /// Whether a task is deleting the pending entries.
      var draining = false
      var closed = false
    }

    /// The clean-up's own pool (or cluster client): one connection per server.
    private let backend: Backend
    private let state = Locked(State())
    /// Where failures and the connection's events are logged, at debug.
    private let environment: LayerEnvironment
    /// Entries deleted.
    let deleted = Atomic<Int>(0)
    /// Entries whose deletion failed (the server could not be reached or refused the script).
    let failed = Atomic<Int>(0)
    /// Entries whose key held another entry (or none) when the script ran: kept.
    let kept = Atomic<Int>(0)
    /// Pipelines sent: one per batch and server, and one more for the scripts a server did not
    /// know.
    let roundTrips = Atomic<Int>(0)

    /// A cleaner for a layer with `configuration`, which starts no connection until the first
    /// deletion, and logs to `environment`'s logger at debug.
    init(configuration: Configuration, clock: any CacheClock, environment: LayerEnvironment) {
      var configuration = configuration
      configuration.maximumConnections = 1
      // Told apart from the layer's connections in `CLIENT LIST`.
      configuration.clientName = (configuration.clientName.map { $0 + "-" } ?? "") + "dead-entries"
      self.environment = environment
      // Counters of its own: its connections, timeouts and breaker are not the layer's.
      self.backend = Backend(
        configuration: configuration, clock: clock, counters: RedisCounters(), outage: RedisOutage(),
        onEvent: { event, _ in environment.log(.debug, "dead-entry clean-up: \(event)") })
    }

    /// Hands over entries found dead: `(full key, header)` pairs. Never waits.
    func delete(_ dead: some Sequence<(key: [UInt8], header: [UInt8])>) {
      let start = state.withLock { state -> Bool in
        guard !state.closed else { return false }
        for (key, header) in dead where !header.isEmpty {
          guard state.pending.count < Self.capacity || state.pending[key] != nil else { break }
          state.pending[key] = header
        }
        guard !state.draining, !state.pending.isEmpty else { return false }
        state.draining = true
        return true
      }
      guard start else { return }
      Task(priority: .background) { await self.drain() }
    }

    /// Stops: drops what waits and closes the connection (a deletion in flight fails). Returns
    /// how many waiting deletions it dropped.
    @discardableResult
    func close() -> Int {
      let dropped = state.withLock { state in
        defer {
          state.closed = true
          state.pending = [:]
        }
        return state.closed ? 0 : state.pending.count
      }
      backend.shutDown()
      return dropped
    }

    /// Entries waiting to be deleted.
    var pendingCount: Int { state.withLock { $0.pending.count } }

    /// Commands the clean-up sent and the server has not answered.
    var commandsInFlight: Int {
      switch backend {
      case .standalone(let pool): pool.commandsInFlight
      case .cluster(let cluster): cluster.commandsInFlight
      }
    }

    /// Deletes the pending entries, a capacity's worth at a time, until none waits.
    private func drain() async {
      while true {
        let batch = state.withLock { state -> [(key: [UInt8], header: [UInt8])] in
          guard !state.closed, !state.pending.isEmpty else {
            state.draining = false
            return []
          }
          let batch = state.pending.map { (key: $0.key, header: $0.value) }
          state.pending = [:]
          return batch
        }
        guard !batch.isEmpty else { return }
        switch backend {
        case .standalone(let pool):
          await delete(Self.chunks(of: batch)) { try await pool.send($0) }
        case .cluster(let cluster):
          // One script per slot (and per 512 keys), each sent on its own so that a master that
          // fails fails its own scripts only. The client pipelines the scripts of concurrent
          // tasks on each master's connection.
          var bySlot: [Int: [(key: [UInt8], header: [UInt8])]] = [:]
          for entry in batch { bySlot[Int(ClusterSlot.of(entry.key)), default: []].append(entry) }
          let scripts = bySlot.flatMap { slot, entries in Self.chunks(of: entries).map { (slot, $0) } }
          await withTaskGroup(of: Void.self) { group in
            for (index, (slot, entries)) in scripts.enumerated() {
              // At most 64 at once.
              if index >= 64 { await group.next() }
              group.addTask {
                await self.delete([entries]) { writer in
                  try await cluster.send([RedisClusterClient.Group(slot: slot, writer: writer)])[0]
                }
              }
            }
          }
        }
      }
    }

    private static func chunks<Element>(of elements: [Element]) -> [ArraySlice<Element>] {
      stride(from: 0, to: elements.count, by: batchSize).map {
        elements[$0..<Swift.min($0 + batchSize, elements.count)]
      }
    }

    /// Runs ``LayerScripts/deleteDead`` once per element of `scripts`, all in one pipeline
    /// (`send`, one round trip): by hash, then by text for those the server did not know
    /// (`NOSCRIPT`: a new server, or a replica promoted since). Counts each script's keys as
    /// deleted, kept or failed, once.
    private func delete(
      _ scripts: [ArraySlice<(key: [UInt8], header: [UInt8])>],
      send: (RESPCommandWriter) async throws -> [RESPValue]
    ) async {
      var unsent = scripts
      for byHash in [true, false] where !unsent.isEmpty {
        var pipeline = RESPCommandWriter()
        for entries in unsent {
          let keys = entries.map(\.key)
          let headers = entries.map(\.header)
          if byHash {
            LayerScripts.deleteDead.appendEvalSHA(keys: keys, arguments: headers, to: &pipeline)
          } else {
            LayerScripts.deleteDead.appendEval(keys: keys, arguments: headers, to: &pipeline)
          }
        }
        let replies: [RESPValue]
        do {
          roundTrips.add(1, ordering: .relaxed)
          replies = try await send(pipeline)
        } catch {
          fail(unsent.reduce(0) { $0 + $1.count }, because: "\(error)")
          return
        }
        var unknown: [ArraySlice<(key: [UInt8], header: [UInt8])>] = []
        for (entries, reply) in zip(unsent, replies) {
          switch reply {
          case .integer(let count):
            deleted.add(Int(count), ordering: .relaxed)
            kept.add(entries.count - Int(count), ordering: .relaxed)
          case .error(let text) where byHash && text.hasPrefix("NOSCRIPT"):
            unknown.append(entries)
          default:
            fail(entries.count, because: String(describing: reply).prefix(200))
          }
        }
        unsent = unknown
      }
    }

    private func fail(_ count: Int, because reason: some StringProtocol) {
      failed.add(count, ordering: .relaxed)
      environment.log(
        .debug, "dead-entry clean-up: \(count) deletions failed, the entries stay until read again: \(reason)")
    }
  }
}

extension LayerScripts {
  /// For each key of `KEYS`: deletes it (`UNLINK`) if its value begins with the bytes of the
  /// `ARGV` at the same index (the header its entry was read with), reading only those bytes.
  /// A key that holds another Redis type, or another entry, or none, stays. Returns the number
  /// of keys deleted.
  static let deleteDead = RedisScript(
    """
      local deleted = 0
      for index, key in ipairs(KEYS) do
        local header = ARGV[index]
        if header and #header > 0 then
          local stored = redis.pcall('GETRANGE', key, 0, #header - 1)
          if type(stored) == 'string' and stored == header then
            redis.call('UNLINK', key)
            deleted = deleted + 1
          end
        end
      end
      return deleted
    """)
}
