import AsyncCache
import AsyncCacheTesting
import Foundation
import TestSupport
import Testing

@testable import AsyncCacheRedis

/// One instance of a service in a fleet: a memory layer over a Redis layer with single flight,
/// and a cache whose origin is gated. Its lease lasts a minute unless a test sets it: a lease
/// that ran out while a loaded run held the test up (every task waits behind hundreds of
/// others) would let a second instance load.
struct FleetInstance {
  let memory: MemoryLayer<String, Data>
  let redis: RedisLayer<String, Data>
  let cache: LoadingCache<String, Data>
  let origin: GatedFetcher<String, Data>

  init(
    _ name: String, server: RedisServer, namespace: String = "fleet", leaseTime: Duration = .seconds(60),
    invalidation: Bool = false, operationTimeout: Duration = .seconds(2),
    cacheConfiguration: LoadingCache<String, Data>.Configuration = .init()
  ) throws {
    try self.init(
      name, servers: .standalone(server.endpoint), namespace: namespace, leaseTime: leaseTime,
      invalidation: invalidation, operationTimeout: operationTimeout, cacheConfiguration: cacheConfiguration)
  }

  init(
    _ name: String, servers: RedisServers, namespace: String = "fleet", leaseTime: Duration = .seconds(60),
    invalidation: Bool = false, operationTimeout: Duration = .seconds(2),
    cacheConfiguration: LoadingCache<String, Data>.Configuration = .init()
  ) throws {
    var configuration = RedisLayer<String, Data>.Configuration()
    configuration.servers = servers
    configuration.operationTimeout = operationTimeout
    configuration.singleFlight = RedisSingleFlight(leaseTime: leaseTime)
    if invalidation { configuration.invalidation = RedisInvalidation() }
    memory = try MemoryLayer<String, Data>()
    redis = try RedisLayer(configuration: configuration, namespace: namespace)
    origin = GatedFetcher { key in Data("\(name) \(key)".utf8) }
    cache = try LoadingCache(
      tiers: [.init(memory), .init(redis, failurePolicy: .skip)], origin: origin, configuration: cacheConfiguration)
  }

  /// Waits until this instance waits for another's lease on `key`.
  func waitUntilWaiting() async {
    await eventually { redis.singleFlight?.waits.count == 1 }
  }
}

/// `count` concurrent requests for `key` to `instance`, as child tasks of a group the caller
/// awaits.
func requests(
  _ count: Int, for key: String, to instance: FleetInstance
) -> [Task<Data, any Error>] {
  (0..<count).map { _ in Task { try await instance.cache.value(for: key) } }
}

/// The wall clock, `offset` ahead: an instance whose clock runs ahead of another's.
struct SkewedClock: CacheClock {
  let offset: Duration
  var now: CacheInstant { WallClock().now.advanced(by: offset) }
  var minimumResolution: Duration { WallClock().minimumResolution }
  func sleep(until deadline: CacheInstant, tolerance: Duration?) async throws {
    try await WallClock().sleep(until: deadline.advanced(by: .zero - offset), tolerance: tolerance)
  }
}

