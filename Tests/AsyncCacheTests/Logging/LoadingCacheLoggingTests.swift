import AsyncCacheTesting
import Testing

@testable import AsyncCache

@Suite("LoadingCache logging", .timeLimit(.minutes(3)))
struct LoadingCacheLoggingTests {
  struct Transient: Error, CustomStringConvertible {
    var description: String { "Transient" }
  }

  struct NotFound: Error, CustomStringConvertible {
    var description: String { "NotFound" }
  }

  @Test("a miss logs the load's start (trace) and end (debug, from the origin); a hit logs nothing")
  func missAndHit() async throws {
    let logs = RecordingLogHandler()
    let origin = GatedFetcher<String, Int> { $0.count }
    origin.open()
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()], origin: origin, configuration: .init(logger: logs.logger()))
    #expect(try await cache.value(for: "abc") == 3)
    #expect(logs.records.map(\.level) == [.trace, .debug])
    #expect(logs.records.map(\.message) == ["load started", "load finished"])
    #expect(logs.records.allSatisfy { $0.source == "LoadingCache" && $0.metadata["key"] == "abc" })
    #expect(logs.records.last?.metadata["from"] == "origin")

    logs.removeAll()
    #expect(try await cache.value(for: "abc") == 3)
    #expect(cache.cachedValue(for: "abc") == 3)
    #expect(logs.records.isEmpty, "a hit logs nothing")
  }

  @Test("a value found in a lower layer is logged with that layer's name")
  func fromLowerLayer() async throws {
    let logs = RecordingLogHandler()
    let lower = FakeLayer<String, Int>(entries: ["k": CacheEntry(7)])
    let chain = try CacheChain<String, Int>([.init(try MemoryLayer<String, Int>()), .init(lower, name: "disk")])
    let cache = try LoadingCache(
      chain: chain, origin: UnimplementedFetcher<String, Int>(),
      configuration: .init(logger: logs.logger(minimumLevel: .debug)))
    #expect(try await cache.value(for: "k") == 7)
    let finished = try #require(logs.records.first)
    #expect(finished.level == .debug && finished.message == "load finished")
    #expect(finished.metadata == ["key": "k", "from": "disk"])
  }

  @Test("each retry logs at info with the attempt, delay and error; giving up after retries logs a notice")
  func retries() async throws {
    let logs = RecordingLogHandler()
    let clock = ManualClock()
    let origin = GatedFetcher<String, Int> { $0.count }
    let policy = RetryPolicy(
      maximumAttempts: 3, initialDelay: .milliseconds(100), multiplier: 2, maximumDelay: .seconds(1), jitter: 0)
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()], origin: origin,
      configuration: .init(clock: clock, retryPolicy: policy, logger: logs.logger(minimumLevel: .info)))
    let request = Task { try await cache.value(for: "k") }

    for (attempt, delay) in [(1, 100), (2, 200)] {
      await origin.waitForFetches(1, for: "k")
      origin.release("k", throwing: Transient())
      await clock.waitForSleepers(1)
      let retry = try #require(logs.records.last)
      #expect(retry.level == .info && retry.source == "LoadingCache")
      #expect(retry.message == "origin failed; retrying")
      #expect(
        retry.metadata == [
          "key": "k", "attempt": "\(attempt)", "delay": "\(delay)ms", "error": "Transient",
        ])
      clock.advance(by: .milliseconds(delay))
    }
    await origin.waitForFetches(1, for: "k")
    origin.release("k", throwing: Transient())
    await #expect(throws: Transient.self) { try await request.value }
    #expect(logs.records.map(\.level) == [.info, .info, .notice])
    let notice = try #require(logs.records.last)
    #expect(notice.message == "origin failed 3 times; no attempts left")
    #expect(notice.metadata == ["key": "k", "attempts": "3", "error": "Transient", "fatal": "false"])
  }

  @Test("a load that fails at once (a fatal error, no retry) logs at debug only: its requests get the error")
  func fatalFailure() async throws {
    let logs = RecordingLogHandler()
    let origin = GatedFetcher<String, Int> { $0.count }
    let policy = RetryPolicy(maximumAttempts: 3, classify: { $0 is NotFound ? .fatal : .transient })
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()], origin: origin,
      configuration: .init(retryPolicy: policy, logger: logs.logger()))
    let request = Task { try await cache.value(for: "missing") }
    await origin.waitForFetches(1, for: "missing")
    origin.release("missing", throwing: NotFound())
    await #expect(throws: NotFound.self) { try await request.value }
    #expect(logs.records(atLeast: .info).isEmpty)
    let failed = try #require(logs.records.last)
    #expect(failed.level == .debug && failed.message == "load failed")
    #expect(failed.metadata == ["key": "missing", "error": "NotFound"])
  }

  @Test("a load cancelled because its last request left logs at trace")
  func cancelledLoad() async throws {
    let logs = RecordingLogHandler()
    let origin = GatedFetcher<String, Int> { $0.count }
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()], origin: origin, configuration: .init(logger: logs.logger()))
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    request.cancel()
    await #expect(throws: CancellationError.self) { try await request.value }
    let cancelled = await logs.waitForRecords { $0.message == "load cancelled" }
    #expect(cancelled.map(\.level) == [.trace])
    #expect(cancelled.first?.metadata == ["key": "k"])
    #expect(logs.records(atLeast: .debug).isEmpty)
  }

  @Test("a batch logs each key's load, and its retries name the batch's keys")
  func batch() async throws {
    let logs = RecordingLogHandler()
    let clock = ManualClock()
    let attempts = Locked(0)
    let batchOrigin = ClosureBatchFetcher<String, Int> { keys in
      guard
        attempts.withLock({
          $0 += 1
          return $0
        }) > 1
      else { throw Transient() }
      return Dictionary(uniqueKeysWithValues: keys.map { ($0, $0.count) })
    }
    let policy = RetryPolicy(maximumAttempts: 2, initialDelay: .seconds(1), jitter: 0)
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()], origin: UnimplementedFetcher<String, Int>(), batchOrigin: batchOrigin,
      configuration: .init(clock: clock, retryPolicy: policy, logger: logs.logger()))
    let request = Task { await cache.values(for: ["a", "bb"]) }
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    #expect(await request.value.values == ["a": 1, "bb": 2])
    #expect(logs.records.filter { $0.message == "load started" }.compactMap { $0.metadata["key"] } == ["a", "bb"])
    let retry = try #require(logs.records.first { $0.level == .info })
    #expect(retry.metadata["keys"] == "2: a, bb" && retry.metadata["attempt"] == "1")
    #expect(logs.records.filter { $0.message == "load finished" }.count == 2)
  }

  @Test("a batch's keys are summarized: the count and the first five")
  func batchKeys() {
    typealias Cache = LoadingCache<String, Int>
    #expect(Cache.keyMetadata(["a"]) == ["key": "a"])
    #expect(Cache.keyMetadata(["a", "b"]) == ["keys": "2: a, b"])
    #expect(Cache.keyMetadata((1...7).map { "k\($0)" }) == ["keys": "7: k1, k2, k3, k4, k5, …"])
  }

  @Test("memory-pressure changes followed by a cache log a notice, a return to normal an info")
  func memoryPressure() async throws {
    let logs = RecordingLogHandler()
    let source = LoggingTestPressureSource()
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()], origin: ClosureFetcher { _ in 0 },
      configuration: .init(logger: logs.logger(minimumLevel: .info)))
    let listening = Task { await cache.followMemoryPressure(source) }
    source.send(.warning)
    let warning = try #require(await logs.waitForRecords { $0.metadata["level"] == "warning" }.first)
    #expect(warning.level == .notice && warning.source == "LoadingCache")
    #expect(warning.message == "memory pressure is warning; passing it to 1 layers")
    source.send(.critical)
    source.send(.normal)
    _ = await logs.waitForRecords(3)
    #expect(logs.records.map(\.level) == [.notice, .notice, .info])
    #expect(logs.records.map { $0.metadata["level"] } == ["warning", "critical", "normal"])
    listening.cancel()
    await listening.value
  }
}

/// A memory-pressure source that reports the levels the test sends.
final class LoggingTestPressureSource: MemoryPressureSource {
  private let stream: AsyncStream<MemoryPressureLevel>
  private let continuation: AsyncStream<MemoryPressureLevel>.Continuation

  init() {
    (stream, continuation) = AsyncStream.makeStream(of: MemoryPressureLevel.self)
  }

  func levels() -> AsyncStream<MemoryPressureLevel> { stream }

  func send(_ level: MemoryPressureLevel) { continuation.yield(level) }
}
