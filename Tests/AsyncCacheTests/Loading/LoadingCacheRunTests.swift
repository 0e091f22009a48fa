import AsyncCacheTesting
import TestSupport
import Testing

@testable import AsyncCache

@Suite("Running a cache as a service", .timeLimit(.minutes(3)))
struct LoadingCacheRunTests {
  /// A graceful shutdown signal a test fires, shaped as swift-service-lifecycle's
  /// `gracefulShutdown()`: returns when fired, throws `CancellationError` when cancelled.
  final class ShutdownSignal: Sendable {
    let signal = OneShotSignal()
    func wait() async throws {
      await signal.wait()
      try Task.checkCancellation()
    }
  }

  @Test("run() ends when its task is cancelled, and closes the cache; loads in flight are cancelled")
  func endsOnCancellation() async throws {
    let origin = GatedFetcher<String, Int> { _ in 1 }
    let memory = RecordingLayer(try MemoryLayer<String, Int>())
    let cache = try LoadingCache(
      layers: [memory], origin: origin, configuration: .init(followsMemoryPressureWhileRunning: false))
    let service = Task { try await cache.run() }
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")

    service.cancel()
    try await service.value
    #expect(cache.isClosed)
    #expect(memory.calls.last?.description == "close")
    await #expect(throws: CancellationError.self) { try await request.value }
  }

  @Test("run() ends at the graceful shutdown signal: the loads in flight finish, then the layers close")
  func endsGracefully() async throws {
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let lower = RecordingLayer(try MemoryLayer<String, Int>())
    let shutdown = ShutdownSignal()
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, Int>(), lower], origin: origin,
      configuration: .init(gracefulShutdown: shutdown.wait, followsMemoryPressureWhileRunning: false))
    let service = Task { try await cache.run() }
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")

    shutdown.signal.fire()
    while !cache.isClosed { await Task.yield() }  // the shutdown has begun
    await #expect { try await cache.value(for: "late") } throws: { ($0 as? AsyncCacheError)?.code == .closed }
    #expect(origin.release("k") == 1)
    #expect(try await request.value == 7)
    try await service.value
    #expect(lower.calls.map(\.description).suffix(2) == ["insert(k, expiresAt: nil)", "close"])
  }

  @Test("run() ends when the cache is closed by someone else")
  func endsOnClose() async throws {
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, Int>()], origin: ClosureFetcher { _ in 1 },
      configuration: .init(followsMemoryPressureWhileRunning: true))
    let service = Task { try await cache.run() }
    while !cache.lifecycle.isRunning, !Task.isCancelled { await Task.yield() }
    try await cache.close()
    try await service.value
  }

  @Test("a chain used on its own runs until cancelled, signalled or closed, then closes its layers")
  func chainRuns() async throws {
    let first = RecordingLayer(try MemoryLayer<String, Int>())
    let cancelled = try CacheChain<String, Int>([.init(first)])
    let running = Task { try await cancelled.run() }
    running.cancel()
    try await running.value
    #expect(first.calls.map(\.description) == ["close"])

    let shutdown = ShutdownSignal()
    let second = RecordingLayer(try MemoryLayer<String, Int>())
    let signalled = try CacheChain<String, Int>([.init(second)], configuration: .init(gracefulShutdown: shutdown.wait))
    let service = Task { try await signalled.run() }
    shutdown.signal.fire()
    try await service.value
    #expect(second.calls.map(\.description) == ["close"])
    await #expect { try await signalled.insert(1, for: "k") } throws: { ($0 as? AsyncCacheError)?.code == .closed }

    let third = try CacheChain<String, Int>([.init(try MemoryLayer<String, Int>())])
    let closedElsewhere = Task { try await third.run() }
    while !third.isRunning { await Task.yield() }
    let twice = await #expect(throws: AsyncCacheError.self) { try await third.run() }
    #expect(twice?.code == .invalidState)
    try await third.close()
    try await closedElsewhere.value
  }

  @Test("run() refuses to run twice at once, and after close")
  func runsOnce() async throws {
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, Int>()], origin: ClosureFetcher { _ in 1 },
      configuration: .init(followsMemoryPressureWhileRunning: false))
    let service = Task { try await cache.run() }
    while !cache.lifecycle.isRunning, !Task.isCancelled { await Task.yield() }
    let second = await #expect(throws: AsyncCacheError.self) { try await cache.run() }
    #expect(second?.code == .invalidState)
    service.cancel()
    try await service.value
    let late = await #expect(throws: AsyncCacheError.self) { try await cache.run() }
    #expect(late?.code == .closed)
  }
}
