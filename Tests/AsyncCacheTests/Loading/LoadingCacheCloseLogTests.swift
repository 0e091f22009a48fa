import AsyncCache
import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import TestSupport
import Testing

/// A layer whose `close()` throws.
private final actor UnclosableLayer: AsyncCacheLayer {
  func entry(for key: String) -> CacheEntry<Int>? { nil }
  func insert(_ entry: CacheEntry<Int>, for key: String) {}
  func removeValue(for key: String) {}
  func removeAll() {}
  nonisolated func close() async throws { throw TestError("cannot close") }
}

/// An origin that holds every fetch until `open()` and ignores cancellation meanwhile.
private final class StubbornFetcher: AsyncFetcher, Sendable {
  private let gate = Locked<(waiting: [CheckedContinuation<Void, Never>], isOpen: Bool, calls: Int)>(([], false, 0))

  func fetch(_ key: String) async throws -> Int {
    await withCheckedContinuation { continuation in
      let now = gate.withLock { gate -> Bool in
        gate.calls += 1
        if gate.isOpen { return true }
        gate.waiting.append(continuation)
        return false
      }
      if now { continuation.resume() }
    }
    return key.count
  }

  var calls: Int { gate.withLock { $0.calls } }

  func open() {
    let waiting = gate.withLock { gate in
      gate.isOpen = true
      defer { gate.waiting = [] }
      return gate.waiting
    }
    for continuation in waiting { continuation.resume() }
  }
}

@Suite("What closing logs", .timeLimit(.minutes(3)))
struct LoadingCacheCloseLogTests {
  private func closeLines(_ logs: RecordingLogHandler) -> [CacheLogRecord] {
    logs.records.filter { $0.message.hasPrefix("closed") }
  }

