import AsyncCache
import AsyncCacheTesting
import Foundation
import Synchronization
import TestSupport
import Testing

@testable import AsyncCacheRedis

/// A layer on `server` with string keys and `Data` values.
func makeLayer(
  _ server: RedisServer, namespace: String = "test",
  _ configure: (inout RedisLayer<String, Data>.Configuration) -> Void = { _ in }
) throws -> RedisLayer<String, Data> {
  var configuration = RedisLayer<String, Data>.Configuration(endpoint: server.endpoint)
  configure(&configuration)
  return try RedisLayer(configuration: configuration, namespace: namespace)
}

/// The bytes of a bulk string reply, or `nil`.
func bytes(_ reply: RESPValue) -> [UInt8]? {
  if case .bulkString(let bytes) = reply { return bytes }
  return nil
}

func integer(_ reply: RESPValue) -> Int64? {
  if case .integer(let value) = reply { return value }
  return nil
}

@Suite("RedisLayer against a real redis-server", .redisServer)
struct RedisLayerTests {
  @Test("values round-trip, misses are nil, and the statistics count both")
  func roundTrip() async throws {
    let server = try await RedisServer.start()
    let layer = try makeLayer(server)
    #expect(try await layer.entry(for: "absent") == nil)
    try await layer.insert(Data("hello".utf8), for: "greeting")
    #expect(try await layer.value(for: "greeting") == Data("hello".utf8))
    let binary = Data((0...255).map(UInt8.init) + [13, 10, 13, 10])
    try await layer.insert(binary, for: "binary\r\nkey")
    #expect(try await layer.value(for: "binary\r\nkey") == binary)
    try await layer.insert(Data(), for: "empty")
    #expect(try await layer.value(for: "empty") == Data())
    try await layer.removeValue(for: "greeting")
    #expect(try await layer.value(for: "greeting") == nil)
    // Stored under the namespace, with the layer's header in front of the value.
    let stored = try await server.command("GET", "test:binary\r\nkey")
    #expect(bytes(stored)?.first == 0xAC)
    let statistics = layer.statistics
    #expect(statistics.hits == 3)
    #expect(statistics.misses == 2)
    #expect(statistics.writes == 3)
    #expect(statistics.removals == 1)
    #expect(statistics.failures == 0)
    #expect(statistics.connectionsOpened == 1)
  }

