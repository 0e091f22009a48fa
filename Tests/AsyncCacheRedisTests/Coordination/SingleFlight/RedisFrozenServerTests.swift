import AsyncCache
import AsyncCacheTesting
import Foundation
import TestSupport
import Testing

@testable import AsyncCacheRedis

/// A Redis server frozen (`SIGSTOP`: its sockets stay open, nothing is answered) in the middle of
/// a fleet's load. The leases last far longer than the tests may run: a test that waited one out
/// would fail by its time limit.
@Suite("Single flight with a frozen Redis", .redisServer, .timeLimit(.minutes(3)))
struct RedisFrozenServerTests {
  static let leaseTime = Duration.seconds(600)
  /// How long each test's stall lasts, about: long enough that a host running every suite at
  /// once answers the commands that must not time out (the handshakes, the claims) within it.
  static let operationTimeout = Duration.seconds(1)

  func instance(_ name: String, _ server: RedisServer) throws -> FleetInstance {
    try FleetInstance(name, server: server, leaseTime: Self.leaseTime, operationTimeout: Self.operationTimeout)
  }

  func isUnreachable(_ instance: FleetInstance) -> Bool {
    instance.redis.singleFlight?.isUnreachable.load(ordering: .acquiring) == true
  }

  @Test("a waiting instance finds out that Redis stopped answering and loads on its own, without waiting out the lease")
  func waiterLoadsAlone() async throws {
    let server = try await RedisServer.start()
    defer { server.thaw() }
    let a = try instance("a", server)
    let b = try instance("b", server)
    let holder = requests(1, for: "k", to: a)
    await a.origin.waitForFetches(1, for: "k")
    let waiter = requests(1, for: "k", to: b)
    await b.waitUntilWaiting()
    server.freeze()

    await b.origin.waitForFetches(1, for: "k")
    #expect(b.origin.release("k") == 1)
    #expect(try await waiter[0].value == Data("b k".utf8))
    #expect(b.redis.statistics.uncoordinatedLoads == 1)
    // Found by a probe, or by the claim itself when the freeze caught it in flight (B counts as
    // waiting from the moment it asks): then the probe sent with it times out a moment later.
    await eventually { isUnreachable(b) }
    // While Redis does not answer, new claims are uncoordinated at once.
    let next = requests(1, for: "other", to: b)
    await b.origin.waitForFetches(1, for: "other")
    #expect(b.redis.statistics.uncoordinatedLoads == 2)
    #expect(b.origin.release("other") == 1)
    #expect(try await next[0].value == Data("b other".utf8))

    server.thaw()
    await eventually { !isUnreachable(a) && !isUnreachable(b) }
    #expect(a.origin.release("k") == 1)
    #expect(try await holder[0].value == Data("a k".utf8))
  }