  /// A cache over one memory layer, its origin gated, logging to the records returned.
  /// Starts a request whose fetch the origin holds, then closes the cache from a task cancelled
  /// at once; returns the close's summary line and the request.
  private func closeCancelledAtOnceWithALoadInFlight() async throws -> (CacheLogRecord, Task<Int, any Error>) {
    let (logs, origin, cache) = try gatedCache()
    let request = Task { try await cache.value(for: "a") }
    await origin.waitForFetches(1, for: "a")
    let closing = Task { try await cache.close() }
    closing.cancel()
    try await closing.value
    return (try #require(closeLines(logs).last), request)
  }

  private func gatedCache() throws -> (RecordingLogHandler, GatedFetcher<String, Int>, LoadingCache<String, Int>) {
    let logs = RecordingLogHandler()
    let origin = GatedFetcher<String, Int> { $0.count }
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, Int>()], origin: origin, configuration: .init(logger: logs.logger()))
    return (logs, origin, cache)
  }

  @Test("the cache says what it waited for and how many layers it closed; the memory layer what it dropped")
  func cacheAndMemory() async throws {
    let logs = RecordingLogHandler()
    let origin = GatedFetcher<String, Int> { $0.count }
    let memory = try MemoryLayer<String, Int>(configuration: .init(cost: { $0 }))
    let cache = try LoadingCache(layers: [memory], origin: origin, configuration: .init(logger: logs.logger()))
    _ = try await cache.insert(1, for: "a")
    _ = try await cache.insert(2, for: "bb")
    let request = Task { try await cache.value(for: "ccc") }
    await origin.waitForFetches(1, for: "ccc")
    let closing = Task { try await cache.close() }
    while !cache.isClosed, !Task.isCancelled { await Task.yield() }  // close() has begun
    #expect(origin.release("ccc") == 1)
    #expect(try await request.value == 3)
    try await closing.value
    try await cache.close()  // again: nothing more is logged

    let lines = closeLines(logs)
    try #require(lines.count == 2, "\(lines)")
    let dropped = lines[0]
    #expect(dropped.level == .notice)
    #expect(dropped.message == "closed; dropped 3 entries (total cost 6)")
    #expect(dropped.metadata["count"] == "3" && dropped.metadata["cost"] == "6")
    let summary = lines[1]
    #expect(summary.level == .notice)
    #expect(summary.source == "LoadingCache")
    #expect(summary.message.hasSuffix(": waited for 1 load in flight (0 cancelled), closed 1 layer"), "\(summary)")
    #expect(summary.metadata["loads"] == "1" && summary.metadata["cancelled"] == "0")
    #expect(summary.metadata["layers"] == "1" && summary.metadata["elapsed"] != nil)
  }

  @Test("a cancelled close counts the loads it cancelled")
  func cancelledLoads() async throws {
    let (summary, request) = try await closeCancelledAtOnceWithALoadInFlight()
    await #expect(throws: CancellationError.self) { try await request.value }
    #expect(summary.message.hasSuffix(": waited for 1 load in flight (1 cancelled), closed 1 layer"), "\(summary)")
    #expect(summary.metadata["cancelled"] == "1")
  }

  @Test("the prefetchers close stopped are counted")
  func prefetchers() async throws {
    let (logs, origin, cache) = try gatedCache()
    let prefetcher = try AsyncPrefetcher(cache: cache, keys: ["a", "b", "c"])
    let run = Task { try await prefetcher.run() }
    await origin.waitForFetches(1)
    try await cache.close()
    try await run.value
    let summary = try #require(closeLines(logs).last)
    #expect(summary.message.contains("cancelled), stopped 1 prefetcher, closed 1 layer"), "\(summary)")
    #expect(summary.metadata["prefetchers"] == "1")
  }

  @Test("a layer that fails to close makes the summary an error naming it")
  func failedLayer() async throws {
    let logs = RecordingLogHandler()
    let cache = try LoadingCache(
      tiers: [.init(try MemoryLayer<String, Int>()), .init(UnclosableLayer(), failurePolicy: .skip, name: "broken")],
      origin: ClosureFetcher { _ in 1 }, configuration: .init(logger: logs.logger()))
    await #expect(throws: AsyncCacheError.self) { try await cache.close() }
    let summary = try #require(closeLines(logs).last)
    #expect(summary.level == .error)
    #expect(summary.message.contains("no loads in flight, closed 2 layers; the first that failed:"), "\(summary)")
    #expect(summary.metadata["error"]?.contains("broken") == true, "\(summary.metadata)")
  }

  @Test("a disk layer says nothing was pending and what stays on disk")
  func disk() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let logs = RecordingLogHandler()
    let disk = try await DiskLayer<String, Data>(directory: directory.url, keyEncoding: .string, valueCoder: .data)
    let cache = try LoadingCache(
      tiers: [.init(disk, name: "disk")], origin: ClosureFetcher { Data($0.utf8) },
      configuration: .init(logger: logs.logger()))
    _ = try await cache.value(for: "k")
    let bytes = await disk.totalBytes
    try await cache.close()
    let line = try #require(closeLines(logs).first)
    #expect(line.level == .notice)
    #expect(
      line.message == "closed; nothing was pending, each write was durable when it returned; 1 entry (\(bytes) bytes) "
        + "stay in the directory")
    #expect(line.metadata["bytes"] == "\(bytes)")
    #expect(line.metadata["directory"] != nil, "the layer's records name its directory: \(line.metadata)")
  }

  @Test("a UserDefaults layer says nothing was pending and what stays in the suite")
  func userDefaults() async throws {
    let suite = "org.swift-async-cache.tests.\(UUID().uuidString)"
    defer { UserDefaults(suiteName: suite)?.removePersistentDomain(forName: suite) }
    let logs = RecordingLogHandler()
    let layer = try UserDefaultsLayer<String, Data>(suiteName: suite)
    let cache = try LoadingCache(
      tiers: [.init(layer, name: "defaults")], origin: ClosureFetcher { Data($0.utf8) },
      configuration: .init(logger: logs.logger()))
    _ = try await cache.value(for: "a")
    _ = try await cache.value(for: "b")
    try await cache.close()
    let line = try #require(closeLines(logs).first)
    #expect(line.level == .notice)
    #expect(
      line.message == "closed; nothing was pending, each change was written as it was made; 2 entries stay in the suite"
    )
    #expect(line.metadata["suite"] == suite)
  }

  @Test("a failed close is logged at error under a logger that drops notices")
  func failedCloseUnderAWarningLogger() async throws {
    let logs = RecordingLogHandler()
    let cache = try LoadingCache(
      tiers: [.init(try MemoryLayer<String, Int>()), .init(UnclosableLayer(), failurePolicy: .skip, name: "broken")],
      origin: ClosureFetcher { _ in 1 }, configuration: .init(logger: logs.logger(minimumLevel: .warning)))
    await #expect(throws: AsyncCacheError.self) { try await cache.close() }
    let summary = try #require(closeLines(logs).last)
    #expect(summary.level == .error)
  }

  @Test("a load its requests abandoned before close, still running, is one close waited for")
  func abandonedLoadStillRunning() async throws {
    let logs = RecordingLogHandler()
    let origin = StubbornFetcher()
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, Int>()], origin: origin, configuration: .init(logger: logs.logger()))
    let request = Task { try await cache.value(for: "a") }
    while origin.calls < 1, !Task.isCancelled { await Task.yield() }
    request.cancel()
    await #expect(throws: CancellationError.self) { try await request.value }
    let closing = Task { try await cache.close() }
    while !cache.isClosed, !Task.isCancelled { await Task.yield() }
    origin.open()
    try await closing.value
    let summary = try #require(closeLines(logs).last)
    #expect(summary.message.hasSuffix(": waited for 1 load in flight (1 cancelled), closed 1 layer"), "\(summary)")
  }

  @Test("a close cancelled at once counts the loads it cancelled, whichever task runs first")
  func cancelledAtOnceManyTimes() async throws {
    for _ in 0..<50 {
      let (summary, request) = try await closeCancelledAtOnceWithALoadInFlight()
      _ = try? await request.value
      #expect(summary.message.hasSuffix(": waited for 1 load in flight (1 cancelled), closed 1 layer"), "\(summary)")
    }
  }
}
