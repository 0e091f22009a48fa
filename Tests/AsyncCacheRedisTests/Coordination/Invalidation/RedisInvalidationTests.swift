import AsyncCache
import AsyncCacheTesting
import Foundation
import TestSupport
import Testing

@testable import AsyncCacheRedis

/// Waits (yielding) until `condition` holds; records an issue when it does not within 120
/// seconds, a bound no passing run comes near: the whole suite, hundreds of tests on two cores,
/// can hold up the tasks a condition waits for for tens of seconds.
func eventually(
  _ condition: () async throws -> Bool, sourceLocation: SourceLocation = #_sourceLocation
) async rethrows {
  let deadline = ContinuousClock.now.advanced(by: .seconds(120))
  while !(try await condition()) {
    // A test's time limit cancels it: the limit reports it, the wait ends.
    if Task.isCancelled { return }
    // Checked again after the deadline: the wait may have been held up past it while the
    // condition came true.
    if ContinuousClock.now >= deadline {
      if try await condition() { return }
      Issue.record("the condition did not hold within 120 seconds", sourceLocation: sourceLocation)
      return
    }
    await Task.yield()
  }
}

/// One instance of a service: a memory layer over a Redis layer that forwards invalidations to
/// it, and a cache whose origin answers `<name> <version>`.
struct ServiceInstance {
  let memory: MemoryLayer<String, Data>
  let redis: RedisLayer<String, Data>
  let cache: LoadingCache<String, Data>
  let events = EventLog<RedisLayerEvent>()

  init(
    servers: RedisServers, namespace: String = "shared", forwards: Bool = true,
    invalidation: RedisInvalidation = RedisInvalidation(), origin: @escaping @Sendable (String) -> Data
  ) throws {
    var configuration = RedisLayer<String, Data>.Configuration(invalidation: invalidation)
    configuration.servers = servers
    configuration.operationTimeout = .seconds(2)
    configuration.eventHandler = events.handler
    memory = try MemoryLayer<String, Data>()
    redis = try RedisLayer(configuration: configuration, namespace: namespace)
    cache = try LoadingCache(
      chain: CacheChain([.init(memory), .init(redis)]), origin: ClosureFetcher { key in origin(key) })
    if forwards { try redis.forwardInvalidations(to: [memory]) }
  }

  func inMemory(_ key: String) -> Data? {
    memory.value(for: key)
  }

  /// Has the server close the instance's subscription, and waits until the layer subscribed
  /// again.
  func loseSubscription(on server: RedisServer) async throws {
    #expect(integer(try await server.command("CLIENT", "KILL", "TYPE", "pubsub")) == 1)
    await eventually {
      events.all.contains { if case .invalidationsResubscribed = $0 { true } else { false } }
    }
  }
}

@Suite("Invalidation between instances that share Redis", .redisServer)
struct RedisInvalidationTests {
  @Test("a write or removal by one instance drops the key from the other's memory layer, not from its own")
  func twoInstances() async throws {
    let server = try await RedisServer.start()
    let a = try ServiceInstance(servers: .standalone(server.endpoint)) { Data("a \($0)".utf8) }
    let b = try ServiceInstance(servers: .standalone(server.endpoint)) { Data("b \($0)".utf8) }
    await eventually { a.redis.isReceivingInvalidations && b.redis.isReceivingInvalidations }

    // A loads from its origin; B finds A's value in Redis and keeps a copy in memory (once A's
    // message about its write has reached B, so that it cannot drop that copy).
    #expect(try await a.cache.value(for: "k") == Data("a k".utf8))
    await eventually { b.redis.statistics.invalidationsReceived == 1 }
    #expect(try await b.cache.value(for: "k") == Data("a k".utf8))
    #expect(b.inMemory("k") == Data("a k".utf8))

    // A writes a new value: B drops its copy and reads the new one from Redis.
    try await a.cache.insert(Data("new".utf8), for: "k")
    await eventually { b.inMemory("k") == nil }
    #expect(try await b.cache.value(for: "k") == Data("new".utf8))

    // A's own messages do not come back to it. Messages on a channel arrive in order, so once
    // A has received B's later one, it has passed over its own.
    let received = a.redis.statistics.invalidationsReceived
    try await b.cache.removeValue(for: "unrelated")
    await eventually { a.redis.statistics.invalidationsReceived > received }
    #expect(a.inMemory("k") == Data("new".utf8))

    // A removal reaches the other instance too.
    try await b.cache.removeValue(for: "k")
    await eventually { a.inMemory("k") == nil }

    // So does emptying the namespace.
    #expect(try await a.cache.value(for: "x") == Data("a x".utf8))
    #expect(a.inMemory("x") != nil)
    try await b.cache.removeAll()
    await eventually { a.inMemory("x") == nil }

    #expect(a.redis.statistics.invalidationsPublished >= 2)
    #expect(b.redis.statistics.invalidationsReceived >= 2)
    #expect(a.redis.statistics.failures == 0 && b.redis.statistics.failures == 0)
  }

