import AsyncCacheTesting
import Dispatch
import Foundation
import PersistenceTestSupport
import Synchronization
import TestSupport
import Testing

@testable import AsyncCache

/// A layer whose `close()` throws, and counts its calls.
private final actor FailingToCloseLayer: AsyncCacheLayer {
  let closes = Locked(0)
  func entry(for key: String) -> CacheEntry<Int>? { nil }
  func insert(_ entry: CacheEntry<Int>, for key: String) {}
  func removeValue(for key: String) {}
  func removeAll() {}
  nonisolated func close() async throws {
    closes.withLock { $0 += 1 }
    throw TestError("cannot close")
  }
}

/// A wall clock whose next `now`, once armed, blocks its thread until the test lets it go: a
/// seam inside `LoadingCache.load(_:timeouts:)`, between the start of a request and its join.
// SAFETY: every stored property is Sendable or thread-safe: a value type, atomics, and a
// DispatchSemaphore, which is built for use from many threads.
private final class BlockingClock: CacheClock, @unchecked Sendable {
  let base = WallClock()
  let armed = Atomic<Bool>(false)
  let blocked = Atomic<Bool>(false)
  let gate = DispatchSemaphore(value: 0)

  var now: CacheInstant {
    if armed.exchange(false, ordering: .sequentiallyConsistent) {
      blocked.store(true, ordering: .sequentiallyConsistent)
      gate.wait()
    }
    return base.now
  }
  var minimumResolution: Duration { base.minimumResolution }
  func sleep(until deadline: CacheInstant, tolerance: Duration?) async throws {
    try await base.sleep(until: deadline, tolerance: tolerance)
  }
}

private func isClosed(_ error: any Error) -> Bool {
  (error as? AsyncCacheError)?.code == .closed
}

@Suite("Closing a cache and a chain", .timeLimit(.minutes(3)))
struct LoadingCacheCloseTests {
  @Test("close() closes every layer once, top first, nested chains and operators included")
  func closesEveryLayer() async throws {
    let top = RecordingLayer(try MemoryLayer<String, Int>())
    let middle = RecordingLayer(try MemoryLayer<String, Int>())
    let bottom = RecordingLayer(try MemoryLayer<String, Int>())
    let nested = try CacheChain<String, Int>([.init(middle.coalescingLookups()), .init(bottom)])
    let cache = try LoadingCache(chain: try CacheChain([.init(top), .init(nested)]), origin: ClosureFetcher { _ in 1 })

    try await cache.close()
    try await cache.close()

    for layer in [top, middle, bottom] {
      #expect(layer.calls.filter { $0.description == "close" }.count == 1)
    }
    #expect(cache.isClosed)
  }

  @Test("after close, requests and writes throw closed, naming the cache; bulk requests fail every key")
  func requestsAfterClose() async throws {
    let memory = try MemoryLayer<String, Int>()
    let cache = try LoadingCache(layers: [memory], origin: ClosureFetcher { _ in 1 })
    _ = try await cache.value(for: "a")
    try await cache.close()

    #expect(memory.count == 0, "a closed memory layer is empty")
    let error = await #expect(throws: AsyncCacheError.self) { try await cache.value(for: "a") }
    #expect(error?.code == .closed && error?.message == "value(for:) on a LoadingCache that was closed")
    await #expect(throws: AsyncCacheError.self) { try await cache.value(for: "a", timeouts: .init(hard: .seconds(1))) }
    await #expect { try await cache.insert(1, for: "a") } throws: { isClosed($0) }
    await #expect { try await cache.removeValue(for: "a") } throws: { isClosed($0) }
    await #expect { try await cache.removeAll() } throws: { isClosed($0) }
    await #expect { try await cache.allValues(for: ["a", "b"]) } throws: { isClosed($0) }
    let bulk = await cache.values(for: ["a", "b"])
    #expect(bulk.values.isEmpty && bulk.failures.count == 2 && bulk.failures.values.allSatisfy(isClosed))
    await #expect { try await cache.chain.entry(for: "a") } throws: { isClosed($0) }
    await #expect { try await cache.chain.insert(1, for: "a") } throws: { isClosed($0) }
  }

  @Test("a request that started before close() but joins after it is refused, and the closed layers stay empty")
  func requestRacingClose() async throws {
    let clock = BlockingClock()
    let memory = try MemoryLayer<String, Int>()
    let fetches = Atomic<Int>(0)
    let cache = try LoadingCache(
      layers: [memory],
      origin: ClosureFetcher { _ in
        fetches.add(1, ordering: .relaxed)
        return 1
      },
      configuration: .init(clock: clock, loadTimeouts: .init(hard: .seconds(30))))
    clock.armed.store(true, ordering: .sequentiallyConsistent)
    // The clock blocks the request's thread: one of its own, not one of the cooperative pool's.
    let thread = ThreadExecutor(label: "request")
    defer {
      // Also when a check below throws: the request's thread is let go before it is stopped.
      clock.gate.signal()
      thread.stop()
    }
    let request = Task(executorPreference: thread) { try await cache.value(for: "k") }
    // Until the request is held between its start and its join.
    while !clock.blocked.load(ordering: .sequentiallyConsistent), !Task.isCancelled { await Task.yield() }

    try await cache.close()
    clock.gate.signal()
    await #expect { try await request.value } throws: { isClosed($0) }
    #expect(fetches.load(ordering: .relaxed) == 0, "the origin is not asked after close")
    #expect(memory.count == 0, "the closed layer is not filled again")
    await #expect { try await cache.value(for: "k") } throws: { isClosed($0) }
  }

