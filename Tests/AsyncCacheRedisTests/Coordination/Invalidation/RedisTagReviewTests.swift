import AsyncCache
import AsyncCacheTesting
import Foundation
import TestSupport
import Testing

@testable import AsyncCacheRedis

// Review of "Tags" (item 4) across instances: each failure is a finding.
@Suite("Tags: what a review broke, across instances", .redisServer, .timeLimit(.minutes(3)))
struct RedisTagReviewTests {
  /// A memory layer over a single-flight Redis layer; the origin answers `<name> <key>`.
  static func singleFlightInstance(_ name: String, server: RedisServer) throws -> (
    memory: MemoryLayer<String, Data>, redis: RedisLayer<String, Data>, cache: LoadingCache<String, Data>
  ) {
    var configuration = RedisLayer<String, Data>.Configuration(endpoint: server.endpoint)
    configuration.operationTimeout = .seconds(2)
    configuration.singleFlight = RedisSingleFlight(leaseTime: .seconds(60))
    let memory = try MemoryLayer<String, Data>()
    let redis = try RedisLayer(configuration: configuration, namespace: "review")
    let cache = try LoadingCache(
      tiers: [.init(memory), .init(redis, failurePolicy: .skip)],
      origin: ClosureFetcher<String, Data> { key in Data("\(name) \(key)".utf8) })
    return (memory, redis, cache)
  }

  @Test("single flight does not answer an entry dead by tag, on any instance")
  func singleFlightAnswersDeadEntry() async throws {
    let server = try await RedisServer.start()
    let a = try Self.singleFlightInstance("a", server: server)
    try await a.cache.insert(Data("old".utf8), for: "k", tags: ["t"])
    try await a.cache.invalidate(tag: "t")
    // Another instance (or `a` after a restart): its Redis layer holds the entry dead...
    let b = try Self.singleFlightInstance("b", server: server)
    #expect(try await b.redis.entry(for: "k") == nil)
    // ...but the single-flight claim finds the value in Redis and answers it as loadedElsewhere.
    let first = try await b.cache.value(for: "k")
    #expect(first == Data("b k".utf8), "answered the dead entry: \(String(decoding: first, as: UTF8.self))")
    let again = try await b.cache.value(for: "k")
    #expect(again == Data("b k".utf8), "and keeps answering it from memory: \(String(decoding: again, as: UTF8.self))")
  }
}
