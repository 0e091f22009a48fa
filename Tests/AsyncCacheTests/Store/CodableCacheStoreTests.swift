import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import TestSupport
import Testing

@testable import AsyncCache

/// The rules Hummingbird's `PersistDriver` documents, checked against ``CodableCacheStore``.
@Suite("CodableCacheStore: PersistDriver's rules", .timeLimit(.minutes(3)))
struct CodableCacheStoreTests {
  struct Session: Codable, Hashable, Sendable {
    var user: String
    var visits: Int
  }

  struct Duplicate: Error, Equatable {}

  private func makeStore(
    clock: ManualClock = ManualClock(), duplicateError: (@Sendable (String) -> any Error)? = nil
  ) throws -> CodableCacheStore {
    try CodableCacheStore(layers: [MemoryLayer<String, Data>()], clock: clock, duplicateError: duplicateError)
  }

  @Test("create stores a value; a second create of the key fails with the duplicate error, and keeps the first")
  func createFailsOnAnExistingKey() async throws {
    let store = try makeStore()
    try await store.create(key: "s", value: Session(user: "ada", visits: 1), expires: nil)
    let error = await #expect(throws: AsyncCacheError.self) {
      try await store.create(key: "s", value: Session(user: "bob", visits: 2), expires: nil)
    }
    #expect(error?.code == .duplicateKey && error?.message == "the key \"s\" holds a value already")
    #expect(try await store.get(key: "s", as: Session.self) == Session(user: "ada", visits: 1))

