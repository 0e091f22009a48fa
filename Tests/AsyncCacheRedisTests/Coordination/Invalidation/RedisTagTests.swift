import AsyncCache
import AsyncCacheTesting
import Foundation
import TestSupport
import Testing

@testable import AsyncCacheRedis

@Suite("Tags across instances that share Redis", .redisServer, .timeLimit(.minutes(3)))
struct RedisTagTests {
  @Test("sortable instants and tag messages round-trip")
  func encodings() throws {
    for nanoseconds: Int64 in [.min, -1, 0, 1, 1_800_000_000_123_456_789, .max] {
      let instant = CacheInstant(nanosecondsSince1970: nanoseconds)
      let bytes = RedisLayer<String, Data>.sortable(instant)
      #expect(bytes.count == 20)
      #expect(RedisLayer<String, Data>.instant(sortable: bytes) == instant)
    }
    let earlier = RedisLayer<String, Data>.sortable(CacheInstant(nanosecondsSince1970: -5))
    let later = RedisLayer<String, Data>.sortable(CacheInstant(nanosecondsSince1970: 3))
    #expect(earlier.lexicographicallyPrecedes(later), "the strings sort as the instants do")
    let message = InvalidationMessage(sender: InvalidationMessage.makeSender(), change: .tag("tenant: 7", at: -42))
    #expect(InvalidationMessage(message.encoded) == message)
    #expect(InvalidationMessage(message.sender + Array(" T 12 ".utf8)) == nil, "an empty tag is no message")
    // The hash of a namespace's invalidations is never one of its keys.
    let key = String(decoding: RedisLayer<String, Data>.tagsKey(of: Array("a:b:".utf8)), as: UTF8.self)
    #expect(key.hasSuffix(#"a\:b\:\|tags"#))
  }

  @Test("an invalidation on one instance reaches the other's memory and Redis reads, and a new instance")
  func publish() async throws {
    let server = try await RedisServer.start()
    let a = try ServiceInstance(servers: .standalone(server.endpoint)) { Data("a \($0)".utf8) }
    let b = try ServiceInstance(servers: .standalone(server.endpoint)) { Data("b \($0)".utf8) }
    await eventually { a.redis.isReceivingInvalidations && b.redis.isReceivingInvalidations }

    try await b.cache.insert(Data("tenant 1".utf8), for: "k", tags: ["tenant:1"])
    try await b.cache.insert(Data("tenant 2".utf8), for: "other", tags: ["tenant:2"])
    await eventually { a.redis.statistics.invalidationsReceived == 2 }
    #expect(try await a.cache.value(for: "k") == Data("tenant 1".utf8))
    #expect(a.inMemory("k") != nil && b.inMemory("k") != nil)

    let received = b.redis.statistics.invalidationsReceived
    try await a.cache.invalidate(tag: "tenant:1")
    #expect(a.inMemory("k") == nil, "at once on the instance that invalidated")
    await eventually { b.redis.statistics.invalidationsReceived > received }
    #expect(b.inMemory("k") == nil, "the announcement reached the other instance's memory layer")
    #expect(try await b.redis.entry(for: "k") == nil, "and its reads of Redis")
    #expect(try await b.redis.value(for: "other") == Data("tenant 2".utf8))
    #expect(b.inMemory("other") != nil)

    // An instance started afterwards reads the invalidations from Redis.
    let c = try ServiceInstance(servers: .standalone(server.endpoint), forwards: false) { Data("c \($0)".utf8) }
    #expect(try await c.redis.entry(for: "k") == nil)
    #expect(try await c.cache.value(for: "k") == Data("c k".utf8))
    #expect(try await c.cache.value(for: "other") == Data("tenant 2".utf8))
    #expect(a.redis.statistics.failures == 0 && b.redis.statistics.failures == 0)
  }

  @Test("an invalidation lost while the subscription was down is read from Redis once it is back")
  func lostMessage() async throws {
    let server = try await RedisServer.start()
    let a = try ServiceInstance(servers: .standalone(server.endpoint)) { Data("a \($0)".utf8) }
    await eventually { a.redis.isReceivingInvalidations }
    try await a.cache.insert(Data("v".utf8), for: "k", tags: ["t"])
    #expect(try await a.redis.entry(for: "k") != nil)
    // Recorded by another instance whose message never arrived (written straight into the hash),
    // whose clock runs ahead: past any stamp this process hands out now (see TagStamps).
    let ahead = WallClock().now.advanced(by: .seconds(120))
    let instant = String(decoding: RedisLayer<String, Data>.sortable(ahead), as: UTF8.self)
    let hash = String(decoding: a.redis.tagsKey, as: UTF8.self)
    _ = try await server.command("HSET", hash, "t", instant)
    #expect(try await a.redis.entry(for: "k") != nil, "not known yet: no message came")
    try await a.loseSubscription(on: server)
    #expect(try await a.redis.entry(for: "k") == nil, "read from Redis after subscribing again")
  }