  @Test("a lost subscription comes back, and the forwarded-to layers are emptied because messages were lost")
  func resubscribes() async throws {
    let server = try await RedisServer.start()
    let a = try ServiceInstance(servers: .standalone(server.endpoint)) { Data("a \($0)".utf8) }
    await eventually { a.redis.isReceivingInvalidations }
    #expect(try await a.cache.value(for: "k") == Data("a k".utf8))
    #expect(a.inMemory("k") != nil)

    try await a.loseSubscription(on: server)
    #expect(a.inMemory("k") == nil)
    #expect(a.events.all.contains { if case .invalidationsInterrupted = $0 { true } else { false } })
    #expect(a.redis.isReceivingInvalidations)

    // Invalidations flow again.
    let b = try ServiceInstance(servers: .standalone(server.endpoint), forwards: false) { Data("b \($0)".utf8) }
    #expect(try await a.cache.value(for: "k") == Data("a k".utf8))
    try await b.cache.insert(Data("new".utf8), for: "k")
    await eventually { a.inMemory("k") == nil }
  }

  @Test("back after a break, the layer says it receives invalidations only once the layers it forwards to are emptied")
  func receivingOnlyOnceInSync() async throws {
    let server = try await RedisServer.start()
    let target = FakeLayer<String, Data>()
    let layer = try makeLayer(server, namespace: "in-sync") {
      $0.invalidation = RedisInvalidation()
      $0.operationTimeout = .seconds(2)
    }
    try layer.forwardInvalidations(to: [target])
    await eventually { layer.isReceivingInvalidations }
    // An attempt to subscribe that failed on a loaded host has emptied the target already.
    let emptied = target.callCount(.removeAll)
    target.hold(.removeAll)
    #expect(integer(try await server.command("CLIENT", "KILL", "TYPE", "pubsub")) == 1)
    // Subscribed again, the layer empties the target (messages may have been lost meanwhile):
    // until it has, the target may hold what a lost message would have removed.
    await target.waitForHeld(1, .removeAll)
    #expect(layer.subscription?.isSubscribed == true)
    #expect(!layer.isReceivingInvalidations)
    target.release(.removeAll)
    await eventually { layer.isReceivingInvalidations }
    #expect(target.callCount(.removeAll) == emptied + 1)
    // Closed, it receives nothing any more.
    try await layer.close()
    #expect(!layer.isReceivingInvalidations)
  }

