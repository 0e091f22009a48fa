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
  static let operationTimeout = Duration.milliseconds(300)

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
    #expect(isUnreachable(b))
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
}
