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
  ///   cluster), in one pipeline per server.
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

    /// A cleaner for a layer with `configuration`, which starts no connection until the first
    /// deletion, and logs to `environment`'s logger at debug.
    init(configuration: Configuration, clock: any CacheClock, environment: LayerEnvironment) {
      var configuration = configuration
      configuration.maximumConnections = 1
      self.environment = environment
      // Counters of its own: its connections, timeouts and breaker are not the layer's.
      self.backend = Backend(
        configuration: configuration, clock: clock, counters: RedisCounters(),
        onEvent: { event in environment.log(.debug, "dead-entry clean-up: \(event)") })
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

    /// Stops: drops what waits and closes the connection (a deletion in flight fails).
    func close() {
      state.withLock { state in
        state.closed = true
        state.pending = [:]
      }
      backend.shutDown()
    }

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
        do {
          try await send(batch)
        } catch {
          failed.add(batch.count, ordering: .relaxed)
          environment.log(
            .debug, "dead-entry clean-up: \(batch.count) deletions failed, the entries stay until read again: \(error)")
        }
      }
    }

    /// Runs ``LayerScripts/deleteDead`` over `batch`: one script per ``batchSize`` keys (and per
    /// slot, in a cluster), all in one pipeline per server; then, for the scripts the server did
    /// not know (`NOSCRIPT`), the same with their text.
    private func send(_ batch: [(key: [UInt8], header: [UInt8])]) async throws {
      var scripts: [(slot: Int, entries: ArraySlice<(key: [UInt8], header: [UInt8])>)] = []
      if case .cluster = backend {
        var bySlot: [Int: [(key: [UInt8], header: [UInt8])]] = [:]
        for entry in batch { bySlot[Int(ClusterSlot.of(entry.key)), default: []].append(entry) }
        for (slot, entries) in bySlot { scripts += Self.chunks(of: entries).map { (slot, $0) } }
      } else {
        scripts = Self.chunks(of: batch).map { (0, $0) }
      }
      let unknown = try await run(scripts, evalSHA: true)
      guard !unknown.isEmpty else { return }
      _ = try await run(unknown.map { scripts[$0] }, evalSHA: false)
    }

    private static func chunks<Element>(of elements: [Element]) -> [ArraySlice<Element>] {
      stride(from: 0, to: elements.count, by: batchSize).map {
        elements[$0..<Swift.min($0 + batchSize, elements.count)]
      }
    }

    /// Sends `scripts`, counts what they did, and returns the indices of those the server
    /// answered `NOSCRIPT` (when sent by hash).
    private func run(
      _ scripts: [(slot: Int, entries: ArraySlice<(key: [UInt8], header: [UInt8])>)], evalSHA: Bool
    ) async throws -> [Int] {
      func writer(_ entries: ArraySlice<(key: [UInt8], header: [UInt8])>) -> RESPCommandWriter {
        var writer = RESPCommandWriter()
        let keys = entries.map(\.key)
        let headers = entries.map(\.header)
        if evalSHA {
          LayerScripts.deleteDead.appendEvalSHA(keys: keys, arguments: headers, to: &writer)
        } else {
          LayerScripts.deleteDead.appendEval(keys: keys, arguments: headers, to: &writer)
        }
        return writer
      }
      let replies: [RESPValue]
      switch backend {
      case .standalone(let pool):
        var pipeline = RESPCommandWriter()
        for script in scripts { pipeline.append(contentsOf: writer(script.entries)) }
        replies = try await pool.send(pipeline)
      case .cluster(let cluster):
        let groups = scripts.map { RedisClusterClient.Group(slot: $0.slot, writer: writer($0.entries)) }
        replies = try await cluster.send(groups).map { $0.first ?? .null }
      }
      var unknown: [Int] = []
      for (index, (script, reply)) in zip(scripts, replies).enumerated() {
        switch reply {
        case .integer(let count):
          deleted.add(Int(count), ordering: .relaxed)
          kept.add(script.entries.count - Int(count), ordering: .relaxed)
        case .error(let text) where evalSHA && text.hasPrefix("NOSCRIPT"):
          unknown.append(index)
        default:
          failed.add(script.entries.count, ordering: .relaxed)
          environment.log(
            .debug,
            "dead-entry clean-up: \(script.entries.count) deletions failed: \(String(describing: reply).prefix(200))")
        }
      }
      return unknown
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