  @Test("a subscription that breaks again while it empties the layers does not say it receives")
  func breakDuringResynchronization() async throws {
    let server = try await RedisServer.start()
    let target = FakeLayer<String, Data>()
    // What the layer said, each time it reported a resubscription.
    let saidReceiving = Locked<[Bool]>([])
    let reporter = Locked<RedisLayer<String, Data>?>(nil)
    let layer = try makeLayer(server, namespace: "broken-sync") {
      $0.invalidation = RedisInvalidation()
      $0.operationTimeout = .seconds(2)
      $0.eventHandler = { event in
        guard case .invalidationsResubscribed = event else { return }
        let receiving = reporter.withLock { $0?.isReceivingInvalidations ?? false }
        saidReceiving.withLock { $0.append(receiving) }
      }
    }
    reporter.withLock { $0 = layer }
    defer { reporter.withLock { $0 = nil } }
    try layer.forwardInvalidations(to: [target])
    await eventually { layer.isReceivingInvalidations }
    let before = saidReceiving.withLock(\.count)
    target.hold(.removeAll)
    #expect(integer(try await server.command("CLIENT", "KILL", "TYPE", "pubsub")) == 1)
    await target.waitForHeld(1, .removeAll)
    // The new subscription breaks while the target is being emptied.
    #expect(integer(try await server.command("CLIENT", "KILL", "TYPE", "pubsub")) == 1)
    await eventually { layer.subscription?.isConnectionOpen == false }
    #expect(!layer.isReceivingInvalidations)
    target.release(.removeAll)
    // That resubscription is reported, without saying it receives; the next one says it does.
    await eventually { saidReceiving.withLock(\.count) >= before + 2 }
    #expect(saidReceiving.withLock { Array($0.dropFirst(before).prefix(2)) } == [false, true])
    await eventually { layer.isReceivingInvalidations }
  }

