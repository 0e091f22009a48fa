import AsyncCacheTesting
import TestSupport
import Testing

@testable import AsyncCache

@Suite("CacheChain logging", .timeLimit(.minutes(3)))
struct CacheChainLoggingTests {
  static func chain(
    _ lower: FakeLayer<String, Int>, policy: LayerFailurePolicy, logs: RecordingLogHandler,
    top: (any AsyncCacheLayer<String, Int>)? = nil, backfill: BackfillPolicy = .awaited
  ) throws -> CacheChain<String, Int> {
    try CacheChain<String, Int>(
      [.init(try top ?? MemoryLayer<String, Int>()), .init(lower, failurePolicy: policy, name: "disk")],
      configuration: .init(backfill: backfill, logger: logs.logger()))
  }

  @Test("a skipped failing layer logs a warning naming the layer, the key, the operation and the error")
  func skippedLookup() async throws {
    let logs = RecordingLogHandler()
    let disk = FakeLayer<String, Int>()
    disk.fail(.lookup, with: TestError("disk down"))
    let chain = try Self.chain(disk, policy: .skip, logs: logs)
    #expect(try await chain.value(for: "a") == nil)
    let warning = try #require(logs.records(atLeast: .warning).only)
    #expect(warning.level == .warning && warning.source == "CacheChain")
    #expect(warning.message == "layer 1 (disk) failed during lookup; the chain goes on without it")
    #expect(
      warning.metadata == [
        "key": "a", "layer": "disk", "tier": "1", "operation": "lookup", "error": "TestError(disk down)",
      ])
  }

  @Test("a layer that stays down logs one warning, then debug lines; answering again logs info")
  func repeatedFailuresLogOnce() async throws {
    let logs = RecordingLogHandler()
    let disk = FakeLayer<String, Int>()
    disk.fail(.lookup, with: TestError("disk down"))
    let chain = try Self.chain(disk, policy: .skip, logs: logs)
    for key in ["a", "b", "c"] { #expect(try await chain.value(for: key) == nil) }
    #expect(logs.records(atLeast: .warning).count == 1, "one warning for a layer that stays down")
    #expect(logs.records.filter { $0.level == .debug && $0.message.contains("goes on without it") }.count == 2)

    disk.stopFailing()
    #expect(try await chain.value(for: "d") == nil)
    let recovery = try #require(logs.records.last)
    #expect(recovery.level == .info && recovery.message == "layer 1 (disk) answers lookups again")
    disk.fail(.lookup, with: TestError("down again"))
    #expect(try await chain.value(for: "e") == nil)
    #expect(logs.records(atLeast: .warning).count == 2, "a new outage warns again")
  }

  @Test("a failure thrown to the caller logs at debug only: the caller reports it")
  func propagatedLookup() async throws {
    let logs = RecordingLogHandler()
    let disk = FakeLayer<String, Int>()
    disk.fail(.lookup, with: TestError("disk down"))
    let chain = try Self.chain(disk, policy: .propagate, logs: logs)
    await #expect(throws: AsyncCacheError.self) { try await chain.value(for: "a") }
    #expect(logs.records(atLeast: .info).isEmpty)
    let record = try #require(logs.records.only)
    #expect(record.level == .debug)
    #expect(record.message == "layer 1 (disk) failed during lookup; the error is thrown to the caller")
  }

  @Test("a failed back-fill logs a warning, whatever the policy: the lookup that found the value succeeded")
  func failedBackfill() async throws {
    let logs = RecordingLogHandler()
    let top = FakeLayer<String, Int>()
    top.fail(.insert, with: TestError("full"))
    let disk = FakeLayer<String, Int>(entries: ["a": CacheEntry(1)])
    let chain = try CacheChain<String, Int>(
      [.init(top, name: "memory"), .init(disk, name: "disk")], configuration: .init(logger: logs.logger()))
    #expect(try await chain.value(for: "a") == 1)
    let warning = try #require(logs.records(atLeast: .warning).only)
    #expect(warning.metadata["operation"] == "backfill" && warning.metadata["layer"] == "memory")
    #expect(warning.metadata["key"] == "a")
  }

  @Test("a failed background back-fill logs a warning too")
  func failedBackgroundBackfill() async throws {
    let logs = RecordingLogHandler()
    let top = FakeLayer<String, Int>()
    top.fail(.insert, with: TestError("full"))
    let disk = FakeLayer<String, Int>(entries: ["a": CacheEntry(1)])
    let chain = try Self.chain(disk, policy: .propagate, logs: logs, top: top, backfill: .background)
    #expect(try await chain.value(for: "a") == 1)
    let warnings = await logs.waitForRecords { $0.level == .warning && $0.metadata["operation"] == "backfill" }
    #expect(warnings.count == 1)
    await chain.waitForBackfills()
  }

  @Test("a failed transform skips its layer with a warning, even under the propagate policy")
  func failedTransform() async throws {
    let logs = RecordingLogHandler()
    let stored = FakeLayer<String, Int>(entries: ["a": CacheEntry(1)])
    let transformed = stored.mappingValues(
      ValueTransform<Int, String>(decode: { _ in throw TestError("bad bytes") }, encode: { Int($0) ?? 0 }))
    let chain = try CacheChain<String, String>(
      [.init(try MemoryLayer<String, String>()), .init(transformed, failurePolicy: .propagate, name: "decoded")],
      configuration: .init(logger: logs.logger()))
    #expect(try await chain.value(for: "a") == nil)
    let warning = try #require(logs.records(atLeast: .warning).only)
    #expect(warning.metadata["layer"] == "decoded")
    #expect(warning.metadata["error"]?.contains("transformFailed") == true)
  }

  @Test(
    "a removal that fails after a failed write says the layer may serve an older value, in the outage's one warning")
  func failedCleanup() async throws {
    let logs = RecordingLogHandler()
    let disk = FakeLayer<String, Int>(entries: ["a": CacheEntry(0)])
    disk.fail(.remove, with: TestError("read-only"))
    disk.fail(.insert, with: TestError("read-only"))
    let chain = try Self.chain(disk, policy: .skip, logs: logs)
    try await chain.insert(1, for: "a")
    let warnings = logs.records(atLeast: .warning)
    #expect(warnings.count == 1, "one warning per outage: \(warnings.map(\.message))")
    #expect(warnings.first?.metadata["operation"] == "insert")
    let removal = try #require(logs.records.last)
    #expect(removal.level == .debug, "the same outage: the layer is failing already")
    #expect(
      removal.message
        == "layer 1 (disk) could not remove the key after a failed write; it may serve an older value until that expires"
    )
    #expect(removal.metadata["key"] == "a" && removal.metadata["error"] == "TestError(read-only)")
    #expect(removal.metadata["operation"] == "remove")
    try #require(chain.statistics.tiers.count == 2)
    #expect(chain.statistics.tiers[1].failures == 2, "the removal's failure is counted as the layer's")
  }

  @Test("a cache built from tiers skips the tiers that say so, and its chain logs through the cache's logger")
  func cacheFromTiers() async throws {
    let logs = RecordingLogHandler()
    let redis = FakeLayer<String, Int>()
    redis.fail(.lookup, with: TestError("connection refused"))
    let cache = try LoadingCache(
      tiers: [.init(try MemoryLayer<String, Int>()), .init(redis, failurePolicy: .skip, name: "redis")],
      origin: ClosureFetcher<String, Int> { $0.count },
      configuration: .init(logger: logs.logger()))
    #expect(try await cache.value(for: "abc") == 3, "the failing tier is skipped, not thrown")
    #expect(cache.statistics.layers.map(\.name) == ["MemoryLayer<String, Int>", "redis"])
    let warning = try #require(logs.records(atLeast: .warning).only)
    #expect(warning.source == "CacheChain" && warning.metadata["layer"] == "redis")
    let empty = #expect(throws: AsyncCacheError.self) {
      try LoadingCache(tiers: [], origin: ClosureFetcher<String, Int> { $0.count })
    }
    #expect(empty?.code == .invalidConfiguration)
  }

  @Test("a 100-key outage of a skipped layer behind a loading cache logs one warning, whatever fails")
  func oneWarningPerOutage() async throws {
    let logs = RecordingLogHandler()
    let redis = FakeLayer<String, Int>()
    for operation in [FakeLayer<String, Int>.Operation.lookup, .insert, .remove] {
      redis.fail(operation, with: TestError("connection refused"))
    }
    let chain = try Self.chain(redis, policy: .skip, logs: logs)
    let cache = try LoadingCache(chain: chain, origin: ClosureFetcher<String, Int> { $0.count })
    for index in 0..<100 { #expect(try await cache.value(for: "key \(index)") == "key \(index)".count) }
    let warnings = logs.records(atLeast: .warning)
    #expect(warnings.count == 1, "one warning per outage, not one per key: \(warnings.count)")
    try #require(chain.statistics.tiers.count == 2)
    #expect(chain.statistics.tiers[1].failures == 300, "each key's lookup, write-back and removal are counted")

    redis.stopFailing()
    #expect(try await cache.value(for: "key 100") == 7)
    #expect(logs.records.contains { $0.level == .info && $0.message.contains("answers lookups again") })
    redis.fail(.lookup, with: TestError("down again"))
    #expect(try await cache.value(for: "key 101") == 7)
    #expect(logs.records(atLeast: .warning).count == 2, "a new outage warns again")
  }

  @Test("a failed removal, skipped, logs a warning without a key for removeAll")
  func failedRemoveAll() async throws {
    let logs = RecordingLogHandler()
    let disk = FakeLayer<String, Int>()
    disk.fail(.removeAll, with: TestError("busy"))
    let chain = try Self.chain(disk, policy: .skip, logs: logs)
    try await chain.removeAll()
    let warning = try #require(logs.records(atLeast: .warning).only)
    #expect(warning.metadata["operation"] == "removeAll" && warning.metadata["key"] == nil)
  }

  @Test("a chain following memory pressure logs each level with its own logger")
  func memoryPressure() async throws {
    let logs = RecordingLogHandler()
    let source = LoggingTestPressureSource()
    let chain = try Self.chain(FakeLayer(), policy: .skip, logs: logs)
    let listening = Task { await chain.followMemoryPressure(source) }
    source.send(.critical)
    let notice = try #require(await logs.waitForRecords { $0.level == .notice }.first)
    #expect(notice.source == "CacheChain" && notice.metadata == ["level": "critical"])
    listening.cancel()
    await listening.value
    let last = try #require(logs.records.last)
    #expect(last.level == .debug && last.message == "stopped following memory pressure")
  }
}

extension Array {
  /// The only element, or `nil` when there are none or several.
  var only: Element? { count == 1 ? first : nil }
}
