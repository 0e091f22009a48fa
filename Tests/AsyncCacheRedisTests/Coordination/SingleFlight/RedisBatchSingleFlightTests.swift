import AsyncCache
import AsyncCacheTesting
import Foundation
import TestSupport
import Testing

@testable import AsyncCacheRedis

/// One instance of a fleet whose bulk requests load through a batch origin: a memory layer over
/// a Redis layer with single flight.
struct BatchFleetInstance {
  let memory: MemoryLayer<String, Data>
  let redis: RedisLayer<String, Data>
  let cache: LoadingCache<String, Data>

  init(_ name: String, server: RedisServer, origin: GatedBatchOrigin<String, Data>, leaseTime: Duration = .seconds(30))
    throws
  {
    var configuration = RedisLayer<String, Data>.Configuration()
    configuration.servers = .standalone(server.endpoint)
    configuration.singleFlight = RedisSingleFlight(leaseTime: leaseTime)
    memory = try MemoryLayer<String, Data>()
    redis = try RedisLayer(configuration: configuration, namespace: "batch-fleet")
    cache = try LoadingCache(
      tiers: [.init(memory), .init(redis, failurePolicy: .skip)],
      origin: ClosureFetcher { key in throw AsyncCacheError(code: .notFound, message: "no single origin: \(key)") },
      batchOrigin: origin.fetcher(for: name))
  }
}

@Suite("Single flight of bulk requests through a batch origin", .redisServer, .timeLimit(.minutes(3)))
struct RedisBatchSingleFlightTests {
  static let keys = (0..<10).map { "cold-\($0)" }

  @Test("8 instances × a bulk request of 10 cold keys: each key is loaded once for the fleet, in one batch call")
  func eightInstancesLoadEachKeyOnce() async throws {
    let server = try await RedisServer.start()
    let origin = GatedBatchOrigin<String, Data> { instance, key in Data("\(instance) \(key)".utf8) }
    let fleet = try (0..<8).map { try BatchFleetInstance("i\($0)", server: server, origin: origin) }
    let first = Task { await fleet[0].cache.values(for: Self.keys) }
    await eventually { origin.calls.count == 1 }
    var others: [Task<LoadingCache<String, Data>.BulkValues, Never>] = []
    for instance in fleet.dropFirst() {
      others.append(Task { await instance.cache.values(for: Self.keys) })
      // Each instance either waits for the holder's ten leases or (wrongly) asks its origin.
      await eventually { instance.redis.singleFlight?.waits.count == Self.keys.count || origin.calls.count > 1 }
    }
    #expect(origin.calls.count == 1, "only the first instance asks the origin")
    origin.open()

    let expected = Dictionary(uniqueKeysWithValues: Self.keys.map { ($0, Data("i0 \($0)".utf8)) })
    for task in [first] + others {
      let bulk = await task.value
      #expect(bulk.values == expected)
      #expect(bulk.failures.isEmpty)
    }
    #expect(origin.asksPerKey == Dictionary(uniqueKeysWithValues: Self.keys.map { ($0, 1) }))
    let calls = origin.calls
    try #require(calls.count == 1)
    #expect(calls[0].caller == "i0" && Set(calls[0].keys) == Set(Self.keys), "one call for the whole batch")
    #expect(fleet.reduce(0) { $0 + $1.redis.statistics.leasesGranted } == Self.keys.count)
    #expect(fleet.reduce(0) { $0 + $1.redis.statistics.fillsRefused } == 0)
    for instance in fleet {
      for key in Self.keys { #expect(instance.memory.value(for: key) == expected[key]) }
    }
  }

  @Test("a batch's fill after a newer write from another instance is refused for that key, and stored nowhere")
  func batchFillAfterWriteIsFenced() async throws {
    let server = try await RedisServer.start()
    let origin = GatedBatchOrigin<String, Data> { instance, key in Data("\(instance) \(key)".utf8) }
    let a = try BatchFleetInstance("a", server: server, origin: origin)
    let b = try BatchFleetInstance("b", server: server, origin: origin)
    let bulk = Task { await a.cache.values(for: ["k1", "k2"]) }
    await eventually { origin.calls.count == 1 }
    try await b.cache.insert(Data("newer".utf8), for: "k1")
    origin.open()

    // The request that asked before the write gets what it loaded…
    let loaded = await bulk.value
    #expect(loaded.values == ["k1": Data("a k1".utf8), "k2": Data("a k2".utf8)])
    // …but the fill of k1 is refused: Redis keeps the write, A's memory layer keeps nothing.
    #expect(a.redis.statistics.fillsRefused == 1)
    #expect(try await b.redis.value(for: "k1") == Data("newer".utf8))
    #expect(a.memory.value(for: "k1") == nil)
    #expect(try await a.cache.value(for: "k1") == Data("newer".utf8))
    // k2 was not written meanwhile: stored in both layers.
    #expect(try await b.redis.value(for: "k2") == Data("a k2".utf8))
    #expect(a.memory.value(for: "k2") == Data("a k2".utf8))
  }

  @Test("a batch loads the keys whose leases it got at once, without waiting for those another instance holds")
  func grantedKeysAreNotHeldBackByHeldOnes() async throws {
    let server = try await RedisServer.start()
    let origin = GatedBatchOrigin<String, Data> { instance, key in Data("\(instance) \(key)".utf8) }
    origin.open()
    let a = try BatchFleetInstance("a", server: server, origin: origin)
    let b = try BatchFleetInstance("b", server: server, origin: origin)
    // Another instance holds the lease of k2 (a load of its own, in flight).
    let coordinator = try #require(b.redis.loadCoordinator)
    guard case .granted(let token) = try await coordinator.claim("k2", supersedes: nil) else {
      Issue.record("the lease of k2 was not granted")
      return
    }
    let bulk = Task { await a.cache.values(for: ["k1", "k2"]) }
    await eventually { a.redis.singleFlight?.waits.count == 1 }
    // A waits for k2's holder, and has loaded k1 meanwhile: B's request finds it. (Were A's
    // batch to hold k1's lease until k2 came, B would wait for the lease time and then load
    // k1 itself, from its single origin, which fails.)
    #expect(try await b.cache.value(for: "k1") == Data("a k1".utf8))
    let completion = await coordinator.complete("k2", token: token, with: .success(CacheEntry(Data("b k2".utf8))))
    #expect(completion == .stored)

    let loaded = await bulk.value
    #expect(loaded.values == ["k1": Data("a k1".utf8), "k2": Data("b k2".utf8)])
    #expect(loaded.failures.isEmpty)
    #expect(origin.asksPerKey == ["k1": 1])
  }
}
