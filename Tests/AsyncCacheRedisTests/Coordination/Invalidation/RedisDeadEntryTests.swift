import AsyncCache
import AsyncCacheTesting
import Foundation
import TestSupport
import Testing

@testable import AsyncCacheRedis

/// An entry filed under `tags`, produced at `producedAt`.
private func tagged(_ text: String, producedAt: CacheInstant, tags: Set<String> = ["t"]) -> CacheEntry<Data> {
  CacheEntry(Data(text.utf8), expiresAt: nil, metadata: EntryMetadata(producedAt: producedAt, tags: tags))
}

/// `INFO commandstats` as `[command: (calls, rejected calls, failed calls)]`.
private func commandStats(_ server: RedisServer) async throws -> [String: (calls: Int, rejected: Int, failed: Int)] {
  let text = String(decoding: try #require(bytes(try await server.command("INFO", "commandstats"))), as: UTF8.self)
  var stats: [String: (calls: Int, rejected: Int, failed: Int)] = [:]
  for line in text.split(whereSeparator: \.isNewline) where line.hasPrefix("cmdstat_") {
    let parts = line.dropFirst("cmdstat_".count).split(separator: ":", maxSplits: 1)
    guard parts.count == 2 else { continue }
    var fields: [String: Int] = [:]
    for field in parts[1].split(separator: ",") {
      let pair = field.split(separator: "=")
      if pair.count == 2, let value = Int(pair[1]) { fields[String(pair[0])] = value }
    }
    stats[String(parts[0])] = (fields["calls"] ?? 0, fields["rejected_calls"] ?? 0, fields["failed_calls"] ?? 0)
  }
  return stats
}

/// The full key of `key` in `layer`.
private func storedKey(_ key: String, in layer: RedisLayer<String, Data>) throws -> [UInt8] {
  layer.keyPrefix + Array(try layer.encodedKey(key).utf8)
}

@Suite("Dead entries deleted off the read path", .redisServer, .timeLimit(.minutes(3)))
struct RedisDeadEntryTests {
  @Test("entries a read found dead are deleted in the background: one script per 512 keys, in one pipeline")
  func deletedInBatches() async throws {
    let server = try await RedisServer.start()
    let layer = try makeLayer(server, namespace: "dead")
    let keys = (0..<1_000).map { "k\($0)" }
    let produced = WallClock().now
    try await withThrowingTaskGroup(of: Void.self) { group in
      for key in keys { group.addTask { try await layer.insert(tagged(key, producedAt: produced), for: key) } }
      try await group.waitForAll()
    }
    try await layer.insert(tagged("other tag", producedAt: produced, tags: ["u"]), for: "other")
    try await layer.insert(Data("untagged".utf8), for: "untagged")
    try await layer.invalidate(tag: "t", at: WallClock().now)
    _ = try await server.command("CONFIG", "RESETSTAT")

    let found = try await layer.entries(for: keys + ["other", "untagged"])
    #expect(found.keys.sorted() == ["other", "untagged"])
    await eventually { layer.statistics.deadEntriesDeleted == 1_000 }
    #expect(layer.deadEntries.roundTrips.load(ordering: .relaxed) == 2, "one pipeline by hash, one by text")
    // What is left: the two live entries and the namespace's hash of tag invalidations.
    #expect(integer(try await server.command("DBSIZE")) == 3)
    #expect(try await layer.value(for: "other") == Data("other tag".utf8))

    // 1,000 keys: two scripts, sent by hash, and by text once the server said it did not know
    // them (a new server; `NOSCRIPT` counts as a failed call). Inside them, each key's header
    // was read (not its value) and the key unlinked. Nothing else was written.
    let stats = try await commandStats(server)
    let byHash = try #require(stats["evalsha"])
    #expect(byHash.calls + byHash.rejected == 2)
    #expect(stats["eval"].map { $0.calls + $0.rejected } ?? 0 == byHash.failed)
    #expect(stats["getrange"]?.calls == 1_000 && stats["unlink"]?.calls == 1_000)
    #expect(stats["get"]?.calls ?? 0 <= 1, "the read's, if any (MGET)")
    #expect(stats["del"] == nil && stats["set"] == nil, "no command but the scripts")
    let statistics = layer.statistics
    #expect(statistics.failures == 0 && statistics.deadEntryDeletionsFailed == 0)
    #expect(statistics.misses == 1_000 && statistics.hits == 3)

    // A second read finds nothing to delete: misses, and no script.
    _ = try await server.command("CONFIG", "RESETSTAT")
    #expect(try await layer.entries(for: keys).isEmpty)
    #expect(try await commandStats(server)["evalsha"] == nil)
  }

  @Test("an entry written since the read, a key of another type and an absent key are kept")
  func writtenSinceIsKept() async throws {
    let server = try await RedisServer.start()
    let layer = try makeLayer(server, namespace: "kept")
    let first = WallClock().now
    try await layer.insert(tagged("old", producedAt: first), for: "k")
    let key = try storedKey("k", in: layer)
    let stored = try #require(bytes(try await server.command("GET", String(decoding: key, as: UTF8.self))))
    let payload = try RedisEnvelope.decode(stored).payload
    let header = Array(stored[..<payload.lowerBound])
    // Written again after a read found the first entry dead: another instant, another header.
    try await layer.insert(tagged("new", producedAt: first.advanced(by: .milliseconds(1))), for: "k")
    // The same entry under another key: the same header, as dead.
    try await layer.insert(tagged("old", producedAt: first), for: "twin")
    let hash = try storedKey("hash", in: layer)
    _ = try await server.command("HSET", String(decoding: hash, as: UTF8.self), "field", "value")

    layer.deadEntries.delete([
      (key, header), (try storedKey("twin", in: layer), header), (hash, header),
      (try storedKey("absent", in: layer), header),
    ])
    await eventually {
      layer.deadEntries.deleted.load(ordering: .relaxed) + layer.deadEntries.kept.load(ordering: .relaxed) == 4
    }
    #expect(layer.statistics.deadEntriesDeleted == 1, "the twin only")
    #expect(try await layer.value(for: "k") == Data("new".utf8))
    #expect(try await layer.value(for: "twin") == nil)
    #expect(integer(try await server.command("EXISTS", String(decoding: hash, as: UTF8.self))) == 1)
    #expect(layer.statistics.deadEntryDeletionsFailed == 0 && layer.statistics.failures == 0)
  }

  @Test("while writes are paused, only the clean-up waits: reads go on, and a cancelled read ends")
  func writePause() async throws {
    let server = try await RedisServer.start()
    let layer = try makeLayer(server, namespace: "paused") { $0.operationTimeout = .seconds(100) }
    let produced = WallClock().now
    for index in 0..<10 { try await layer.insert(tagged("dead", producedAt: produced), for: "d\(index)") }
    try await layer.insert(Data("live".utf8), for: "live")
    try await layer.invalidate(tag: "t", at: WallClock().now)
    #expect(try await server.command("CLIENT", "PAUSE", "100000", "WRITE") == .simpleString("OK"))

    #expect(try await layer.entry(for: "d0") == nil)
    await eventually { layer.deadEntries.commandsInFlight == 1 }
    // The deletion waits for the pause to end, on its own connection; nothing waits behind it.
    for round in 0..<20 {
      #expect(try await layer.value(for: "live") == Data("live".utf8))
      #expect(try await layer.entry(for: "d\(1 + round % 9)") == nil)
    }
    // Cancelled wherever it is: it ends, and the deletion still waits.
    let cancelled = Task { try await layer.entry(for: "d1") }
    cancelled.cancel()
    _ = try? await cancelled.value
    let found = try await layer.entries(for: (0..<10).map { "d\($0)" } + ["live"])
    #expect(found.keys.sorted() == ["live"])
    #expect(layer.deadEntries.commandsInFlight == 1, "the reads returned while the deletion still waited")
    #expect(layer.statistics.deadEntriesDeleted == 0)

    #expect(try await server.command("CLIENT", "UNPAUSE") == .simpleString("OK"))
    await eventually { layer.statistics.deadEntriesDeleted == 10 }
    let statistics = layer.statistics
    #expect(statistics.failures == 0 && statistics.timeouts == 0 && statistics.deadEntryDeletionsFailed == 0)
  }

  @Test("deletions the server refuses count apart: not the layer's failures, reads unaffected")
  func refusedDeletions() async throws {
    let server = try await RedisServer.start()
    let layer = try makeLayer(server, namespace: "refused")
    let produced = WallClock().now
    for index in 0..<5 { try await layer.insert(tagged("dead", producedAt: produced), for: "d\(index)") }
    try await layer.invalidate(tag: "t", at: WallClock().now)
    // The server now refuses every script (its ACL), as a locked-down deployment might.
    #expect(
      try await server.command("ACL", "SETUSER", "default", "-eval", "-evalsha") == .simpleString("OK"))
    for index in 0..<5 {
      #expect(try await layer.entry(for: "d\(index)") == nil)
      await eventually { layer.statistics.deadEntryDeletionsFailed == index + 1 }
    }
    let statistics = layer.statistics
    #expect(statistics.failures == 0 && statistics.circuitOpenings == 0 && statistics.deadEntriesDeleted == 0)
    #expect(integer(try await server.command("EXISTS", "refused:d0")) == 1, "left for a later read")
  }

  @Test("deletions that time out stay out of the layer's timeouts, connections and circuit breaker")
  func timedOutDeletions() async throws {
    let server = try await RedisServer.start()
    let events = EventLog<RedisLayerEvent>()
    let layer = try makeLayer(server, namespace: "slow") {
      $0.operationTimeout = .seconds(1)
      $0.circuitBreaker = RedisCircuitBreakerPolicy(failureThreshold: 2)
      $0.eventHandler = events.handler
    }
    let produced = WallClock().now
    for index in 0..<4 { try await layer.insert(tagged("dead", producedAt: produced), for: "d\(index)") }
    try await layer.insert(Data("live".utf8), for: "live")
    try await layer.invalidate(tag: "t", at: WallClock().now)
    #expect(try await server.command("CLIENT", "PAUSE", "100000", "WRITE") == .simpleString("OK"))
    // Each deletion times out (or, once its breaker opened, is refused at once).
    for index in 0..<4 {
      #expect(try await layer.entry(for: "d\(index)") == nil)
      await eventually { layer.statistics.deadEntryDeletionsFailed == index + 1 }
      #expect(try await layer.value(for: "live") == Data("live".utf8))
    }
    let statistics = layer.statistics
    #expect(statistics.failures == 0 && statistics.timeouts == 0 && statistics.rejected == 0)
    #expect(statistics.connectionsDiscarded == 0 && statistics.circuitOpenings == 0)
    #expect(statistics.connectionsOpened == 1, "the layer's own connection, untouched")
    #expect(
      !events.all.contains {
        if case .connectionDiscarded = $0 { true } else if case .circuitOpened = $0 { true } else { false }
      })
    _ = try await server.command("CLIENT", "UNPAUSE")
  }

  @Test("under single flight, versioned entries are deleted and the version that fences fills stays")
  func singleFlight() async throws {
    let server = try await RedisServer.start()
    let layer = try makeLayer(server, namespace: "flight") { $0.singleFlight = RedisSingleFlight() }
    try await layer.insert(tagged("dead", producedAt: WallClock().now), for: "k")
    let version = String(decoding: layer.companionKeys(of: try layer.encodedKey("k")).version, as: UTF8.self)
    let fence = try #require(bytes(try await server.command("GET", version)))
    try await layer.invalidate(tag: "t", at: WallClock().now)
    #expect(try await layer.entry(for: "k") == nil)
    await eventually { layer.statistics.deadEntriesDeleted == 1 }
    #expect(bytes(try await server.command("GET", version)) == fence, "the fence did not move")

    // A load after the deletion claims the key and fills it.
    let cache = try LoadingCache(layers: [layer], origin: ClosureFetcher { Data("loaded \($0)".utf8) })
    #expect(try await cache.value(for: "k") == Data("loaded k".utf8))
    #expect(try await layer.value(for: "k") == Data("loaded k".utf8))
    #expect(layer.statistics.fillsRefused == 0 && layer.statistics.failures == 0)
  }

  @Test("in a cluster, dead entries are deleted on every master: one script per slot")
  func cluster() async throws {
    let cluster = try await RedisClusterServers.start()
    let layer = try makeClusterLayer(cluster, namespace: "dead")
    let keys = (0..<300).map { "key-\($0)" }
    let produced = WallClock().now
    for key in keys { try await layer.insert(tagged(key, producedAt: produced), for: key) }
    try await layer.invalidate(tag: "t", at: WallClock().now)
    for server in cluster.servers { _ = try await server.command("CONFIG", "RESETSTAT") }
    #expect(try await layer.entries(for: keys).isEmpty)
    await eventually { layer.statistics.deadEntriesDeleted == 300 }
    var stored: Int64 = 0
    var byHash = 0
    var byText = 0
    var rejectedByHash = 0
    for server in cluster.servers {
      stored += try #require(integer(try await server.command("DBSIZE")))
      let stats = try await commandStats(server)
      byHash += stats["evalsha"].map { $0.calls + $0.rejected } ?? 0
      rejectedByHash += stats["evalsha"]?.failed ?? 0
      byText += stats["eval"]?.calls ?? 0
    }
    #expect(stored == 1, "the namespace's hash of tag invalidations only")
    let slots = Set(keys.map { ClusterSlot.of(prefix: layer.keyPrefix, key: $0) })
    #expect(byHash == slots.count, "one script per slot")
    #expect(byText == rejectedByHash, "sent again by text after NOSCRIPT only")
    #expect(layer.statistics.failures == 0 && layer.statistics.deadEntryDeletionsFailed == 0)
  }

  @Test("in a cluster with a master whose writes are paused, the others' deletions count as deleted")
  func clusterPartlyPaused() async throws {
    let cluster = try await RedisClusterServers.start()
    let layer = try makeClusterLayer(cluster, namespace: "partly") { $0.operationTimeout = .seconds(1) }
    let keys = (0..<300).map { "key-\($0)" }
    let produced = WallClock().now
    for key in keys { try await layer.insert(tagged(key, producedAt: produced), for: key) }
    try await layer.invalidate(tag: "t", at: WallClock().now)
    let paused = try #require(cluster.servers.first)
    var onPaused = 0
    for key in keys {
      let slot = Int(ClusterSlot.of(prefix: layer.keyPrefix, key: key))
      if try await cluster.master(ofSlot: slot).port == paused.port { onPaused += 1 }
    }
    try #require(onPaused > 0 && onPaused < keys.count)
    _ = try await paused.command("CLIENT", "PAUSE", "100000", "WRITE")
    #expect(try await layer.entries(for: keys).isEmpty)
    await eventually {
      layer.statistics.deadEntriesDeleted + layer.statistics.deadEntryDeletionsFailed == keys.count
    }
    #expect(layer.statistics.deadEntriesDeleted == keys.count - onPaused)
    #expect(layer.statistics.deadEntryDeletionsFailed == onPaused)
    _ = try await paused.command("CLIENT", "UNPAUSE")
  }

  @Test("at most 4,096 entries wait for deletion")
  func bounded() async throws {
    let server = try await RedisServer.start()
    let layer = try makeLayer(server, namespace: "bounded") { $0.operationTimeout = .seconds(100) }
    _ = try await server.command("CLIENT", "PAUSE", "100000", "WRITE")
    let header: [UInt8] = [0xAC, 1, 0]
    layer.deadEntries.delete([(Array("bounded:first".utf8), header)])
    await eventually { layer.deadEntries.commandsInFlight == 1 }
    layer.deadEntries.delete((0..<5_000).map { (Array("bounded:k\($0)".utf8), header) })
    #expect(layer.deadEntries.pendingCount == 4_096)
    layer.deadEntries.delete([(Array("bounded:k1".utf8), header), (Array("bounded:more".utf8), header)])
    #expect(layer.deadEntries.pendingCount == 4_096, "a key already waiting is not counted twice; a new one is left")
    _ = try await server.command("CLIENT", "UNPAUSE")
    await eventually { layer.deadEntries.kept.load(ordering: .relaxed) == 1 + 4_096 }
    #expect(layer.statistics.deadEntryDeletionsFailed == 0)
  }

  @Test("closing the layer, or dropping it, stops the clean-up and closes its connection")
  func closing() async throws {
    let server = try await RedisServer.start()
    func clients() async throws -> Int {
      let text = String(decoding: try #require(bytes(try await server.command("CLIENT", "LIST"))), as: UTF8.self)
      return text.split(whereSeparator: \.isNewline).filter { $0.contains("name=dead-entries") }.count
    }
    let header: [UInt8] = [0xAC, 1, 0]
    _ = try await server.command("CLIENT", "PAUSE", "100000", "WRITE")
    let logs = RecordingLogHandler()
    let layer = try makeLayer(server, namespace: "closed") {
      $0.operationTimeout = .seconds(100)
      $0.logger = logs.logger(minimumLevel: .notice)
    }
    layer.deadEntries.delete([(Array("closed:a".utf8), header)])
    await eventually { layer.deadEntries.commandsInFlight == 1 }
    layer.deadEntries.delete([(Array("closed:b".utf8), header)])
    #expect(try await clients() == 1)
    try await layer.close()
    #expect(layer.deadEntries.pendingCount == 0, "what waited is dropped")
    #expect(logs.records.map(\.message) == ["closed; 1 deletions of dead entries waiting were dropped"])
    await eventually { layer.statistics.deadEntryDeletionsFailed == 1 }
    try await eventually { try await clients() == 0 }
    layer.deadEntries.delete([(Array("closed:c".utf8), header)])
    #expect(layer.deadEntries.pendingCount == 0, "nothing is taken once closed")

    var dropped: RedisLayer<String, Data>? = try makeLayer(server, namespace: "dropped") {
      $0.operationTimeout = .seconds(100)
    }
    let cleaner = try #require(dropped?.deadEntries)
    cleaner.delete([(Array("dropped:a".utf8), header)])
    await eventually { cleaner.commandsInFlight == 1 }
    #expect(try await clients() == 1)
    dropped = nil
    await eventually { cleaner.failed.load(ordering: .relaxed) == 1 }
    try await eventually { try await clients() == 0 }
    _ = try await server.command("CLIENT", "UNPAUSE")
  }
}
