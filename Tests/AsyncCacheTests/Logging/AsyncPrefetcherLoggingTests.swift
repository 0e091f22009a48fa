import AsyncCacheTesting
import TestSupport
import Testing

@testable import AsyncCache

@Suite("AsyncPrefetcher logging", .timeLimit(.minutes(3)))
struct AsyncPrefetcherLoggingTests {
  typealias Prefetcher = AsyncPrefetcher<String, Int>

  static func configuration(logger: CacheLogger? = nil) -> Prefetcher.Configuration {
    .init(window: PrefetchWindow(direction: .upcoming, range: 1, offset: 1), logger: logger)
  }

  @Test("a failed prefetch logs at debug with the key and error, through the cache's logger by default")
  func failedPrefetchUsesTheCacheLogger() async throws {
    let logs = RecordingLogHandler()
    let origin = GatedFetcher<String, Int> { $0.count }
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()], origin: origin, configuration: .init(logger: logs.logger()))
    let prefetcher = try Prefetcher(cache: cache, keys: ["now", "next"], configuration: Self.configuration())
    let run = Task { try await prefetcher.run() }
    await origin.waitForFetches(1, for: "next")
    origin.release("next", throwing: TestError("offline"))
    let failed = try #require(await logs.waitForRecords { $0.message == "prefetch failed" }.first)
    #expect(failed.level == .debug && failed.source == "AsyncPrefetcher")
    #expect(failed.metadata == ["key": "next", "error": "TestError(offline)"])
    run.cancel()
    try await run.value
    let prefetcherRecords = logs.records.filter { $0.source == "AsyncPrefetcher" }
    #expect(prefetcherRecords.map(\.message) == ["running", "prefetch failed", "stopped"])
  }

  @Test("a prefetcher's own logger replaces the cache's")
  func ownLogger() async throws {
    let cacheLogs = RecordingLogHandler()
    let prefetcherLogs = RecordingLogHandler()
    let origin = GatedFetcher<String, Int> { $0.count }
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()], origin: origin, configuration: .init(logger: cacheLogs.logger()))
    let prefetcher = try Prefetcher(
      cache: cache, keys: ["now", "next"],
      configuration: Self.configuration(logger: prefetcherLogs.logger(minimumLevel: .debug)))
    let run = Task { try await prefetcher.run() }
    await origin.waitForFetches(1, for: "next")
    origin.release("next", throwing: TestError("offline"))
    _ = await prefetcherLogs.waitForRecords { $0.message == "prefetch failed" }
    run.cancel()
    try await run.value
    #expect(cacheLogs.records.allSatisfy { $0.source == "LoadingCache" })
    #expect(prefetcherLogs.records.allSatisfy { $0.source == "AsyncPrefetcher" })
  }
}
