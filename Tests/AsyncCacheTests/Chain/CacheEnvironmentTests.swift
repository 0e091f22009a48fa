import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import TestSupport
import Testing

@testable import AsyncCache

@Suite("One clock and one logger per cache", .timeLimit(.minutes(3)))
struct CacheEnvironmentTests {
  private func disk(in directory: TemporaryDirectory, clock: (any CacheClock)? = nil) async throws -> DiskLayer<
    String, Data
  > {
    try await DiskLayer(
      directory: directory.url, configuration: .init(clock: clock), keyEncoding: .string, valueCoder: .data)
  }

  @Test("layers created without a clock follow the cache's: entries expire by it, in every layer")
  func layersFollowTheCachesClock() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    // The manual clock starts in January 2026, long before the wall clock's today: a layer left
    // on the wall clock would take every entry the cache writes for expired.
    let clock = ManualClock()
    let memory = try MemoryLayer<String, Data>()
    let disk = try await disk(in: directory)
    let calls = Locked(0)
    let origin = ClosureFetcher<String, Data> { key in
      calls.withLock { $0 += 1 }
      return Data(key.utf8)
    }
    let cache = try LoadingCache(
      layers: [memory, disk], origin: origin, configuration: .init(timeToLive: .seconds(60), clock: clock))

    #expect(memory.clock is ManualClock)
    #expect(disk.followedClock.clock is ManualClock)
    _ = try await cache.value(for: "k")
    #expect(try await disk.entry(for: "k")?.value == Data("k".utf8), "the disk keeps what the cache wrote")
    memory.removeAll()
    _ = try await cache.value(for: "k")
    #expect(calls.withLock { $0 } == 1, "the second request is served by the disk")