  @Test("close() called from a load of the same cache fails at once instead of waiting for itself")
  func closeFromInsideALoad() async throws {
    let holder = Locked<LoadingCache<String, Int>?>(nil)
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, Int>()],
      origin: ClosureFetcher { _ in
        try await holder.withLock { $0 }!.close()
        return 1
      })
    holder.withLock { $0 = cache }
    let error = await #expect(throws: AsyncCacheError.self) { try await cache.value(for: "k") }
    #expect(error?.code == .invalidState && error?.message.contains("from a load that the cache's own loads") == true)
    try await cache.close()
  }

  @Test("close() called from another cache's load that this cache's load waits for fails at once too")
  func closeFromALoadThisCacheWaitsFor() async throws {
    let first = Locked<LoadingCache<String, Int>?>(nil)
    let second = try LoadingCache(
      layers: [try MemoryLayer<String, Int>()],
      origin: ClosureFetcher { _ in
        try await first.withLock { $0 }!.close()
        return 1
      })
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, Int>()], origin: ClosureFetcher { key in try await second.value(for: key) })
    first.withLock { $0 = cache }
    let error = await #expect(throws: AsyncCacheError.self) { try await cache.value(for: "k") }
    #expect(error?.code == .invalidState)
    try await cache.close()
    try await second.close()
  }

  @Test("a load in flight finishes: its request gets the value, stored before the layers close")
  func loadsInFlightFinish() async throws {
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let lower = RecordingLayer(try MemoryLayer<String, Int>())
    let cache = try LoadingCache(layers: [try MemoryLayer<String, Int>(), lower], origin: origin)
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")

    let closing = Task { try await cache.close() }
    while !cache.isClosed, !Task.isCancelled { await Task.yield() }  // close() has begun
    await #expect { try await cache.value(for: "other") } throws: { isClosed($0) }
    #expect(origin.release("k") == 1)
    #expect(try await request.value == 7)
    try await closing.value
    #expect(lower.calls.map(\.description).suffix(2) == ["insert(k, expiresAt: nil)", "close"])
  }

  @Test("cancelling the task that closes cancels the loads in flight; the layers close all the same")
  func cancellingCloseCancelsLoads() async throws {
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let memory = RecordingLayer(try MemoryLayer<String, Int>())
    let cache = try LoadingCache(layers: [memory], origin: origin)
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")

    let closing = Task { try await cache.close() }
    closing.cancel()
    try await closing.value
    await #expect(throws: CancellationError.self) { try await request.value }
    #expect(memory.calls.map(\.description).last == "close")
  }

  @Test("concurrent closes wait for the first, and all throw its error")
  func concurrentCloses() async throws {
    let failing = FailingToCloseLayer()
    let after = RecordingLayer(try MemoryLayer<String, Int>())
    let cache = try LoadingCache(
      tiers: [.init(try MemoryLayer<String, Int>()), .init(failing, failurePolicy: .skip), .init(after)],
      origin: ClosureFetcher { _ in 1 })
    let events = cache.chain.events()
    let first = Task { try await cache.close() }
    let second = Task { try await cache.close() }
    for closing in [first, second] {
      let error = await #expect(throws: AsyncCacheError.self) { try await closing.value }
      #expect(error?.code == .layerFailure && error?.message.contains("during close") == true)
      #expect((error?.underlying as? TestError) == TestError("cannot close"))
    }
    #expect(failing.closes.withLock { $0 } == 1)
    #expect(after.calls.map(\.description) == ["close"], "the layers below a failed one are closed too")
    let failures = await events.drained().compactMap { event -> LayerFailure? in
      if case .layerFailed(_, let failure) = event { failure } else { nil }
    }
    #expect(failures.map(\.operation) == [.close] && failures.map(\.tierIndex) == [1])
  }

  @Test("close ends the event sequences of the cache, its chain and its memory layers")
  func eventSequencesEnd() async throws {
    let memory = try MemoryLayer<String, Int>()
    let cache = try LoadingCache(layers: [memory], origin: ClosureFetcher { _ in 1 })
    let sequences = [cache.events(), cache.chain.events(), memory.events()]
    _ = try await cache.value(for: "a")
    try await cache.close()
    for sequence in sequences {
      for await _ in sequence {}  // ends
    }
  }

  @Test("close stops the cache's running prefetchers, whose events end; a prefetcher cannot run after")
  func prefetchersStop() async throws {
    let origin = GatedFetcher<String, Int> { _ in 1 }
    let cache = try LoadingCache(layers: [try MemoryLayer<String, Int>()], origin: origin)
    let prefetcher = try AsyncPrefetcher(cache: cache, keys: ["a", "b", "c"])
    let events = prefetcher.events()
    let run = Task { try await prefetcher.run() }
    await origin.waitForFetches(1)

    try await cache.close()
    try await run.value
    for await _ in events {}  // ends
    let late = try AsyncPrefetcher(cache: cache, keys: ["a"])
    await #expect { try await late.run() } throws: { isClosed($0) }
    #expect(origin.heldCount() == 0, "the prefetches were cancelled, not left waiting")
  }

  @Test("a SQLite-like write-behind layer is flushed: a disk layer's entry survives the close")
  func writesReachTheStore() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let disk = try await DiskLayer<String, Data>(directory: directory.url, keyEncoding: .string, valueCoder: .data)
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, Data>(), disk], origin: ClosureFetcher { Data($0.utf8) })
    _ = try await cache.value(for: "k")
    try await cache.close()
    let reopened = try await DiskLayer<String, Data>(directory: directory.url, keyEncoding: .string, valueCoder: .data)
    #expect(try await reopened.entry(for: "k")?.value == Data("k".utf8))
  }
}