    let hummingbirdLike = try makeStore(duplicateError: { _ in Duplicate() })
    try await hummingbirdLike.create(key: "s", value: 1, expires: nil)
    await #expect(throws: Duplicate.self) { try await hummingbirdLike.create(key: "s", value: 2, expires: nil) }
  }

  @Test("of concurrent creates of one key, exactly one succeeds")
  func concurrentCreates() async throws {
    let store = try makeStore()
    let outcomes = await withTaskGroup(of: Bool.self) { group in
      for index in 0..<20 {
        group.addTask { (try? await store.create(key: "k", value: index, expires: nil)) != nil }
      }
      return await group.reduce(into: [Bool]()) { $0.append($1) }
    }
    #expect(outcomes.count { $0 } == 1)
  }

  @Test("a value expires after its duration; create then succeeds again")
  func expiry() async throws {
    let clock = ManualClock()
    let store = try makeStore(clock: clock)
    try await store.create(key: "k", value: "v", expires: .seconds(10))
    let (object, ttl) = try #require(try await store.getWithTTL(key: "k", as: String.self))
    #expect(object == "v" && ttl == .seconds(10))
    clock.advance(by: .seconds(9))
    #expect(try await store.getWithTTL(key: "k", as: String.self)?.ttl == .seconds(1))
    clock.advance(by: .seconds(1))
    #expect(try await store.get(key: "k", as: String.self) == nil)
    try await store.create(key: "k", value: "again", expires: nil)
    #expect(try await store.getWithTTL(key: "k", as: String.self)?.ttl == .some(nil))
  }

  @Test("set replaces a value; with expires nil it keeps the expiry the value had")
  func setKeepsTheExpiry() async throws {
    let clock = ManualClock()
    let store = try makeStore(clock: clock)
    try await store.set(key: "k", value: 1, expires: .seconds(30))
    clock.advance(by: .seconds(10))
    try await store.set(key: "k", value: 2, expires: nil)
    #expect(try await store.getWithTTL(key: "k", as: Int.self)?.object == 2)
    #expect(try await store.getWithTTL(key: "k", as: Int.self)?.ttl == .seconds(20))
    try await store.set(key: "k", value: 3, expires: .seconds(5))
    #expect(try await store.getWithTTL(key: "k", as: Int.self)?.ttl == .seconds(5))
    try await store.set(key: "new", value: 4, expires: nil)
    #expect(try await store.getWithTTL(key: "new", as: Int.self)?.ttl == .some(nil))
  }

  @Test("set with expires nil keeps 'for ever' even when the top layer caps what it holds")
  func setKeepsForEverUnderACappedTopLayer() async throws {
    let clock = ManualClock()
    let top = try MemoryLayer<String, Data>(configuration: .init(timeToLive: .seconds(60)))
    let store = try CodableCacheStore(layers: [top, MemoryLayer<String, Data>()], clock: clock)
    try await store.set(key: "k", value: 1, expires: nil)
    try await store.set(key: "k", value: 2, expires: nil)
    clock.advance(by: .seconds(61))
    #expect(try await store.getWithTTL(key: "k", as: Int.self)?.ttl == .some(nil))
    #expect(try await store.get(key: "k", as: Int.self) == 2)
    try await store.set(key: "j", value: 1, expires: .seconds(600))
    try await store.set(key: "j", value: 2, expires: nil)
    #expect(
      try await store.getWithTTL(key: "j", as: Int.self)?.ttl == .seconds(600), "the longest expiry a layer knows")
  }

  @Test("a store given no clock over a chain given one takes the chain's: values expire on it")
  func storeTakesTheChainsClock() async throws {
    let clock = ManualClock()
    let chain = try CacheChain<String, Data>(
      [.init(try MemoryLayer<String, Data>())], configuration: .init(clock: clock))
    let store = CodableCacheStore(chain: chain)
    #expect((store.clock as? ManualClock) === clock)
    try await store.set(key: "k", value: 1, expires: .seconds(60))
    clock.advance(by: .seconds(61))
    #expect(try await store.get(key: "k", as: Int.self) == nil)
  }

  @Test("get of a missing key, or of a value that is not of the type asked for, is nil")
  func getMissingOrMistyped() async throws {
    let store = try makeStore()
    #expect(try await store.get(key: "none", as: Session.self) == nil)
    try await store.set(key: "n", value: 42, expires: nil)
    #expect(try await store.get(key: "n", as: Session.self) == nil)
    #expect(try await store.get(key: "n", as: Int.self) == 42)
  }

  @Test("remove deletes the value; removing a missing key is fine")
  func remove() async throws {
    let store = try makeStore()
    try await store.set(key: "k", value: "v", expires: nil)
    try await store.remove(key: "k")
    try await store.remove(key: "k")
    #expect(try await store.get(key: "k", as: String.self) == nil)
  }

  @Test("values persist in a disk layer across stores, with their expiry; shutdown closes the layers")
  func persistsAndShutsDown() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let clock = ManualClock()
    func open() async throws -> CodableCacheStore {
      try CodableCacheStore(
        layers: [try await DiskLayer<String, Data>(directory: directory.url, keyEncoding: .string, valueCoder: .data)],
        clock: clock)
    }
    let first = try await open()
    try await first.set(key: "s", value: Session(user: "ada", visits: 3), expires: .seconds(60))
    try await first.shutdown()
    await #expect { try await first.get(key: "s", as: Session.self) } throws: {
      ($0 as? AsyncCacheError)?.code == .closed
    }
    let second = try await open()
    #expect(try await second.getWithTTL(key: "s", as: Session.self)?.ttl == .seconds(60), "the disk follows the clock")
    #expect(try await second.get(key: "s", as: Session.self)?.visits == 3)
  }

  @Test("the store's logger is the one its chain and layers follow")
  func logger() async throws {
    let logs = RecordingLogHandler()
    let store = try CodableCacheStore(layers: [MemoryLayer<String, Data>()], logger: logs.logger(minimumLevel: .notice))
    let followed = store.chain.followedLogger.value
    #expect(followed.minimumLevel == .notice && followed.handler as? RecordingLogHandler === logs)
    try await store.close()
  }

  @Test("run() waits until cancelled or shut down, then shuts down")
  func runs() async throws {
    let memory = RecordingLayer(try MemoryLayer<String, Data>())
    let store = try CodableCacheStore(layers: [memory])
    let cancelled = Task { try await store.run() }
    cancelled.cancel()
    try await cancelled.value
    #expect(memory.calls.map(\.description) == ["close"])

    let other = try makeStore()
    let running = Task { try await other.run() }
    try await other.shutdown()
    try await running.value

    // close() is the same as shutdown(), PersistDriver's name: once, whichever comes first.
    let layer = RecordingLayer(try MemoryLayer<String, Data>())
    let closing = try CodableCacheStore(layers: [layer])
    let service = Task { try await closing.run() }
    try await closing.close()
    try await service.value
    try await closing.shutdown()
    try await closing.close()
    #expect(layer.calls.map(\.description) == ["close"])
    await #expect { try await closing.set(key: "k", value: "v", expires: nil) } throws: {
      ($0 as? AsyncCacheError)?.code == .closed
    }

    let signal = OneShotSignal()
    let closed = RecordingLayer(try MemoryLayer<String, Data>())
    let graceful = try CodableCacheStore(layers: [closed], gracefulShutdown: { await signal.wait() })
    let gracefulService = Task { try await graceful.run() }
    signal.fire()
    try await gracefulService.value
    #expect(closed.calls.map(\.description) == ["close"], "the graceful shutdown signal ends run() and closes")
  }

  @Test("run() follows memory pressure while it runs, as a LoadingCache's does, unless told not to")
  func runFollowsMemoryPressure() async throws {
    for follows in [true, false] {
      let logs = RecordingLogHandler()
      let store = try CodableCacheStore(
        layers: [MemoryLayer<String, Data>()], logger: logs.logger(), followsMemoryPressureWhileRunning: follows)
      let service = Task { try await store.run() }
      if follows {
        await logs.waitForRecords { $0.message == "following memory pressure" }
      }
      try await store.close()
      try await service.value
      let followed = logs.records.contains { $0.message == "following memory pressure" }
      #expect(followed == follows)
    }
  }
}
