import AsyncCacheTesting
import Dispatch
import Synchronization
import Testing

@testable import AsyncCache

/// A serial executor that counts the jobs it is given: every hop onto it is one job.
final class CountingExecutor: SerialExecutor {
  let jobs = Atomic<Int>(0)
  let queue = DispatchQueue(label: "CountingExecutor")

  func enqueue(_ job: consuming ExecutorJob) {
    jobs.wrappingAdd(1, ordering: .relaxed)
    let job = UnownedJob(job)
    queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
  }

  var jobCount: Int { jobs.load(ordering: .relaxed) }
}

/// An actor, like the main actor of an app, that reads through a cache.
actor CachingCaller {
  let executor = CountingExecutor()
  nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

  func read(_ cache: LoadingCache<Int, Int>, key: Int, times: Int) async throws -> Int {
    var sum = 0
    for _ in 0..<times { sum += try await cache.value(for: key) }
    return sum
  }
}

@Suite(.timeLimit(.minutes(3))) struct LoadingCacheExecutorTests {
  /// Regression: `value(for:)` was a plain `nonisolated async` method, so a caller on an actor
  /// (the main actor of an app) hopped to the global executor and back on every hit.
  @Test func aHitNeverLeavesTheCallersExecutor() async throws {
    let memory = try MemoryLayer<Int, Int>()
    try memory.insert(3, for: 1)
    let cache = try LoadingCache(layers: [memory], origin: UnimplementedFetcher<Int, Int>())
    let caller = CachingCaller()
    let before = caller.executor.jobCount
    #expect(try await caller.read(cache, key: 1, times: 1000) == 3000)
    // One job to enter the actor; a hop per hit would add a thousand more.
    #expect(caller.executor.jobCount - before <= 2)
  }

  @Test func aMissFromAnActorStillLoadsAndComesBack() async throws {
    let origin = GatedFetcher<Int, Int> { $0 * 10 }
    origin.open()
    let cache = try LoadingCache(layers: [try MemoryLayer<Int, Int>()], origin: origin)
    let caller = CachingCaller()
    #expect(try await caller.read(cache, key: 4, times: 3) == 120)
    #expect(origin.callCount == 1)
  }
}