@Suite("Single flight across instances that share Redis", .redisServer, .timeLimit(.minutes(3)))
struct RedisSingleFlightTests {
  @Test("8 instances × 50 concurrent requests for one cold key make exactly 1 origin call")
  func eightInstancesOneOriginCall() async throws {
    let server = try await RedisServer.start()
    let fleet = try (0..<8).map { try FleetInstance("i\($0)", server: server) }
    let first = requests(50, for: "cold", to: fleet[0])
    await fleet[0].origin.waitForFetches(1, for: "cold")
    var tasks = first
    for instance in fleet.dropFirst() {
      tasks += requests(50, for: "cold", to: instance)
      await instance.waitUntilWaiting()
    }
    // Every other instance waits for the holder's announcement; one origin call so far.
    #expect(fleet.reduce(0) { $0 + $1.origin.callCount } == 1)
    #expect(fleet[0].origin.release("cold") == 1)
    for task in tasks { #expect(try await task.value == Data("i0 cold".utf8)) }
    #expect(fleet.reduce(0) { $0 + $1.origin.callCount } == 1)
    #expect(fleet.reduce(0) { $0 + $1.redis.statistics.leasesGranted } == 1)
    #expect(fleet.reduce(0) { $0 + $1.redis.statistics.loadsAwaited } == 7)
    // Each instance's memory layer has the value now.
    for instance in fleet { #expect(instance.memory.value(for: "cold") == Data("i0 cold".utf8)) }
  }

  @Test("an origin's metadata reaches the instances that waited, through the holder's announcement")
  func metadataReachesTheWaitingInstances() async throws {
    let server = try await RedisServer.start()
    let metadata = EntryMetadata(entityTag: #""v7""#, tags: ["tenant:7"])
    let (gates, fleet) = try Self.entryFleet(server) { .value($0, metadata: metadata) }
    let holder = Task { try await fleet[0].cache.value(for: "k") }
    await gates[0].waitForFetches(1, for: "k")
    let waiter = Task { try await fleet[1].cache.value(for: "k") }
    await eventually { fleet[1].redis.singleFlight?.waits.count == 1 }
    #expect(gates[0].release("k") == 1)
    #expect(try await holder.value == Data("value of k".utf8))
    #expect(try await waiter.value == Data("value of k".utf8))
    #expect(gates[1].callCount == 0, "the waiting instance did not ask its origin")
    #expect(fleet[1].redis.statistics.loadsAwaited == 1)
    // Tagged, so stamped when the holder's load started: the same instant everywhere.
    var expected = metadata
    expected.producedAt = try #require(fleet[0].memory.entry(for: "k")?.metadata.producedAt)
    for instance in fleet { #expect(instance.memory.entry(for: "k")?.metadata == expected) }
    #expect(try await fleet[1].redis.entry(for: "k")?.metadata == expected)
  }

  @Test("a value its origin says not to keep is stored nowhere, quietly; the waiting instance loads on its own")
  func noStoreUnderALease() async throws {
    let server = try await RedisServer.start()
    let logs = RecordingLogHandler()
    let (gates, fleet) = try Self.entryFleet(server, logger: logs.logger()) { .value($0, timeToLive: .zero) }
    let holder = Task { try await fleet[0].cache.value(for: "k") }
    await gates[0].waitForFetches(1, for: "k")
    let waiter = Task { try await fleet[1].cache.value(for: "k") }
    await eventually { fleet[1].redis.singleFlight?.waits.count == 1 }
    #expect(gates[0].release("k") == 1)
    #expect(try await holder.value == Data("value of k".utf8))
    await gates[1].waitForFetches(1, for: "k")
    #expect(gates[1].release("k") == 1, "the waiting instance loaded on its own")
    #expect(try await waiter.value == Data("value of k".utf8))
    #expect(try await server.command("EXISTS", "fleet:k") == .integer(0))
    #expect(logs.records.filter { $0.level >= .warning }.isEmpty, "\(logs.records.map(\.message))")
  }

  /// Two instances over `server` with single flight, whose origins are `EntryFetcher`s that
  /// answer `answer` of a gated value ("value of <key>").
  static func entryFleet(
    _ server: RedisServer, logger: CacheLogger? = nil, answer: @escaping @Sendable (Data) -> FetchedEntry<Data>
  ) throws -> (
    gates: [GatedFetcher<String, Data>],
    fleet: [(memory: MemoryLayer<String, Data>, redis: RedisLayer<String, Data>, cache: LoadingCache<String, Data>)]
  ) {
    let gates = (0..<2).map { _ in GatedFetcher<String, Data> { Data("value of \($0)".utf8) } }
    let fleet = try gates.map { gate in
      var configuration = RedisLayer<String, Data>.Configuration(endpoint: server.endpoint)
      configuration.singleFlight = RedisSingleFlight(leaseTime: .seconds(60))
      if let logger { configuration.logger = logger }
      let memory = try MemoryLayer<String, Data>()
      let redis = try RedisLayer(configuration: configuration, namespace: "fleet")
      let origin = ClosureEntryFetcher<String, Data> { key, _ in answer(try await gate.fetch(key)) }
      let cache = try LoadingCache(tiers: [.init(memory), .init(redis, failurePolicy: .skip)], origin: origin)
      return (memory: memory, redis: redis, cache: cache)
    }
    return (gates, fleet)
  }

  @Test("without single flight, the same fleet asks the origin once per instance")
  func withoutSingleFlightOncePerInstance() async throws {
    let server = try await RedisServer.start()
    var caches: [(LoadingCache<String, Data>, GatedFetcher<String, Data>)] = []
    for index in 0..<4 {
      let redis = try RedisLayer<String, Data>(configuration: .init(endpoint: server.endpoint), namespace: "plain")
      let origin = GatedFetcher<String, Data> { key in Data("i\(index) \(key)".utf8) }
      caches.append((try LoadingCache(layers: [MemoryLayer<String, Data>(), redis], origin: origin), origin))
    }
    var tasks: [Task<Data, any Error>] = []
    for (cache, origin) in caches {
      tasks += (0..<10).map { _ in Task { try await cache.value(for: "cold") } }
      await origin.waitForFetches(1, for: "cold")
    }
    for (_, origin) in caches { _ = origin.releaseAll() }
    for task in tasks { _ = try await task.value }
    #expect(caches.reduce(0) { $0 + $1.1.callCount } == 4)
  }

  @Test("when every local request of the holder is cancelled, its lease is released and another instance loads at once")
  func cancelledHolderReleasesTheLease() async throws {
    let server = try await RedisServer.start()
    let a = try FleetInstance("a", server: server)
    let b = try FleetInstance("b", server: server)
    let holderRequests = requests(3, for: "k", to: a)
    await a.origin.waitForFetches(1, for: "k")
    let waiting = requests(5, for: "k", to: b)
    await b.waitUntilWaiting()

    for task in holderRequests { task.cancel() }
    // A's load is cancelled and its lease released: B takes it over without waiting for the
    // lease (5 s) to run out.
    await b.origin.waitForFetches(1, for: "k")
    #expect(a.origin.wasCancelled("k"))
    #expect(b.origin.release("k") == 1)
    for task in waiting { #expect(try await task.value == Data("b k".utf8)) }
    for task in holderRequests { await #expect(throws: CancellationError.self) { try await task.value } }
    #expect(b.redis.statistics.leasesGranted == 1)
    #expect(a.origin.callCount == 1 && b.origin.callCount == 1)
  }

  @Test("an origin error reaches every instance's waiters, and nothing is stored; the next request loads again")
  func originErrorReachesEveryInstance() async throws {
    let server = try await RedisServer.start()
    let a = try FleetInstance("a", server: server)
    let b = try FleetInstance("b", server: server)
    let c = try FleetInstance("c", server: server)
    let holder = requests(2, for: "k", to: a)
    await a.origin.waitForFetches(1, for: "k")
    let fromB = requests(3, for: "k", to: b)
    await b.waitUntilWaiting()
    let fromC = requests(3, for: "k", to: c)
    await c.waitUntilWaiting()

    #expect(a.origin.release("k", throwing: TestError("the origin is down")) == 1)
    for task in holder { await #expect(throws: TestError.self) { try await task.value } }
    for task in fromB + fromC {
      let error = await #expect(throws: AsyncCacheError.self) { try await task.value }
      #expect(error?.code == .failedElsewhere)
      #expect(error?.message.contains("the origin is down") == true)
      #expect(error?.message.contains("\"k\"") == true)
    }
    #expect(try await server.command("GET", "fleet:k") == .bulkString(nil))
    #expect(b.origin.callCount == 0 && c.origin.callCount == 0)

    // The next request tries again, under a new lease.
    let again = requests(1, for: "k", to: b)
    await b.origin.waitForFetches(1, for: "k")
    #expect(b.origin.release("k") == 1)
    #expect(try await again[0].value == Data("b k".utf8))
  }

  @Test("a holder that dies without a word: a waiting instance takes the load over once the lease runs out")
  func expiredLeaseIsTakenOver() async throws {
    let server = try await RedisServer.start()
    let b = try FleetInstance("b", server: server, leaseTime: .milliseconds(200))
    // A lease that no one renews or releases, as a killed holder leaves it.
    let keys = b.redis.companionKeys(of: "k")
    let lease = String(decoding: keys.lease, as: UTF8.self)
    try await server.expectOK("SET", lease, "1", "PX", "600")
    let waiting = requests(4, for: "k", to: b)
    await b.origin.waitForFetches(1, for: "k")
    // Taken over once the lease ran out, not before: the dead holder's lease ("1") is gone and
    // the instance holds one of its own. Unless it gave up on coordination because Redis looked
    // unreachable or slow to it, which it counts. (Timing this from the test's clock failed in
    // full runs on a loaded 2-core machine: 233 ms of a 300 ms lease, 340 ms of 600, as the
    // test's task waited for a thread after the SET.)
    if try await server.command("GET", lease) == .bulkString(Array("1".utf8)) {
      #expect(b.redis.statistics.uncoordinatedLoads > 0, "loaded while the dead holder's lease held, coordinated")
    }
    #expect(b.origin.release("k") == 1)
    for task in waiting { #expect(try await task.value == Data("b k".utf8)) }
  }

  @Test("Redis killed in the middle of a load: the waiting instance loads on its own, within the timeout")
  func redisDownFallsBackToPerInstanceLoads() async throws {
    let server = try await RedisServer.start()
    // The default operation timeout (2 s): a killed server closes its sockets, so nothing waits
    // for it, while the claims made before the kill get a margin on a loaded host (one that
    // timed out would have the instance load alone before the test kills anything).
    let a = try FleetInstance("a", server: server)
    let b = try FleetInstance("b", server: server)
    let holder = requests(2, for: "k", to: a)
    await a.origin.waitForFetches(1, for: "k")
    let waiting = requests(3, for: "k", to: b)
    await b.waitUntilWaiting()

    server.stop(killing: true)
    // B's subscription breaks: it looks again, cannot reach Redis, and loads by itself.
    await b.origin.waitForFetches(1, for: "k")
    #expect(b.origin.release("k") == 1)
    for task in waiting { #expect(try await task.value == Data("b k".utf8)) }
    #expect(a.origin.release("k") == 1)
    for task in holder { #expect(try await task.value == Data("a k".utf8)) }
    #expect(b.redis.statistics.uncoordinatedLoads >= 1)
    // With Redis gone for good, requests still succeed, one origin call per instance and key.
    let c = try FleetInstance("c", server: server, operationTimeout: .milliseconds(200))
    c.origin.open()
    #expect(try await c.cache.value(for: "other") == Data("c other".utf8))
  }

  @Test("a late fill after a newer write from another instance is refused, and stored nowhere")
  func lateFillAfterWriteIsRefused() async throws {
    let server = try await RedisServer.start()
    let a = try FleetInstance("a", server: server)
    let b = try FleetInstance("b", server: server)
    let holder = requests(1, for: "k", to: a)
    await a.origin.waitForFetches(1, for: "k")
    try await b.cache.insert(Data("newer".utf8), for: "k")

    #expect(a.origin.release("k") == 1)
    // The request that asked before the write gets what it loaded…
    #expect(try await holder[0].value == Data("a k".utf8))
    // …but neither Redis nor A's memory layer keeps it.
    #expect(a.redis.statistics.fillsRefused == 1)
    #expect(try await b.redis.value(for: "k") == Data("newer".utf8))
    #expect(a.memory.value(for: "k") == nil)
    #expect(try await a.cache.value(for: "k") == Data("newer".utf8))
  }

  @Test("a write while another instance holds the lease answers the instances waiting for it at once")
  func writeWakesWaitingInstances() async throws {
    let server = try await RedisServer.start()
    // A lease far longer than the test may run: B's requests end only if the write wakes them.
    let a = try FleetInstance("a", server: server, leaseTime: .seconds(600))
    let b = try FleetInstance("b", server: server, leaseTime: .seconds(600))
    let c = try FleetInstance("c", server: server, leaseTime: .seconds(600))
    let holder = requests(1, for: "k", to: a)
    await a.origin.waitForFetches(1, for: "k")
    let waiting = requests(3, for: "k", to: b)
    await b.waitUntilWaiting()

    // A's origin has not answered: B's requests get C's write, not A's load.
    try await c.cache.insert(Data("written".utf8), for: "k")
    for task in waiting { #expect(try await task.value == Data("written".utf8)) }
    #expect(b.origin.callCount == 0)
    #expect(a.origin.callCount == 1)

    #expect(a.origin.release("k") == 1)
    #expect(try await holder[0].value == Data("a k".utf8))
    #expect(a.redis.statistics.fillsRefused == 1)
    #expect(try await c.redis.value(for: "k") == Data("written".utf8))
  }

  @Test("a value Redis still holds but the instances count as expired is loaded once for the fleet, not once each")
  func justExpiredKeyIsCoordinated() async throws {
    let server = try await RedisServer.start()
    let writer = try FleetInstance("w", server: server)
    try await writer.redis.insert(Data("old".utf8), for: "hot", timeToLive: .seconds(30))
    // Their clocks are past its expiry; Redis keeps it 30 s more (as it does for a moment past
    // any expiry: whole milliseconds, counted from when it got the write).
    let ahead = LoadingCache<String, Data>.Configuration(clock: SkewedClock(offset: .seconds(31)))
    let b = try FleetInstance("b", server: server, cacheConfiguration: ahead)
    let c = try FleetInstance("c", server: server, cacheConfiguration: ahead)
    let fromB = requests(5, for: "hot", to: b)
    await b.origin.waitForFetches(1, for: "hot")
    let fromC = requests(5, for: "hot", to: c)
    await c.waitUntilWaiting()
    #expect(b.origin.release("hot") == 1)
    for task in fromB + fromC { #expect(try await task.value == Data("b hot".utf8)) }
    #expect(c.origin.callCount == 0)
    #expect(b.redis.statistics.uncoordinatedLoads + c.redis.statistics.uncoordinatedLoads == 0)
  }

  @Test("a load made without a lease (Redis too slow to answer the claim) never overwrites a newer write")
  func uncoordinatedLoadIsNotStoredInRedis() async throws {
    let server = try await RedisServer.start()
    let a = try FleetInstance("a", server: server, operationTimeout: .milliseconds(300))
    let w = try FleetInstance("w", server: server)
    server.freeze()
    let fromA = requests(1, for: "k", to: a)
    // The claim times out: A loads on its own.
    await a.origin.waitForFetches(1, for: "k")
    server.thaw()
    try await w.cache.insert(Data("newer".utf8), for: "k")
    #expect(a.origin.release("k") == 1)
    #expect(try await fromA[0].value == Data("a k".utf8))
    await a.cache.waitUntilIdle()
    #expect(a.redis.statistics.uncoordinatedLoads == 1)
    #expect(try await w.redis.value(for: "k") == Data("newer".utf8))
    #expect(a.memory.value(for: "k") == Data("a k".utf8))
  }

  @Test("a wait begun while the subscription is down ends with the holder's load, not the lease time")
  func waitDuringResubscription() async throws {
    let server = try await RedisServer.start()
    // Far longer than the test may run: the wait must end by the announcement.
    let a = try FleetInstance("a", server: server, leaseTime: .seconds(600))
    let b = try FleetInstance("b", server: server, leaseTime: .seconds(600))
    b.origin.open()
    _ = try await b.cache.value(for: "warm")
    let holder = requests(1, for: "k", to: a)
    await a.origin.waitForFetches(1, for: "k")
    _ = try await server.command("CLIENT", "KILL", "TYPE", "pubsub")
    await eventually { !(b.redis.subscription?.isSubscribed ?? true) }
    let fromB = Task { try await b.cache.value(for: "k") }
    await b.waitUntilWaiting()
    #expect(a.origin.release("k") == 1)
    #expect(try await holder[0].value == Data("a k".utf8))
    #expect(try await fromB.value == Data("a k".utf8))
    #expect(b.origin.callCount == 1)
  }

  @Test("with invalidation on, the instances that waited keep the loaded value; one with an old copy drops it")
  func invalidationKeepsLoadedValue() async throws {
    let server = try await RedisServer.start()
    let a = try FleetInstance("a", server: server, invalidation: true)
    let b = try FleetInstance("b", server: server, invalidation: true)
    let c = try FleetInstance("c", server: server, invalidation: true)
    for instance in [a, b, c] { try instance.redis.forwardInvalidations(to: [instance.memory]) }
    await eventually { [a, b, c].allSatisfy(\.redis.isReceivingInvalidations) }
    // C holds an old copy of k, which Redis no longer has (removed behind the library's back).
    try c.memory.insert(Data("old".utf8), for: "k")
    _ = try await server.command("DEL", "fleet:k")

    let holder = requests(1, for: "k", to: a)
    await a.origin.waitForFetches(1, for: "k")
    let waiting = requests(3, for: "k", to: b)
    await b.waitUntilWaiting()
    #expect(a.origin.release("k") == 1)
    #expect(try await holder[0].value == Data("a k".utf8))
    for task in waiting { #expect(try await task.value == Data("a k".utf8)) }
    // The fill's invalidation has reached both: B keeps what it took, C drops its old copy.
    await eventually { b.redis.statistics.invalidationsReceived == 1 && c.redis.statistics.invalidationsReceived == 1 }
    await eventually { c.memory.value(for: "k") == nil }
    await b.cache.waitUntilIdle()
    #expect(b.memory.value(for: "k") == Data("a k".utf8))
    #expect(a.memory.value(for: "k") == Data("a k".utf8))
    #expect(try await c.cache.value(for: "k") == Data("a k".utf8))
    #expect(c.origin.callCount == 0)
  }

  @Test("a late fill after a removal from another instance does not bring the key back")
  func lateFillAfterRemovalIsRefused() async throws {
    let server = try await RedisServer.start()
    let a = try FleetInstance("a", server: server)
    let b = try FleetInstance("b", server: server)
    let holder = requests(1, for: "k", to: a)
    await a.origin.waitForFetches(1, for: "k")
    try await b.cache.removeValue(for: "k")
    #expect(a.origin.release("k") == 1)
    #expect(try await holder[0].value == Data("a k".utf8))
    #expect(a.redis.statistics.fillsRefused == 1)
    #expect(try await b.redis.value(for: "k") == nil)
  }

  /// An instance whose lease lasts a minute and is renewed every 20 ms, so that renewals are
  /// seen at once; its origin is gated.
  static func renewingInstance(
    on server: RedisServer
  ) throws -> (RedisLayer<String, Data>, GatedFetcher<String, Data>, LoadingCache<String, Data>) {
    var settings = RedisSingleFlight(leaseTime: .seconds(60))
    settings.renewalInterval = .milliseconds(20)
    var configuration = RedisLayer<String, Data>.Configuration(endpoint: server.endpoint)
    configuration.singleFlight = settings
    let redis = try RedisLayer<String, Data>(configuration: configuration, namespace: "fleet")
    let origin = GatedFetcher<String, Data> { key in Data("a \(key)".utf8) }
    return (redis, origin, try LoadingCache(layers: [MemoryLayer<String, Data>(), redis], origin: origin))
  }

  @Test("the holder renews its lease while its load runs, and stops once it completes")
  func longLoadRenewsItsLease() async throws {
    let server = try await RedisServer.start()
    let (redis, origin, cache) = try Self.renewingInstance(on: server)
    let b = try FleetInstance("b", server: server)
    let holder = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    let waiting = requests(2, for: "k", to: b)
    await b.waitUntilWaiting()

    // Shortened by hand, the lease is put back to the full lease time by the next renewals.
    let lease = String(decoding: redis.companionKeys(of: "k").lease, as: UTF8.self)
    _ = try await server.command("PEXPIRE", lease, "5000")
    let renewed = redis.statistics.leasesRenewed
    // Two more: the first may have run on the server before the PEXPIRE.
    await eventually { redis.statistics.leasesRenewed >= renewed + 2 }
    let left = try #require(integer(try await server.command("PTTL", lease)))
    #expect(left > 5_000)
    #expect(b.origin.callCount == 0)

    #expect(origin.release("k") == 1)
    #expect(try await holder.value == Data("a k".utf8))
    for task in waiting { #expect(try await task.value == Data("a k".utf8)) }
    #expect(b.origin.callCount == 0)
    // Completed: no renewal goes on, and the lease is gone.
    #expect(redis.singleFlight?.renewals.withLock(\.isEmpty) == true)
    #expect(try await server.command("EXISTS", lease) == .integer(0))
  }

  @Test("a closed layer stops renewing the lease of a load that has not ended")
  func closedLayerStopsRenewing() async throws {
    let server = try await RedisServer.start()
    let (redis, origin, cache) = try Self.renewingInstance(on: server)
    let holder = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    await eventually { redis.statistics.leasesRenewed >= 1 }
    let renewal = try #require(redis.singleFlight?.renewals.withLock { $0.values.first?.task })

    try await redis.close()
    // The renewal ends by itself (its load has not): it does not retry on a closed layer.
    await renewal.value
    #expect(origin.release("k") == 1)
    _ = try? await holder.value
  }

  @Test("a stale value being refreshed is not taken for the fresh one: the refresh claims a lease")
  func refreshClaimsPastTheStaleValue() async throws {
    let server = try await RedisServer.start()
    let clock = ManualClock()
    var configuration = RedisLayer<String, Data>.Configuration(endpoint: server.endpoint)
    configuration.singleFlight = RedisSingleFlight()
    let redis = try RedisLayer<String, Data>(configuration: configuration, namespace: "refresh")
    let origin = GatedFetcher<String, Data> { key in Data("fresh \(key)".utf8) }
    let cache = try LoadingCache(
      layers: [redis], origin: origin,
      configuration: .init(timeToLive: .seconds(10), staleWhileRevalidate: .seconds(60), clock: clock))
    try await cache.insert(Data("old".utf8), for: "k")
    clock.advance(by: .seconds(11))
    // Stale: served at once, and refreshed through a lease (not answered with the stale value).
    #expect(try await cache.value(for: "k") == Data("old".utf8))
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    await cache.waitUntilIdle()
    #expect(try await redis.value(for: "k") == Data("fresh k".utf8))
    #expect(redis.statistics.leasesGranted == 1)
  }

  @Test("on a Redis Cluster: one origin call per key for the fleet, and fenced writes, whatever the key's slot")
  func cluster() async throws {
    let cluster = try await RedisClusterServers.start()
    let fleet = try (0..<3).map { try FleetInstance("i\($0)", servers: .cluster(seeds: cluster.seeds)) }
    let keys = (0..<6).map { "key \($0)" }
    var tasks: [Task<Data, any Error>] = []
    for key in keys {
      tasks += requests(10, for: key, to: fleet[0])
      await fleet[0].origin.waitForFetches(1, for: key)
    }
    for instance in fleet.dropFirst() {
      for key in keys { tasks += requests(10, for: key, to: instance) }
      await eventually { instance.redis.singleFlight?.waits.count == keys.count }
    }
    for key in keys { #expect(fleet[0].origin.release(key) == 1) }
    for task in tasks { #expect(try await task.value.starts(with: Data("i0 key".utf8))) }
    #expect(fleet.reduce(0) { $0 + $1.origin.callCount } == keys.count)

    // A write and a removal through the fenced scripts, routed to each key's master.
    try await fleet[1].cache.insert(Data("new".utf8), for: keys[0])
    #expect(try await fleet[2].redis.value(for: keys[0]) == Data("new".utf8))
    try await fleet[1].cache.removeValue(for: keys[1])
    #expect(try await fleet[2].redis.value(for: keys[1]) == nil)
  }

  @Test("a holder whose origin ignores cancellation gives up its lease as soon as its requests leave")
  func abandonedHolderReleasesAtOnce() async throws {
    let server = try await RedisServer.start()
    var settings = RedisSingleFlight(leaseTime: .seconds(300))
    settings.renewalInterval = .milliseconds(20)
    var configuration = RedisLayer<String, Data>.Configuration(endpoint: server.endpoint)
    configuration.singleFlight = settings
    let redis = try RedisLayer<String, Data>(configuration: configuration, namespace: "fleet")
    let origin = StubbornFetcher<String, Data> { key in Data("stubborn \(key)".utf8) }
    let a = try LoadingCache(layers: [MemoryLayer<String, Data>(), redis], origin: origin)
    let b = try FleetInstance("b", server: server, leaseTime: .seconds(300))
    let holder = Task { try await a.value(for: "k") }
    await eventually { origin.callCount == 1 }
    let follower = requests(1, for: "k", to: b)
    await b.waitUntilWaiting()

    holder.cancel()
    await #expect(throws: CancellationError.self) { try await holder.value }
    // B takes over while A's origin still runs: not after the 300 s lease.
    await b.origin.waitForFetches(1, for: "k")
    #expect(redis.singleFlight?.renewals.withLock(\.isEmpty) == true)
    #expect(b.origin.release("k") == 1)
    #expect(try await follower[0].value == Data("b k".utf8))
    // A's origin ends at last: its value is stored nowhere, and does not overwrite B's.
    origin.finishAll()
    await a.waitUntilIdle()
    #expect(try await b.redis.value(for: "k") == Data("b k".utf8))
  }

  @Test("with Redis down, loads do not wait for the subscription: each waits for its origin only")
  func redisDownDoesNotDelayLoads() async throws {
    let server = try await RedisServer.start()
    server.stop(killing: true)
    // A long operation timeout: a load that waited for the subscription would take it.
    let c = try FleetInstance("c", server: server, operationTimeout: .seconds(30))
    c.origin.open()
    #expect(try await c.cache.value(for: "first") == Data("c first".utf8))
    let started = ContinuousClock.now
    for index in 0..<3 { #expect(try await c.cache.value(for: "k\(index)") == Data("c k\(index)".utf8)) }
    #expect(started.duration(to: .now) < .seconds(20))
    #expect(c.redis.statistics.uncoordinatedLoads >= 3)
  }

  @Test("a value Redis cannot keep (expired already): the waiting instances load on their own at once, not in turn")
  func unstorableValueLetsEveryoneLoad() async throws {
    let server = try await RedisServer.start()
    // max-age=0: every value expires as it arrives.
    let maxAgeZero = LoadingCache<String, Data>.Configuration(timeToLiveForValue: { _, _ in .zero })
    let a = try FleetInstance("a", server: server, cacheConfiguration: maxAgeZero)
    let b = try FleetInstance("b", server: server, cacheConfiguration: maxAgeZero)
    let c = try FleetInstance("c", server: server, cacheConfiguration: maxAgeZero)
    let fromA = Task { try await a.cache.value(for: "k") }
    await a.origin.waitForFetches(1, for: "k")
    let fromB = Task { try await b.cache.value(for: "k") }
    await eventually { b.redis.singleFlight?.waits.count == 1 }
    let fromC = Task { try await c.cache.value(for: "k") }
    await eventually { c.redis.singleFlight?.waits.count == 1 }
    #expect(a.origin.release("k") == 1)
    #expect(try await fromA.value == Data("a k".utf8))
    // Both ask their origins, neither waiting for the other's.
    await eventually { b.origin.callCount == 1 && c.origin.callCount == 1 }
    _ = b.origin.releaseAll()
    _ = c.origin.releaseAll()
    #expect(try await fromB.value == Data("b k".utf8))
    #expect(try await fromC.value == Data("c k".utf8))
  }

  @Test("an origin's notFound keeps its code on every instance, so that their negative caching remembers it")
  func notFoundKeepsItsCode() async throws {
    let server = try await RedisServer.start()
    let remembering = LoadingCache<String, Data>.Configuration(negativeCaching: .notFound(timeToLive: .seconds(60)))
    let a = try FleetInstance("a", server: server, cacheConfiguration: remembering)
    let b = try FleetInstance("b", server: server, cacheConfiguration: remembering)
    let fromA = Task { try await a.cache.value(for: "missing") }
    await a.origin.waitForFetches(1, for: "missing")
    let fromB = Task { try await b.cache.value(for: "missing") }
    await eventually { b.redis.singleFlight?.waits.count == 1 }
    #expect(a.origin.release("missing", throwing: AsyncCacheError(code: .notFound, message: "no such user")) == 1)
    await #expect(throws: AsyncCacheError.self) { try await fromA.value }
    let error = await #expect(throws: AsyncCacheError.self) { try await fromB.value }
    #expect(error?.code == .notFound)
    #expect(error?.message.contains("no such user") == true)
    // Remembered: B's next request does not ask its origin.
    b.origin.open()
    let again = await #expect(throws: AsyncCacheError.self) { try await b.cache.value(for: "missing") }
    #expect(again?.code == .notFound)
    #expect(b.origin.callCount == 0)
  }

  @Test("a claim given up while its script waits in Redis leaves no lease behind once the script runs")
  func abandonedClaimLeavesNoLease() async throws {
    let server = try await RedisServer.start()
    var configuration = RedisLayer<String, Data>.Configuration(endpoint: server.endpoint)
    // One connection: the removal of the lease follows the claim on it, in order. And time to
    // wait for the paused server.
    configuration.maximumConnections = 1
    configuration.operationTimeout = .seconds(300)
    configuration.singleFlight = RedisSingleFlight(leaseTime: .seconds(300))
    let redis = try RedisLayer<String, Data>(configuration: configuration, namespace: "fleet")
    let coordinator = try #require(redis.loadCoordinator)
    // The scripts known to the server, so that the claim below is one EVALSHA and so is the
    // removal (a removal that had to fall back to EVAL would be two commands, and the count of
    // commands in flight would pass through 0 between them).
    if case .granted(let token) = try await coordinator.claim("warm", supersedes: nil) {
      _ = await coordinator.complete("warm", token: token, with: .failure(CancellationError()))
    }
    #expect(
      try await server.command("SCRIPT", "LOAD", SingleFlightScripts.abandon.source)
        == .bulkString(SingleFlightScripts.abandon.sha1))
    // Scripts wait while the server is paused for writes.
    try await server.expectOK("CLIENT", "PAUSE", "60000", "WRITE")
    let claim = Task { try await coordinator.claim("k", supersedes: nil) }
    await eventually { redis.commandsInFlight == 1 }
    claim.cancel()
    await #expect(throws: CancellationError.self) { try await claim.value }
    await eventually { redis.commandsInFlight == 2 }
    try await server.expectOK("CLIENT", "UNPAUSE")
    // The claim ran and was granted a lease, which the removal that followed it took away.
    let lease = String(decoding: redis.companionKeys(of: "k").lease, as: UTF8.self)
    await eventually { redis.commandsInFlight == 0 }
    #expect(try await server.command("EXISTS", lease) == .integer(0))
    #expect(redis.statistics.leasesGranted == 1)
    let b = try FleetInstance("b", server: server)
    b.origin.open()
    #expect(try await b.cache.value(for: "k") == Data("b k".utf8))
  }

  /// The pool sends a command on its least busy connection, so a claim given up while it waits
  /// behind other commands can reach Redis after the removal sent for it on another connection
  /// (a review reproduced it behind a 200 MB write: the lease then stood unowned for its whole
  /// time). The removal leaves a mark when it finds no lease; the claim that comes after it
  /// grants nothing. Run here as the scripts themselves, in that order.
  @Test("a claim whose removal reached Redis first (on another connection) is granted nothing")
  func claimAbandonedBeforeItsScriptRan() async throws {
    let server = try await RedisServer.start()
    var configuration = RedisLayer<String, Data>.Configuration(endpoint: server.endpoint)
    configuration.singleFlight = RedisSingleFlight(leaseTime: .seconds(300))
    let redis = try RedisLayer<String, Data>(configuration: configuration, namespace: "fleet")
    let keys = redis.companionKeys(of: "k")
    let (value, lease, version) = (
      String(decoding: keys.value, as: UTF8.self), String(decoding: keys.lease, as: UTF8.self),
      String(decoding: keys.version, as: UTF8.self)
    )
    let nonce = "0123456789abcdef"
    let mark = String(
      decoding: SingleFlightScripts.abandonMark(lease: keys.lease, nonce: Array(nonce.utf8)), as: UTF8.self)
    #expect(mark.hasPrefix(lease), "the mark is in the lease's slot")
    // The removal first: no lease to remove, so it leaves its mark, for a lease time.
    let removed = try await server.command(
      "EVAL", SingleFlightScripts.abandon.source, "2", lease, mark, nonce, "channel", "sender", "k", "300000")
    #expect(removed == .integer(0))
    guard case .integer(let markLeft) = try await server.command("PTTL", mark) else {
      Issue.record("the mark has no time to live")
      return
    }
    #expect(markLeft > 0 && markLeft <= 300_000)
    // Then the claim: nothing granted, and the mark is spent. (Its lease time is short, so that
    // without the mark the instance below would wait 5 s for the stranded lease, not hang.)
    let claimed = try await server.command(
      "EVAL", SingleFlightScripts.claim.source, "4", value, lease, version, mark, "", "", "5000", "600000", nonce, "")
    #expect(claimed == .array([.integer(4)]))
    #expect(try await server.command("EXISTS", lease) == .integer(0))
    #expect(try await server.command("EXISTS", mark) == .integer(0))
    // Another instance claims the key and loads at once.
    let b = try FleetInstance("b", server: server)
    b.origin.open()
    #expect(try await b.cache.value(for: "k") == Data("b k".utf8))
    #expect(b.origin.callCount == 1)
  }

  @Test(
    "a load completed by a cancelled task, or cancelled while its fill waits in Redis, is stored and its lease ends")
  func completionIgnoresCancellation() async throws {
    let server = try await RedisServer.start()
    var configuration = RedisLayer<String, Data>.Configuration(endpoint: server.endpoint)
    configuration.operationTimeout = .seconds(300)
    configuration.singleFlight = RedisSingleFlight(leaseTime: .seconds(300))
    let redis = try RedisLayer<String, Data>(configuration: configuration, namespace: "fleet")
    let coordinator = try #require(redis.loadCoordinator)
    func lease(_ key: String) -> String { String(decoding: redis.companionKeys(of: key).lease, as: UTF8.self) }

    // Cancelled before it completes.
    guard case .granted(let first) = try await coordinator.claim("a", supersedes: nil) else {
      Issue.record("no lease granted")
      return
    }
    let cancelledFirst = Task {
      withUnsafeCurrentTask { $0?.cancel() }
      return await coordinator.complete("a", token: first, with: .success(CacheEntry(Data("A".utf8))))
    }
    #expect(await cancelledFirst.value == .stored)
    #expect(try await server.command("EXISTS", lease("a")) == .integer(0))

    // Cancelled while its fill waits in a server paused for writes.
    guard case .granted(let second) = try await coordinator.claim("b", supersedes: nil) else {
      Issue.record("no lease granted")
      return
    }
    try await server.expectOK("CLIENT", "PAUSE", "60000", "WRITE")
    let cancelledMidway = Task {
      await coordinator.complete("b", token: second, with: .success(CacheEntry(Data("B".utf8))))
    }
    await eventually { redis.commandsInFlight == 1 }
    cancelledMidway.cancel()
    try await server.expectOK("CLIENT", "UNPAUSE")
    #expect(await cancelledMidway.value == .stored)
    #expect(try await server.command("EXISTS", lease("b")) == .integer(0))

    // Both values are there for the others, without a load.
    let other = try FleetInstance("other", server: server)
    #expect(try await other.cache.value(for: "a") == Data("A".utf8))
    #expect(try await other.cache.value(for: "b") == Data("B".utf8))
    #expect(other.origin.callCount == 0)
  }

  @Test("waits for a subscription that does not open end by their time or cancellation, and leave nothing behind")
  func subscriptionWaitsLeaveNothing() async throws {
    let server = try await RedisServer.start()
    var configuration = RedisLayer<String, Data>.Configuration(endpoint: server.endpoint)
    configuration.operationTimeout = .seconds(300)
    configuration.singleFlight = RedisSingleFlight()
    // Nothing is answered: the subscription cannot open.
    server.freeze()
    let redis = try RedisLayer<String, Data>(configuration: configuration, namespace: "fleet")
    let subscription = try #require(redis.subscription)
    for limit in [Duration.zero, .microseconds(50), .milliseconds(1), .milliseconds(2)] {
      for _ in 0..<10 { #expect(await subscription.waitUntilSubscribed(for: limit) == .timedOut) }
    }
    let cancelled = (0..<10).map { _ in Task { await subscription.waitUntilSubscribed(for: .seconds(300)) } }
    for task in cancelled { task.cancel() }
    for task in cancelled { #expect(await task.value == .unavailable) }
    #expect(!subscription.isSubscribed)
    #expect(subscription.recordedWaits == 0)
    server.thaw()
    #expect(await subscription.waitUntilSubscribed(for: .seconds(300)) == .subscribed)
    #expect(subscription.isSubscribed)
    #expect(subscription.recordedWaits == 0)
  }

  @Test("bad single-flight settings are refused, naming the setting")
  func invalidSettings() throws {
    var configuration = RedisLayer<String, Data>.Configuration()
    configuration.singleFlight = RedisSingleFlight(leaseTime: .milliseconds(10))
    #expect {
      try RedisLayer<String, Data>(configuration: configuration)
    } throws: { ($0 as? AsyncCacheError)?.message.contains("singleFlight.leaseTime") == true }
    configuration.singleFlight = RedisSingleFlight(channel: "")
    #expect {
      try RedisLayer<String, Data>(configuration: configuration)
    } throws: { ($0 as? AsyncCacheError)?.message.contains("singleFlight.channel") == true }
    configuration.singleFlight = RedisSingleFlight(channel: "same")
    configuration.invalidation = RedisInvalidation(channel: "same")
    #expect {
      try RedisLayer<String, Data>(configuration: configuration)
    } throws: { ($0 as? AsyncCacheError)?.message.contains("must differ") == true }
    // Server-assisted mode does not use the invalidation channel.
    configuration.invalidation = RedisInvalidation(mode: .serverAssisted, channel: "same")
    _ = try RedisLayer<String, Data>(configuration: configuration)
    // Another namespace's default channel of the other kind.
    configuration.invalidation = nil
    configuration.singleFlight = RedisSingleFlight(channel: "asynccache:invalidations:users")
    #expect {
      try RedisLayer<String, Data>(configuration: configuration)
    } throws: { ($0 as? AsyncCacheError)?.message.contains("named like an invalidation channel") == true }
    configuration.singleFlight = RedisSingleFlight()
    configuration.invalidation = RedisInvalidation(channel: "asynccache:loads:users")
    #expect {
      try RedisLayer<String, Data>(configuration: configuration)
    } throws: { ($0 as? AsyncCacheError)?.message.contains("named like a load channel") == true }
  }
}

@Suite("Single flight's building blocks")
struct SingleFlightPartsTests {
  @Test("SHA-1 matches the standard's test vectors")
  func sha1() {
    #expect(SHA1.hexDigest(of: []) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
    #expect(SHA1.hexDigest(of: Array("abc".utf8)) == "a9993e364706816aba3e25717850c26c9cd0d89d")
    #expect(
      SHA1.hexDigest(of: Array("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq".utf8))
        == "84983e441c3bd26ebaae4aa1f95129e5e54670f1")
    #expect(
      SHA1.hexDigest(of: [UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000))
        == "34aa973cd4c4daa4f61eeb2bdbad27316534016f")
  }

  @Test("every slot has a tag that hashes to it")
  func slotTags() {
    #expect(ClusterSlot.tags.count == ClusterSlot.count)
    for (slot, tag) in ClusterSlot.tags.enumerated() {
      #expect(Int(ClusterSlot.of(Array("{\(tag)}anything".utf8))) == slot)
    }
  }

  @Test(
    "a key's lease and version share its slot and are never a namespace's key",
    arguments: [
      "plain", "a:b", "{tag}x", "x}y{", "back\\slash", "ünïcode", "",
    ])
  func companionKeys(key: String) throws {
    for namespace in ["ns", "a:b", "{ns}", "n\\s"] {
      let layer = try RedisLayer<String, Data>(namespace: namespace)
      let keys = layer.companionKeys(of: key)
      #expect(ClusterSlot.of(keys.lease) == ClusterSlot.of(keys.value))
      #expect(ClusterSlot.of(keys.version) == ClusterSlot.of(keys.value))
      #expect(keys.lease != keys.version)
      // No unescaped ":": every stored key has one after its namespace.
      for companion in [keys.lease, keys.version] {
        var index = 0
        while index < companion.count {
          if companion[index] == UInt8(ascii: "\\") {
            index += 2
            continue
          }
          #expect(companion[index] != UInt8(ascii: ":"))
          index += 1
        }
      }
    }
  }

  @Test("announcements read back what was written, and refuse what is not one")
  func announcements() {
    let sender = InvalidationMessage.makeSender()
    for announcement in [
      LoadAnnouncement(kind: .done, token: 1_764_230_000_123_456, sender: sender, key: "a key: with spaces"),
      LoadAnnouncement(kind: .released, token: 7, sender: sender, key: ""),
      LoadAnnouncement(kind: .failed, token: 9, sender: sender, key: "k", reason: "HTTP 503 Service Unavailable"),
    ] {
      #expect(LoadAnnouncement(announcement.encoded) == announcement)
    }
    #expect(LoadAnnouncement(Array("D 1 short 1 k".utf8)) == nil)
    #expect(LoadAnnouncement(Array("X 1 \(String(decoding: sender, as: UTF8.self)) 1 k".utf8)) == nil)
    #expect(LoadAnnouncement(Array("D 1 \(String(decoding: sender, as: UTF8.self)) 9 k".utf8)) == nil)
  }

  @Test("an envelope keeps the version a load stored it under, beside its expiry")
  func envelopeVersion() throws {
    let bytes = RedisEnvelope.encode(payload: [1, 2, 3], expiresAt: 42, version: 7)
    let decoded = try RedisEnvelope.decode(bytes)
    #expect(decoded.expiresAt == 42 && decoded.version == 7 && Array(bytes[decoded.payload]) == [1, 2, 3])
    let plain = try RedisEnvelope.decode(RedisEnvelope.encode(payload: [9], expiresAt: nil))
    #expect(plain.expiresAt == nil && plain.version == nil && plain.payload == 3..<4)
    #expect(plain.metadata.isEmpty)
  }

  @Test("an envelope carries metadata after the version; without metadata its bytes are as before")
  func envelopeMetadata() throws {
    #expect(RedisEnvelope.encode(payload: [9], expiresAt: nil) == [0xAC, 1, 0, 9])
    // An envelope of the format before metadata, with an expiry and a version: read as it was,
    // and written the same.
    let old: [UInt8] = [0xAC, 1, 3, 0, 0, 0, 0, 0, 0, 0, 42, 0, 0, 0, 0, 0, 0, 0, 7, 1, 2, 3]
    let read = try RedisEnvelope.decode(old)
    #expect(
      read.expiresAt == 42 && read.version == 7 && read.metadata.isEmpty && Array(old[read.payload]) == [1, 2, 3])
    #expect(RedisEnvelope.encode(payload: [1, 2, 3], expiresAt: 42, version: 7) == old)
    let metadata = EntryMetadata(entityTag: "e", tags: ["t"])
    let stored = try metadata.encoded()
    let bytes = RedisEnvelope.encode(payload: [1, 2], expiresAt: 42, version: 7, metadata: stored)
    let decoded = try RedisEnvelope.decode(bytes)
    #expect(decoded.expiresAt == 42 && decoded.version == 7 && decoded.metadata == metadata)
    #expect(Array(bytes[decoded.payload]) == [1, 2])
    // The single-flight scripts read the expiry at bytes 3-10 and the version after it.
    #expect(bytes[2] == 7 && Array(bytes[3..<11]) == [0, 0, 0, 0, 0, 0, 0, 42])
    // Cut inside the metadata, or with metadata that does not decode: malformed, never misread.
    for end in 19..<(bytes.count - 2) {
      #expect(throws: RedisEnvelope.Malformed.self) { try RedisEnvelope.decode(Array(bytes[..<end])) }
    }
    var damaged = bytes
    damaged[21] = 99  // The metadata's format version.
    #expect(throws: RedisEnvelope.Malformed.self) { try RedisEnvelope.decode(damaged) }
  }
}