  @Test("instances of a Redis Cluster hear each other whichever master they subscribed on")
  func cluster() async throws {
    let cluster = try await RedisClusterServers.start()
    let a = try ServiceInstance(servers: .cluster(seeds: cluster.seeds)) { Data("a \($0)".utf8) }
    let b = try ServiceInstance(servers: .cluster(seeds: cluster.seeds)) { Data("b \($0)".utf8) }
    await eventually { a.redis.isReceivingInvalidations && b.redis.isReceivingInvalidations }
    let keys = (0..<12).map { "k\($0)" }
    for key in keys { #expect(try await b.cache.value(for: key) == Data("b \(key)".utf8)) }
    await eventually { a.redis.statistics.invalidationsReceived == keys.count }
    for key in keys { #expect(try await a.cache.value(for: key) == Data("b \(key)".utf8)) }
    #expect(keys.allSatisfy { a.inMemory($0) != nil })
    for key in keys { try await b.cache.insert(Data("new".utf8), for: key) }
    for key in keys { await eventually { a.inMemory(key) == nil } }
  }

  @Test("server-assisted: any writer's SET, DEL or FLUSHDB drops the key from every instance's memory layer")
  func serverAssisted() async throws {
    let server = try await RedisServer.start()
    let tracking = RedisInvalidation(mode: .serverAssisted)
    let a = try ServiceInstance(servers: .standalone(server.endpoint), invalidation: tracking) { Data("a \($0)".utf8) }
    let b = try ServiceInstance(servers: .standalone(server.endpoint), invalidation: tracking) { Data("b \($0)".utf8) }
    await eventually { a.redis.isReceivingInvalidations && b.redis.isReceivingInvalidations }

    // Both instances hold the key in memory, once the server's report of A's own write has
    // passed (it reaches the writer too).
    #expect(try await a.cache.value(for: "k") == Data("a k".utf8))
    await eventually { a.redis.statistics.invalidationsReceived == 1 && b.redis.statistics.invalidationsReceived == 1 }
    #expect(try await a.cache.value(for: "k") == Data("a k".utf8))
    #expect(try await b.cache.value(for: "k") == Data("a k".utf8))
    #expect(a.inMemory("k") != nil && b.inMemory("k") != nil)

    // Someone overwrites it with redis-cli: both drop it.
    #expect(try await server.cli("SET", "shared:k", "written by someone else") == "OK")
    await eventually { a.inMemory("k") == nil && b.inMemory("k") == nil }

    // And removes it.
    try await a.redis.insert(Data("v2".utf8), for: "k")
    await eventually { b.redis.statistics.invalidationsReceived == 3 }
    #expect(try await b.cache.value(for: "k") == Data("v2".utf8))
    #expect(b.inMemory("k") != nil)
    #expect(try await server.cli("DEL", "shared:k") == "1")
    await eventually { b.inMemory("k") == nil }

    // A flush of the database empties the memory layers; keys of other namespaces do not.
    #expect(try await b.cache.value(for: "x") == Data("b x".utf8))
    await eventually { b.redis.statistics.invalidationsReceived == 5 }
    #expect(try await b.cache.value(for: "x") == Data("b x".utf8))
    let received = b.redis.statistics.invalidationsReceived
    _ = try await server.command("SET", "other:x", "not ours")
    _ = try await server.command("FLUSHDB")
    // The key leaves memory as the message is handled, and the count follows it: wait for both.
    await eventually { b.inMemory("x") == nil && b.redis.statistics.invalidationsReceived > received }
    #expect(b.redis.statistics.invalidationsReceived == received + 1)
    // Nothing is published: the server does the telling.
    #expect(a.redis.statistics.invalidationsPublished == 0)
  }

  @Test("server-assisted: a lost tracking connection empties the memory layer and tracks again")
  func serverAssistedResubscribes() async throws {
    let server = try await RedisServer.start()
    let a = try ServiceInstance(
      servers: .standalone(server.endpoint), invalidation: RedisInvalidation(mode: .serverAssisted)
    ) { Data("a \($0)".utf8) }
    await eventually { a.redis.isReceivingInvalidations }
    #expect(try await a.cache.value(for: "k") == Data("a k".utf8))
    await eventually { a.redis.statistics.invalidationsReceived == 1 }
    #expect(try await a.cache.value(for: "k") == Data("a k".utf8))
    #expect(a.inMemory("k") != nil)

    try await a.loseSubscription(on: server)
    #expect(a.inMemory("k") == nil)
    #expect(try await a.cache.value(for: "k") == Data("a k".utf8))
    #expect(a.inMemory("k") != nil)
    _ = try await server.command("DEL", "shared:k")
    await eventually { a.inMemory("k") == nil }
  }

  @Test("server-assisted invalidation needs one server")
  func serverAssistedNeedsOneServer() {
    var configuration = RedisLayer<String, Data>.Configuration(cluster: [RedisEndpoint(host: "127.0.0.1")])
    configuration.invalidation = RedisInvalidation(mode: .serverAssisted)
    #expect {
      try RedisLayer<String, Data>(configuration: configuration)
    } throws: { ($0 as? AsyncCacheError)?.message.contains("serverAssisted needs one server") == true }
  }

  @Test("forwarding needs invalidation in the configuration")
  func needsConfiguration() throws {
    let layer = try RedisLayer<String, Data>(configuration: .init(endpoint: RedisEndpoint(host: "127.0.0.1", port: 1)))
    #expect {
      try layer.forwardInvalidations(to: [try MemoryLayer<String, Data>()])
    } throws: { error in
      "\(error)".contains("Configuration.invalidation")
    }
    #expect(throws: (any Error).self) {
      try RedisLayer<String, Data>(configuration: .init(invalidation: RedisInvalidation(channel: "")))
    }
    #expect(throws: (any Error).self) {
      try RedisLayer<String, Data>(configuration: .init(invalidation: RedisInvalidation(healthCheckInterval: .zero)))
    }
  }

  @Test("invalidation messages round-trip; other bytes are not messages")
  func messages() {
    let sender = InvalidationMessage.makeSender()
    #expect(sender.count == 32)
    #expect(sender != InvalidationMessage.makeSender())
    for change in [
      InvalidationMessage.Change.key("k"), .key(""), .key("a b\r\n{é}"), .all, .loaded(key: "k", token: 41),
      .loaded(key: "a b 7", token: .max), .loaded(key: "", token: 0),
    ] {
      let message = InvalidationMessage(sender: sender, change: change)
      #expect(InvalidationMessage(message.encoded) == message)
    }
    for bytes in [
      [], Array("short".utf8), sender + Array(" X k".utf8), sender + Array(" A extra".utf8), sender + [32, 75],
      sender + Array(" L k".utf8), sender + Array(" L 12".utf8), sender + Array(" L x1 k".utf8),
      sender + Array(" L -1 k".utf8),
    ] {
      #expect(InvalidationMessage(bytes) == nil, "\(bytes)")
    }
    #expect(InvalidationMessage(sender + [32, 75, 32, 0xFF]) == nil, "a key that is not UTF-8")
  }
}