    clock.advance(by: .seconds(61))
    #expect(memory.entry(for: "k") == nil)
    #expect(try await disk.entry(for: "k") == nil, "the disk reads expiry on the cache's clock")
  }

  @Test("a layer given its own clock or logger keeps it")
  func aGivenClockIsKept() async throws {
    let own = ManualClock(now: CacheInstant(secondsSince1970: 1_000))
    let ownLogs = RecordingLogHandler()
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: own))
    let chain = try CacheChain<String, Int>([.init(memory)], configuration: .init(logger: ownLogs.logger()))
    let cacheLogs = RecordingLogHandler()
    _ = try LoadingCache(
      chain: chain, origin: ClosureFetcher { _ in 0 },
      configuration: .init(clock: ManualClock(), logger: cacheLogs.logger()))
    #expect((memory.clock as? ManualClock) === own)
    #expect(chain.followedLogger.value.handler as? RecordingLogHandler === ownLogs)
  }

  @Test("a chain built by the user logs with the cache's logger, and hands clock and logger to nested chains")
  func chainsFollowTheCache() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let memory = try MemoryLayer<String, Data>()
    let disk = try await disk(in: directory)
    let failing = FakeLayer<String, Data>()
    let inner = try CacheChain<String, Data>([.init(disk), .init(failing, failurePolicy: .skip)])
    let outer = try CacheChain<String, Data>([.init(memory), .init(inner)])
    let logs = RecordingLogHandler()
    let clock = ManualClock()
    let cache = try LoadingCache(
      chain: outer, origin: ClosureFetcher { Data($0.utf8) },
      configuration: .init(clock: clock, logger: logs.logger(minimumLevel: .warning)))

    #expect(memory.clock is ManualClock && disk.followedClock.clock is ManualClock)
    #expect(inner.followedLogger.value.handler as? RecordingLogHandler === logs)
    #expect(disk.followedLogger.value.handler as? RecordingLogHandler === logs)

    failing.fail(.lookup, with: TestError("down"))
    _ = try await cache.value(for: "k")
    #expect(
      logs.records.contains { $0.level == .warning && $0.source == "CacheChain" && $0.message.contains("FakeLayer") },
      "the nested chain's skipped layer is logged through the cache's logger")
  }

  @Test("a chain given a clock and a logger hands them to its layers; a cache's later ones do not replace them")
  func theFirstEnvironmentWins() async throws {
    let chainClock = ManualClock(now: CacheInstant(secondsSince1970: 1_000))
    let chainLogs = RecordingLogHandler()
    let memory = try MemoryLayer<String, Int>()
    let chain = try CacheChain<String, Int>(
      [.init(memory.coalescingLookups())], configuration: .init(logger: chainLogs.logger(), clock: chainClock))
    #expect((memory.clock as? ManualClock) === chainClock, "through the operator, as the chain is created")
    _ = try LoadingCache(
      chain: chain, origin: ClosureFetcher { _ in 0 },
      configuration: .init(clock: ManualClock(), logger: RecordingLogHandler().logger()))
    #expect((memory.clock as? ManualClock) === chainClock)
    #expect(chain.followedLogger.value.handler as? RecordingLogHandler === chainLogs)
  }

  @Test("a cache on the wall clock hands it down too: its layers are its own; a second cache cannot take them over")
  func theWallClockIsHandedDownToo() throws {
    let memory = try MemoryLayer<String, Int>()
    _ = try LoadingCache(layers: [memory], origin: ClosureFetcher { _ in 0 })
    #expect(memory.clock is WallClock)
    _ = try LoadingCache(
      layers: [memory], origin: ClosureFetcher { _ in 0 }, configuration: .init(clock: ManualClock()))
    #expect(memory.clock is WallClock, "the first cache's clock is kept")
  }

  @Test("a cache given no clock over a chain given one takes the chain's: one clock for both")
  func aCacheTakesTheChainsClock() async throws {
    let clock = ManualClock()
    let memory = try MemoryLayer<String, Int>()
    let chain = try CacheChain<String, Int>([.init(memory)], configuration: .init(clock: clock))
    let cache = try LoadingCache(
      chain: chain, origin: ClosureFetcher { _ in 1 }, configuration: .init(timeToLive: .seconds(60)))
    #expect((cache.configuration.clock as? ManualClock) === clock)
    _ = try await cache.value(for: "k")
    clock.advance(by: .seconds(61))
    #expect(cache.cachedValue(for: "k") == nil, "the entry expires on the one clock")
  }

  @Test("a followed wall clock is read directly (hits read the published time); another clock is read through it")
  func followedClockReads() {
    let followed = FollowedClock(given: nil)
    #expect(followed.isWallClock)
    let manual = ManualClock()
    #expect(followed.follow(manual))
    #expect(!followed.isWallClock)
    #expect(followed.now == manual.now && followed.coarseNow == manual.now)
    #expect(!followed.follow(ManualClock()), "the first clock followed wins")
    #expect(!FollowedClock(given: manual).follow(WallClock()), "a given clock is kept")
  }

  @Test(
    "an entry that arrives at a layer already expired by its own clock is reported and logged, never dropped silently")
  func expiredArrivalsAreReported() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let suite = UserDefaultsLayerTests.TestSuite()
    defer { suite.remove() }
    // Each layer is given the wall clock; the cache's manual clock is ten months behind it.
    let memory = try MemoryLayer<String, Data>(configuration: .init(clock: WallClock()))
    let disk = try await disk(in: directory, clock: WallClock())
    let defaults = try UserDefaultsLayer<String, Data>(
      suiteName: suite.name, configuration: .init(clock: WallClock()), valueCoder: .data)
    let logs = RecordingLogHandler()
    let cache = try LoadingCache(
      layers: [memory, disk, defaults], origin: ClosureFetcher { Data($0.utf8) },
      configuration: .init(timeToLive: .seconds(60), clock: ManualClock(), logger: logs.logger()))
    let events = memory.events()

    _ = try await cache.value(for: "a")
    _ = try await cache.value(for: "b")

    #expect(memory.statistics.evictions[.expiredOnArrival] == 2)
    #expect(
      await events.drained().map(\.description) == [
        "eviction a from layer 0: expiredOnArrival", "eviction b from layer 0: expiredOnArrival",
      ])
    for source in ["MemoryLayer", "DiskLayer", "UserDefaultsLayer"] {
      let records = logs.records.filter { $0.source == source }
      #expect(records.map(\.level) == [.warning, .debug], "\(source): a warning once, then debug records")
      let first = try #require(records.first)
      #expect(first.message.contains("arrived already expired by the layer's clock and was not stored"))
      #expect(first.message.contains("it expired at 2026-01-01T00:01:00Z"))
      #expect(first.metadata["key"] == "a" && first.metadata["expiresAt"] == "2026-01-01T00:01:00Z")
    }
  }
}