  @Test("server-assisted: the hash's change empties the other instances' memory layers and is read again")
  func serverAssisted() async throws {
    let server = try await RedisServer.start()
    let tracking = RedisInvalidation(mode: .serverAssisted)
    let a = try ServiceInstance(servers: .standalone(server.endpoint), invalidation: tracking) { Data("a \($0)".utf8) }
    let b = try ServiceInstance(servers: .standalone(server.endpoint), invalidation: tracking) { Data("b \($0)".utf8) }
    await eventually { a.redis.isReceivingInvalidations && b.redis.isReceivingInvalidations }
    try await a.cache.insert(Data("v".utf8), for: "k", tags: ["t"])
    await eventually { b.redis.statistics.invalidationsReceived == 1 }
    #expect(try await b.cache.value(for: "k") == Data("v".utf8))
    #expect(b.inMemory("k") != nil)
    let received = b.redis.statistics.invalidationsReceived
    try await a.cache.invalidate(tag: "t")
    await eventually { b.redis.statistics.invalidationsReceived > received }
    #expect(b.inMemory("k") == nil)
    #expect(try await b.redis.entry(for: "k") == nil)
    #expect(try await b.cache.value(for: "k") == Data("b k".utf8))
  }

  @Test("a property across two instances: once the message arrived, no request answers an entry from before it")
  func twoInstanceProperty() async throws {
    let server = try await RedisServer.start()
    let a = try ServiceInstance(servers: .standalone(server.endpoint)) { Data("a \($0)".utf8) }
    let b = try ServiceInstance(servers: .standalone(server.endpoint)) { Data("b \($0)".utf8) }
    await eventually { a.redis.isReceivingInvalidations && b.redis.isReceivingInvalidations }
    let keys = (0..<20).map { "k\($0)" }
    for round in 0..<5 {
      for key in keys { try await a.cache.insert(Data("round \(round)".utf8), for: key, tags: ["t"]) }
      for key in keys { _ = try await b.cache.value(for: key) }
      try await a.cache.invalidate(tag: "t")
      // The message arrived: B's copy has A's instant, and B's memory layer was told after it.
      let instant = a.redis.tagMirror.invalidations.instant(for: "t")
      await eventually { b.redis.tagMirror.invalidations.instant(for: "t") == instant }
      await eventually { keys.allSatisfy { b.inMemory($0) != Data("round \(round)".utf8) } }
      for key in keys {
        #expect(try await a.cache.value(for: key) == Data("a \(key)".utf8), "round \(round), \(key) on a")
      }
      for key in keys {
        let value = try await b.cache.value(for: key)
        #expect(value != Data("round \(round)".utf8), "round \(round), \(key) on b")
      }
    }
  }
}

extension RedisTagTests {
  @Test(
    "another instance's invalidation turns this instance's later requests away from its loads in flight",
    arguments: [RedisInvalidation.Mode.publish, .serverAssisted])
  func remoteInvalidationDetachesLoads(mode: RedisInvalidation.Mode) async throws {
    let server = try await RedisServer.start()
    let invalidation = RedisInvalidation(mode: mode)
    let a = try ServiceInstance(servers: .standalone(server.endpoint), invalidation: invalidation) {
      Data("a \($0)".utf8)
    }
    var configuration = RedisLayer<String, Data>.Configuration(invalidation: invalidation)
    configuration.servers = .standalone(server.endpoint)
    let memory = try MemoryLayer<String, Data>()
    let redis = try RedisLayer<String, Data>(configuration: configuration, namespace: "shared")
    try redis.forwardInvalidations(to: [memory])
    let gate = GatedFetcher<String, Data> { Data("b \($0)".utf8) }
    let origin = ClosureEntryFetcher<String, Data> { key, _ in
      .value(try await gate.fetch(key), metadata: EntryMetadata(tags: ["t"]))
    }
    let b = try LoadingCache(layers: [memory, redis], origin: origin)
    await eventually { a.redis.isReceivingInvalidations && redis.isReceivingInvalidations }

    let first = Task { try await b.value(for: "k") }
    await gate.waitForFetches(1, for: "k")
    let received = redis.statistics.invalidationsReceived
    try await a.cache.invalidate(tag: "t")
    await eventually { redis.statistics.invalidationsReceived > received }
    // The announcement arrived: a request now starts a load of its own.
    let second = Task { try await b.value(for: "k") }
    await gate.waitForFetches(2, for: "k")
    #expect(gate.release("k") == 2)
    #expect(try await first.value == Data("b k".utf8))
    #expect(try await second.value == Data("b k".utf8))
    #expect(gate.callCount == 2)
    // Publish mode: the announcement names the tag, so the load that began before it stores
    // nothing and the later one lives. Server-assisted: the report names no tag, so the older
    // load may store its entry, dead to every reader (the hash is read again).
    guard mode == .publish else { return }
    #expect(b.cachedValue(for: "k") == Data("b k".utf8))
    #expect(try await b.chain.entry(for: "k")?.metadata.tags == ["t"])
  }
}