  @Test("metadata is stored with the value and read back by GET, MGET and another instance's announcement")
  func metadata() async throws {
    let server = try await RedisServer.start()
    let writer = try makeLayer(server)
    let reader = try makeLayer(server)
    let metadata = EntryMetadata(
      entityTag: #""v3""#, lastModified: CacheInstant(secondsSince1970: 1_700_000_000), tags: ["tenant:7"])
    let expiry = CacheInstant(secondsSince1970: 4_102_444_800)
    try await writer.insert(CacheEntry(Data("page".utf8), expiresAt: expiry, metadata: metadata), for: "tagged")
    try await writer.insert(Data("plain".utf8), for: "plain")
    #expect(
      try await reader.entry(for: "tagged") == CacheEntry(Data("page".utf8), expiresAt: expiry, metadata: metadata))
    let many = try await reader.entries(for: ["tagged", "plain"])
    #expect(many["tagged"]?.metadata == metadata)
    #expect(many["plain"] == CacheEntry(Data("plain".utf8)))
    // A `D` announcement carries the stored bytes; a waiting instance reads them as GET's reply.
    let stored = try #require(bytes(try await server.command("GET", "test:tagged")))
    let announced = try #require(try reader.storedValue(from: .bulkString(stored), key: "tagged", command: "SUBSCRIBE"))
    #expect(announced.metadata == metadata && announced.payload == Data("page".utf8))
    // Metadata over a limit is refused before anything is sent.
    await #expect(throws: PersistenceError.self) {
      try await writer.insert(
        CacheEntry(Data(), expiresAt: nil, metadata: EntryMetadata(tags: Set((0...64).map { "\($0)" }))), for: "crowded"
      )
    }
    #expect(try await server.command("EXISTS", "test:crowded") == .integer(0))
  }

  @Test("a revalidation changes the stored entry's expiry and metadata in place: the value does not cross the network")
  func revalidateInPlace() async throws {
    let server = try await RedisServer.start()
    let layer = try makeLayer(server)
    let clock = WallClock()
    let value = Data((0..<(1 << 20)).map { UInt8(truncatingIfNeeded: $0 &* 31) })
    // An hour ahead: a full run can hold a test for minutes before it gets a thread, and an
    // entry whose new expiry has passed is never revalidated.
    let first = clock.now.advanced(by: .seconds(3_600))
    let held = CacheEntry(value, expiresAt: first, metadata: EntryMetadata(entityTag: "1"))
    try await layer.insert(held, for: "big")
    let received = { () async throws -> Int in
      guard let info = bytes(try await server.command("INFO", "stats")) else { return -1 }
      let line = String(decoding: info, as: UTF8.self).split(whereSeparator: \.isNewline)
        .first { $0.hasPrefix("total_net_input_bytes:") }
      return line.flatMap { Int($0.dropFirst("total_net_input_bytes:".count)) } ?? -1
    }
    let before = try await received()
    let second = clock.now.advanced(by: .seconds(600))
    let metadata = EntryMetadata(entityTag: "1", tags: ["t"])
    #expect(
      try await layer.revalidate(CacheEntry(value, expiresAt: second, metadata: metadata), for: "big", replacing: held)
    )
    let sent = try await received() - before
    #expect(sent > 0 && sent < 4_096, "\(sent) bytes reached the server")
    #expect(try await layer.entry(for: "big") == CacheEntry(value, expiresAt: second, metadata: metadata))
    let ttl = try #require(integer(try await server.command("PTTL", "test:big")))
    #expect(ttl > 590_000 && ttl <= 600_000)
    // Another entry than the one revalidated (another expiry; the same expiry with other
    // metadata, as another version written with the same deadline is), or none: nothing
    // changes, and the caller stores it.
    #expect(try await !layer.revalidate(CacheEntry(value, expiresAt: first), for: "big", replacing: held))
    let sameExpiryOtherVersion = CacheEntry(value, expiresAt: second, metadata: EntryMetadata(entityTag: "2"))
    #expect(
      try await !layer.revalidate(CacheEntry(value, expiresAt: first), for: "big", replacing: sameExpiryOtherVersion))
    #expect(try await layer.entry(for: "big") == CacheEntry(value, expiresAt: second, metadata: metadata))
    #expect(try await !layer.revalidate(CacheEntry(value), for: "absent", replacing: CacheEntry(value)))
    // An entry that never expires, without metadata, revalidated to one that does.
    try await layer.insert(Data("small".utf8), for: "plain")
    #expect(
      try await layer.revalidate(
        CacheEntry(Data("small".utf8), expiresAt: first), for: "plain", replacing: CacheEntry(Data("small".utf8))))
    #expect(try await layer.entry(for: "plain") == CacheEntry(Data("small".utf8), expiresAt: first))
    // An envelope that does not read (a metadata flag with a length of 0) is left alone.
    _ = try await RedisServer.command(
      RESPCommand([Array("SET".utf8), Array("test:broken".utf8), [0xAC, 1, 4, 0, 0, 1]]), port: server.port)
    #expect(try await !layer.revalidate(CacheEntry(Data([1])), for: "broken", replacing: CacheEntry(Data([1]))))
  }

  @Test("a cache's revalidation reaches Redis in place, and each instance's memory")
  func cacheRevalidatesThroughRedis() async throws {
    let server = try await RedisServer.start()
    let clock = ManualClock(now: WallClock().now)
    let calls = Locked(0)
    let origin = ClosureEntryFetcher<String, Data> { _, current in
      calls.withLock { $0 += 1 }
      return current == nil ? .value(Data("v".utf8), metadata: EntryMetadata(entityTag: "1")) : .notModified()
    }
    let redis = try makeLayer(server) { $0.clock = clock }
    let memory = try MemoryLayer<String, Data>(configuration: .init(clock: clock))
    let cache = try LoadingCache(
      layers: [memory, redis], origin: origin,
      configuration: .init(timeToLive: .seconds(60), staleWhileRevalidate: .seconds(60), clock: clock))
    #expect(try await cache.value(for: "k") == Data("v".utf8))
    clock.advance(by: .seconds(70))
    #expect(try await cache.value(for: "k") == Data("v".utf8))
    await cache.waitUntilIdle()
    #expect(calls.withLock { $0 } == 2)
    #expect(cache.statistics.revalidations == 1)
    let expected = CacheEntry(
      Data("v".utf8), expiresAt: clock.now.advanced(by: .seconds(120)), metadata: EntryMetadata(entityTag: "1"))
    #expect(memory.entry(for: "k") == expected)
    #expect(try await redis.entry(for: "k") == expected)
    #expect(redis.statistics.writes == 2, "one write and one revalidation")
  }

  @Test("Codable values go through the coder")
  func codable() async throws {
    struct User: Codable, Equatable, Sendable {
      var id: Int
      var name: String
    }
    let server = try await RedisServer.start()
    let layer = try RedisLayer<String, User>(configuration: .init(endpoint: server.endpoint), namespace: "users")
    try await layer.insert(User(id: 7, name: "Ada"), for: "7")
    #expect(try await layer.value(for: "7") == User(id: 7, name: "Ada"))
    let typed = try RedisLayer<Int, String>(
      configuration: .init(endpoint: server.endpoint), namespace: "typed", keyEncoding: .description,
      valueCoder: .utf8)
    try await typed.insert("forty-two", for: 42)
    #expect(try await typed.value(for: 42) == "forty-two")
    #expect(integer(try await server.command("EXISTS", "typed:42")) == 1)
  }

  @Test("an entry keeps its expiry, Redis expires it by PX, and the layer's clock hides it once expired")
  func expiry() async throws {
    let server = try await RedisServer.start()
    let clock = ManualClock()
    let layer = try makeLayer(server) { $0.clock = clock }
    // An hour, so that real time passing on a loaded machine (Redis's clock) changes nothing.
    let expiresAt = clock.now.advanced(by: .seconds(3_600))
    try await layer.insert(CacheEntry(Data("v".utf8), expiresAt: expiresAt), for: "k")
    #expect(try await layer.entry(for: "k") == CacheEntry(Data("v".utf8), expiresAt: expiresAt))
    let remaining = try #require(integer(try await server.command("PTTL", "test:k")))
    #expect(remaining > 3_000_000 && remaining <= 3_600_000)
    // Entries without an expiry have none in Redis either.
    try await layer.insert(Data("forever".utf8), for: "forever")
    #expect(integer(try await server.command("PTTL", "test:forever")) == -1)
    #expect(try await layer.entry(for: "forever")?.expiresAt == nil)

    clock.advance(by: .seconds(3_600))
    #expect(try await layer.entry(for: "k") == nil)
    // An entry that has expired already removes the key instead of storing it.
    try await layer.insert(CacheEntry(Data("old".utf8), expiresAt: clock.now), for: "forever")
    #expect(integer(try await server.command("EXISTS", "test:forever")) == 0)
  }

  @Test("the configured time to live caps entries, with or without their own expiry")
  func timeToLive() async throws {
    let server = try await RedisServer.start()
    let clock = ManualClock()
    let layer = try makeLayer(server) {
      $0.clock = clock
      $0.timeToLive = .seconds(3_600)
    }
    try await layer.insert(Data("a".utf8), for: "a")
    try await layer.insert(CacheEntry(Data("b".utf8), expiresAt: clock.now.advanced(by: .seconds(7_200))), for: "b")
    for key in ["a", "b"] {
      #expect(try await layer.entry(for: key)?.expiresAt == clock.now.advanced(by: .seconds(3_600)))
      let remaining = try #require(integer(try await server.command("PTTL", "test:\(key)")))
      #expect(remaining > 3_000_000 && remaining <= 3_600_000)
    }
  }

  @Test("namespaces keep layers apart, and removeAll removes its own keys only, even with glob characters")
  func namespaces() async throws {
    let server = try await RedisServer.start()
    let plain = try makeLayer(server, namespace: "a")
    let glob = try makeLayer(server, namespace: "a*[?]\\")
    let other = try makeLayer(server, namespace: "ab")
    for index in 0..<2_500 {
      try await plain.insert(Data("plain \(index)".utf8), for: "\(index)")
    }
    try await glob.insert(Data("glob".utf8), for: "0")
    try await other.insert(Data("other".utf8), for: "0")
    _ = try await server.command("SET", "unrelated", "x")
    #expect(try await glob.value(for: "0") == Data("glob".utf8))
    #expect(try await plain.value(for: "0") == Data("plain 0".utf8))

    try await glob.removeAll()
    #expect(try await glob.value(for: "0") == nil)
    #expect(try await plain.value(for: "0") == Data("plain 0".utf8))

    try await plain.removeAll()
    #expect(plain.statistics.removals == 2_500)
    #expect(integer(try await server.command("DBSIZE")) == 2)
    #expect(try await other.value(for: "0") == Data("other".utf8))
  }

  @Test("entries(for:) reads many keys in one round trip, across MGET batches, skipping misses")
  func bulk() async throws {
    let server = try await RedisServer.start()
    let clock = ManualClock()
    let layer = try makeLayer(server) { $0.clock = clock }
    let keys = (0..<1_200).map { "key \($0)" }
    for (index, key) in keys.enumerated() where index % 3 != 0 {
      let expiresAt = index % 3 == 2 ? clock.now.advanced(by: .seconds(3_600)) : nil
      try await layer.insert(CacheEntry(Data(key.utf8), expiresAt: expiresAt), for: key)
    }
    let found = try await layer.entries(for: keys)
    #expect(found.count == 800)
    for (index, key) in keys.enumerated() {
      let expected: CacheEntry<Data>? =
        switch index % 3 {
        case 0: nil
        case 1: CacheEntry(Data(key.utf8))
        default: CacheEntry(Data(key.utf8), expiresAt: clock.now.advanced(by: .seconds(3_600)))
        }
      #expect(found[key] == expected, "\(key)")
    }
    #expect(try await layer.entries(for: [String]()).isEmpty)
    clock.advance(by: .seconds(3_600))
    #expect(try await layer.entries(for: keys).count == 400)
  }

  @Test("concurrent tasks pipelined on shared connections each get their own reply")
  func concurrentPipelining() async throws {
    let server = try await RedisServer.start()
    let layer = try makeLayer(server) { $0.maximumConnections = 2 }
    try await withThrowingTaskGroup(of: Void.self) { group in
      for task in 0..<64 {
        group.addTask {
          for round in 0..<20 {
            let key = "task \(task) round \(round)"
            try await layer.insert(Data(key.utf8), for: key)
            let read = try await layer.value(for: key)
            #expect(read == Data(key.utf8))
          }
        }
      }
      try await group.waitForAll()
    }
    #expect(layer.statistics.hits == 64 * 20)
    #expect(layer.statistics.connectionsOpened <= 2)
    #expect(layer.statistics.connectionsDiscarded == 0)
  }

  @Test("a value over the size limit is refused before anything is sent")
  func valueTooLarge() async throws {
    let server = try await RedisServer.start()
    let layer = try makeLayer(server) { $0.maximumValueSize = 100 }
    try await layer.insert(Data(count: 100), for: "fits")
    let opened = layer.statistics.connectionsOpened
    await #expect {
      try await layer.insert(Data(count: 101), for: "big")
    } throws: { error in
      let error = error as? PersistenceError
      return error?.code == .valueTooLarge && error?.message.contains("101 bytes") == true
        && error?.message.contains("\"big\"") == true
    }
    #expect(integer(try await server.command("EXISTS", "test:big")) == 0)
    #expect(layer.statistics.connectionsOpened == opened)
  }

  @Test("a value the coder cannot encode is a typed error naming the key; nothing is sent")
  func unencodableValue() async throws {
    let server = try await RedisServer.start()
    let layer = try RedisLayer<String, Int>(
      configuration: .init(endpoint: server.endpoint), namespace: "test", keyEncoding: .string,
      valueCoder: CacheValueCoder(encode: { _ in throw TestError("refused") }, decode: { _ in 0 }))
    await #expect {
      try await layer.insert(1, for: "odd")
    } throws: { error in
      let error = error as? PersistenceError
      return error?.code == .encodingFailed && error?.message.contains("\"odd\"") == true
        && error?.underlying is TestError
    }
    #expect(layer.statistics.connectionsOpened == 0)
    #expect(layer.statistics.writes == 0)
  }

  @Test("a value the layer cannot read is a miss, counted and reported")
  func foreignValue() async throws {
    let server = try await RedisServer.start()
    let events = Locked<[String]>([])
    let layer = try makeLayer(server) { configuration in
      configuration.eventHandler = { event in
        if case .valueDiscarded(let key, let reason) = event { events.withLock { $0.append("\(key): \(reason)") } }
      }
    }
    _ = try await server.command("SET", "test:plain", "written by someone else")
    _ = try await server.command("SET", "test:short", "\u{AC}")
    #expect(try await layer.entry(for: "plain") == nil)
    #expect(try await layer.entry(for: "short") == nil)
    let typed = try RedisLayer<String, Int>(configuration: .init(endpoint: server.endpoint), namespace: "test")
    try await layer.insert(Data("not json".utf8), for: "json")
    #expect(try await typed.entry(for: "json") == nil)
    #expect(layer.statistics.discardedValues == 2)
    #expect(typed.statistics.discardedValues == 1)
    // A key of another Redis type: GET refuses it (WRONGTYPE) where MGET answers nil; both are
    // misses for the layer, and the GET is reported.
    _ = try await server.command("RPUSH", "test:list", "x")
    #expect(try await layer.entry(for: "list") == nil)
    #expect(try await layer.entries(for: ["list", "plain"]).isEmpty)
    #expect(layer.statistics.failures == 0)
    #expect(layer.statistics.discardedValues == 4)
    let reported = events.withLock { $0 }
    #expect(reported.count == 4)
    #expect(reported.first?.contains("not written by a RedisLayer") == true)
    #expect(reported.contains { $0.hasPrefix("list: ") && $0.contains("WRONGTYPE") })
  }

  @Test("invalid configurations are refused with a message naming the setting")
  func invalidConfiguration() {
    func refuses(_ fragment: String, _ configure: (inout RedisLayer<String, Data>.Configuration) -> Void) {
      var configuration = RedisLayer<String, Data>.Configuration()
      configure(&configuration)
      #expect {
        _ = try RedisLayer(configuration: configuration)
      } throws: { error in
        let error = error as? AsyncCacheError
        return error?.code == .invalidConfiguration && error?.message.contains(fragment) == true
      }
    }
    refuses("port") { $0.servers = .standalone(RedisEndpoint(host: "127.0.0.1", port: 0)) }
    refuses("host") { $0.servers = .standalone(RedisEndpoint(host: "")) }
    refuses("username") { $0.username = "alice" }
    refuses("database") { $0.database = -1 }
    refuses("maximumConnections") { $0.maximumConnections = 0 }
    refuses("callerWaitLimit") { $0.callerWaitLimit = .microseconds(-1) }
    refuses("callerWaitLimit") { $0.callerWaitLimit = .milliseconds(2) }
    refuses("operationTimeout") { $0.operationTimeout = .zero }
    refuses("connectTimeout") { $0.connectTimeout = .seconds(-1) }
    refuses("operationTimeout") { $0.operationTimeout = .seconds(Int64.max) }
    refuses("maximumValueSize") { $0.maximumValueSize = 600 << 20 }
    refuses("timeToLive") { $0.timeToLive = .zero }
    refuses("clientName") { $0.clientName = "has space" }
    refuses("failureThreshold") { $0.circuitBreaker.failureThreshold = 0 }
    refuses("initialDelay") { $0.circuitBreaker.maximumDelay = .milliseconds(1) }
    #expect(throws: AsyncCacheError.self) { _ = try RedisLayer<String, Data>(namespace: "") }
  }

  @Test("AUTH with a password or an ACL user, SELECT and CLIENT SETNAME run on every connection")
  func handshake() async throws {
    let server = try await RedisServer.start([
      "--requirepass", "s3cret", "--user", "alice", "on", ">wonderland", "~*", "&*", "+@all",
    ])
    let withPassword = try makeLayer(server) {
      $0.password = "s3cret"
      $0.database = 3
      $0.clientName = "thumbnails-7"
    }
    try await withPassword.insert(Data("x".utf8), for: "k")
    #expect(try await withPassword.value(for: "k") == Data("x".utf8))
    let asAlice = try makeLayer(server) {
      $0.username = "alice"
      $0.password = "wonderland"
      $0.database = 3
    }
    #expect(try await asAlice.value(for: "k") == Data("x".utf8))
    let admin = try makeLayer(server) { $0.password = "s3cret" }
    #expect(try await admin.value(for: "k") == nil, "database 0 does not have it")

    let wrong = try makeLayer(server) { $0.password = "guess" }
    await #expect {
      try await wrong.ping()
    } throws: { error in
      let error = error as? RedisError
      return error?.code == .authenticationFailed && error?.message.contains("AUTH") == true
    }
    let none = try makeLayer(server)
    await #expect {
      try await none.ping()
    } throws: { error in
      (error as? RedisError)?.code == .authenticationFailed
    }
    let badDatabase = try makeLayer(server) {
      $0.password = "s3cret"
      $0.database = 4096
    }
    await #expect {
      try await badDatabase.ping()
    } throws: { error in
      let error = error as? RedisError
      return error?.code == .connectionFailed && error?.message.contains("SELECT") == true
    }
  }

  @Test("a memory layer over Redis: the second instance is served by Redis, not the origin")
  func sharedByTwoInstances() async throws {
    let server = try await RedisServer.start()
    let origin = Locked(0)
    func instance() throws -> LoadingCache<String, Data> {
      try LoadingCache(
        layers: [try MemoryLayer<String, Data>(), try makeLayer(server, namespace: "fleet")],
        origin: ClosureFetcher { key in
          origin.withLock { $0 += 1 }
          return Data("rendered \(key)".utf8)
        })
    }
    let first = try instance()
    let second = try instance()
    #expect(try await first.value(for: "page") == Data("rendered page".utf8))
    #expect(try await second.value(for: "page") == Data("rendered page".utf8))
    #expect(origin.withLock { $0 } == 1)
  }

  @Test("RedisLayer<Int, Product> needs no encoding: integer keys as text, Codable values as JSON")
  func defaultEncodings() async throws {
    struct Product: Codable, Hashable, Sendable { var name: String }
    let server = try await RedisServer.start()
    defer { server.stop() }
    let products = try RedisLayer<Int, Product>(configuration: .init(endpoint: server.endpoint), namespace: "p")
    try await products.insert(Product(name: "tea"), for: 42)
    #expect(try await products.value(for: 42) == Product(name: "tea"))
    let raw = try RedisLayer<String, Data>(configuration: .init(endpoint: server.endpoint), namespace: "p")
    let stored = try #require(try await raw.value(for: "42"))
    #expect(try JSONDecoder().decode(Product.self, from: stored) == Product(name: "tea"))
  }

  @Test("a layer used on its own runs until its graceful shutdown signal or its close, then closes its connections")
  func runsAsAService() async throws {
    let server = try await RedisServer.start()
    defer { server.stop() }
    let signal = OneShotSignal()
    let layer = try makeLayer(server) { $0.gracefulShutdown = { await signal.wait() } }
    try await layer.insert(Data("v".utf8), for: "k")
    let service = Task { try await layer.run() }
    signal.fire()
    try await service.value
    await #expect { try await layer.value(for: "k") } throws: { ($0 as? RedisError)?.code == .shutDown }

    let other = try makeLayer(server)
    let closedElsewhere = Task { try await other.run() }
    try await other.close()
    try await closedElsewhere.value
  }

  @Test(
    "an entry that arrives already expired by the layer's clock deletes the key and is reported, not dropped silently")
  func expiredArrival() async throws {
    let server = try await RedisServer.start()
    defer { server.stop() }
    let events = EventLog<RedisLayerEvent>()
    let logs = RecordingLogHandler()
    let layer = try makeLayer(server) {
      $0.eventHandler = events.handler
      $0.logger = logs.logger()
    }
    try await layer.insert(Data("old".utf8), for: "k")
    let past = CacheInstant(secondsSince1970: 1_767_225_600)
    try await layer.insert(CacheEntry(Data("late".utf8), expiresAt: past), for: "k")
    try await layer.insert(CacheEntry(Data("late".utf8), expiresAt: past), for: "j")

    #expect(try await layer.value(for: "k") == nil, "the older value is gone too")
    let arrivals = events.all.compactMap { event -> String? in
      guard case .expiredOnArrival(let key, let expiresAt, _) = event else { return nil }
      return "\(key) \(expiresAt)"
    }
    #expect(arrivals == ["k 2026-01-01T00:00:00Z", "j 2026-01-01T00:00:00Z"])
    let records = logs.records.filter { $0.message.contains("arrived already expired") }
    #expect(records.map(\.level) == [.warning, .debug])
  }
}

@Suite("The Redis article's example", .redisServer)
struct RedisArticleExampleTests {
  @Test("memory over Redis with the Redis tier skipped on failure, as the module page shows")
  func overview() async throws {
    let server = try await RedisServer.start()
    let renders = Locked(0)
    let redis = try RedisLayer<String, Data>(configuration: .init(endpoint: server.endpoint), namespace: "thumbnails")
    let thumbnails = try LoadingCache(
      chain: CacheChain([
        .init(MemoryLayer<String, Data>(configuration: .init(timeToLive: .seconds(30)))),
        .init(redis, failurePolicy: .skip),
      ]),
      origin: ClosureFetcher { id in
        renders.withLock { $0 += 1 }
        return Data("thumbnail \(id)".utf8)
      })
    #expect(try await thumbnails.value(for: "a") == Data("thumbnail a".utf8))
    #expect(try await redis.value(for: "a") == Data("thumbnail a".utf8))
    server.stop()
    // Redis gone: the memory layer still answers, and a new key falls through to the origin.
    #expect(try await thumbnails.value(for: "a") == Data("thumbnail a".utf8))
    #expect(try await thumbnails.value(for: "b") == Data("thumbnail b".utf8))
    #expect(renders.withLock { $0 } == 2)
  }
}