  @Test("the holder answers its requests without waiting for a fill that cannot land, and fills once Redis is back")
  func holderDoesNotWaitForItsFill() async throws {
    let server = try await RedisServer.start()
    defer { server.thaw() }
    let a = try instance("a", server)
    let holder = requests(3, for: "k", to: a)
    await a.origin.waitForFetches(1, for: "k")
    server.freeze()
    // Holding a lease, the holder watches the server closely, and sees it stop answering.
    await eventually { isUnreachable(a) }
    #expect(a.origin.release("k") == 1)
    for request in holder { #expect(try await request.value == Data("a k".utf8)) }
    #expect(a.redis.singleFlight?.completionsNotAwaited.load(ordering: .relaxed) == 1)
    #expect(a.memory.value(for: "k") == Data("a k".utf8))

    // Once Redis answers again, the fill lands under the lease: another instance reads it,
    // without asking its origin, and without waiting for the lease to run out.
    server.thaw()
    let c = try instance("c", server)
    #expect(try await c.cache.value(for: "k") == Data("a k".utf8))
    #expect(c.origin.callCount == 0)
    #expect(try await c.redis.value(for: "k") == Data("a k".utf8))
  }

  @Test("after a freeze the fleet coordinates again: one origin call for a cold key")
  func coordinationResumesAfterAFreeze() async throws {
    let server = try await RedisServer.start()
    defer { server.thaw() }
    let a = try instance("a", server)
    let b = try instance("b", server)
    // A load in flight makes each instance watch the server, and find it frozen.
    let first = requests(1, for: "warm", to: a)
    await a.origin.waitForFetches(1, for: "warm")
    let second = requests(1, for: "warm", to: b)
    await b.waitUntilWaiting()
    server.freeze()
    await eventually { isUnreachable(a) && isUnreachable(b) }
    // B gave up waiting and loads on its own.
    await b.origin.waitForFetches(1, for: "warm")
    server.thaw()
    await eventually { !isUnreachable(a) && !isUnreachable(b) }
    #expect(a.origin.release("warm") == 1)
    #expect(b.origin.release("warm") == 1)
    _ = try await first[0].value
    _ = try await second[0].value

    let callsOfB = b.origin.callCount
    let fromA = requests(1, for: "cold", to: a)
    await a.origin.waitForFetches(1, for: "cold")
    let fromB = requests(1, for: "cold", to: b)
    await b.waitUntilWaiting()
    #expect(a.origin.release("cold") == 1)
    #expect(try await fromA[0].value == Data("a cold".utf8))
    #expect(try await fromB[0].value == Data("a cold".utf8))
    #expect(b.origin.callCount == callsOfB, "B waited for A's load")
  }

  @Test("a completion deferred while Redis was unreachable ends with the layer's close: nothing of it is left")
  func deferredCompletionEndsWithClose() async throws {
    let server = try await RedisServer.start()
    let clock = ManualClock()
    var configuration = RedisLayer<String, Data>.Configuration(endpoint: server.endpoint)
    configuration.singleFlight = RedisSingleFlight(leaseTime: .seconds(5))
    configuration.clock = clock
    let redis = try RedisLayer<String, Data>(configuration: configuration, namespace: "deferred")
    let coordinator = try #require(redis.loadCoordinator)
    guard case .granted(let token) = try await coordinator.claim("k", supersedes: nil) else {
      Issue.record("the lease of k was not granted")
      return
    }
    // As after a health check that Redis did not answer in time.
    redis.singleFlight?.markUnreachable()
    let completion = await coordinator.complete("k", token: token, with: .success(CacheEntry(Data("v".utf8))))
    #expect(completion == .notStored)
    try await redis.close()
    // Everything the layer started ends with its close: nothing sleeps on its clock any more.
    while clock.sleeperCount > 0 && !Task.isCancelled { await Task.yield() }
    #expect(clock.sleeperCount == 0)
  }

  @Test("a short stall while a load waits makes the instance load alone, and keeps its subscription and its memory")
  func shortStallKeepsTheSubscription() async throws {
    let server = try await RedisServer.start()
    defer { server.thaw() }
    // The times a subscription closed or could not open.
    let interruptions = Locked(0)
    func instance(_ name: String) throws -> (
      MemoryLayer<String, Data>, RedisLayer<String, Data>, LoadingCache<String, Data>, GatedFetcher<String, Data>
    ) {
      var configuration = RedisLayer<String, Data>.Configuration(endpoint: server.endpoint)
      configuration.operationTimeout = Self.operationTimeout
      configuration.singleFlight = RedisSingleFlight(leaseTime: Self.leaseTime)
      // The subscription's own health check (a `PING` on it, every interval) closes it when the
      // server does not answer in time: that is right, and not what this test is about. Not due
      // while the test runs, so that a stall that spans one (or a loaded host that answers late)
      // cannot decide it: only the probes, through the layer's connections, watch the server.
      configuration.invalidation = RedisInvalidation(healthCheckInterval: Self.leaseTime)
      configuration.eventHandler = { event in
        if case .invalidationsInterrupted = event { interruptions.withLock { $0 += 1 } }
      }
      let memory = try MemoryLayer<String, Data>()
      let redis = try RedisLayer<String, Data>(configuration: configuration, namespace: "stall")
      try redis.forwardInvalidations(to: [memory])
      let origin = GatedFetcher<String, Data> { key in Data("\(name) \(key)".utf8) }
      let cache = try LoadingCache(tiers: [.init(memory), .init(redis, failurePolicy: .skip)], origin: origin)
      return (memory, redis, cache, origin)
    }
    let (_, redisA, cacheA, originA) = try instance("a")
    let (memoryB, redisB, cacheB, originB) = try instance("b")
    // Subscribed, and done with any attempt that failed on the way (a loaded host may not answer
    // the first within the operation timeout): the resubscription that followed has emptied the
    // memory layer already.
    await eventually { redisA.isReceivingInvalidations && redisB.isReceivingInvalidations }
    let interruptionsBefore = interruptions.withLock { $0 }
    try memoryB.insert(Data("warm".utf8), for: "warm")
    let holder = Task { try await cacheA.value(for: "k") }
    await originA.waitForFetches(1, for: "k")
    let waiter = Task { try await cacheB.value(for: "k") }
    await eventually { redisB.singleFlight?.waits.count == 1 }
    // Redis stalls (a slow command, a fork) until B finds out, then goes on.
    server.freeze()
    await eventually { redisB.singleFlight?.isUnreachable.load(ordering: .acquiring) == true }
    server.thaw()
    // B loads alone, as it should with Redis not answering…
    await originB.waitForFetches(1, for: "k")
    #expect(originB.release("k") == 1)
    #expect(try await waiter.value == Data("b k".utf8))
    // …and sees Redis answer again through its probes, with its subscription never closed: no
    // message was lost, so its memory layer was not emptied.
    await eventually { redisB.singleFlight?.isUnreachable.load(ordering: .acquiring) == false }
    #expect(interruptions.withLock { $0 } == interruptionsBefore)
    #expect(memoryB.value(for: "warm") == Data("warm".utf8))
    #expect(originA.release("k") == 1)
    _ = try await holder.value
  }
}
