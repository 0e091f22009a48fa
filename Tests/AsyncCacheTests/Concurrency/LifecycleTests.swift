import AsyncCache
import Testing

@Suite("Lifecycle: one close, which later closes wait for, and runs that end with it")
struct LifecycleTests {
  struct Failure: Error, Equatable { var name: String }

  /// Work that waits until `open()` lets it end, throwing `error` then if given.
  final class GatedWork: Sendable {
    private let started = OneShotSignal()
    private let gate = OneShotSignal()
    private let runs = Locked(0)
    let error: Failure?

    init(throwing error: Failure? = nil) { self.error = error }

    var count: Int { runs.withLock { $0 } }

    @Sendable func run() async throws {
      runs.withLock { $0 += 1 }
      started.fire()
      await gate.wait()
      if let error { throw error }
    }

    func waitUntilStarted() async { await started.wait() }
    func open() { gate.fire() }
  }

  @Test("a second close waits for the first one's work and throws what it threw")
  func secondCloseWaitsForTheFirst() async throws {
    let lifecycle = Lifecycle("Component")
    let work = GatedWork(throwing: Failure(name: "flush"))
    let first = Task { try await lifecycle.close(work.run) }
    await work.waitUntilStarted()
    #expect(lifecycle.isClosed)
    let secondEnded = Locked(false)
    let second = Task {
      defer { secondEnded.withLock { $0 = true } }
      try await lifecycle.close { Issue.record("a later close must not start work") }
    }
    #expect(!secondEnded.withLock { $0 }, "the work is still held")
    work.open()
    await #expect(throws: Failure(name: "flush")) { try await first.value }
    await #expect(throws: Failure(name: "flush")) { try await second.value }
    #expect(work.count == 1)
    await #expect(throws: Failure(name: "flush")) { try await lifecycle.close {} }
  }

  @Test("closing ends a run, whether it began before the run or after")
  func runEndsAtClose() async throws {
    let lifecycle = Lifecycle("Component")
    let running = Task { try await lifecycle.run(orUntil: nil) }
    try await lifecycle.close {}
    try await running.value
    #expect(!lifecycle.isRunning)
    // Already closed: a run returns at once.
    try await lifecycle.run(orUntil: nil)
  }

  @Test("a graceful shutdown ends a run, and cancels the work it ran meanwhile")
  func gracefulShutdownEndsARun() async throws {
    let lifecycle = Lifecycle("Component")
    let shutdown = OneShotSignal()
    let workStarted = OneShotSignal()
    let workEnded = Locked(false)
    let running = Task {
      try await lifecycle.run(orUntil: { await shutdown.wait() }) {
        workStarted.fire()
        await OneShotSignal().wait()  // returns when the run cancels it
        workEnded.withLock { $0 = true }
      }
    }
    await workStarted.wait()
    #expect(lifecycle.isRunning)
    shutdown.fire()
    try await running.value
    #expect(workEnded.withLock { $0 })
    #expect(!lifecycle.isClosed, "a run ends; its owner closes")
  }

  @Test("an owner that refuses a second run says so; another lets runs overlap")
  func secondRun() async throws {
    let refusing = Lifecycle("CacheChain", refusingSecondRunOf: "chain")
    let started = OneShotSignal()
    let running = Task { try await refusing.run(orUntil: nil) { started.fire() } }
    await started.wait()
    await #expect {
      try await refusing.run(orUntil: nil)
    } throws: { error in
      let error = error as? AsyncCacheError
      return error?.code == .invalidState && error?.message == "CacheChain.run(): the chain runs already"
    }
    try await refusing.close {}
    try await running.value

    let overlapping = Lifecycle("SQLiteLayer")
    let firstStarted = OneShotSignal()
    let first = Task { try await overlapping.run(orUntil: nil) { firstStarted.fire() } }
    await firstStarted.wait()
    let second = Task { try await overlapping.run(orUntil: nil) }
    #expect(overlapping.beginClosing())
    try await first.value
    try await second.value
  }

  @Test("a close the owner refuses (from inside work it would wait for) is thrown and leaves it open")
  func refusedCloseLeavesItOpen() async throws {
    let lifecycle = Lifecycle("LoadingCache")
    let refusal = AsyncCacheError.invalidState("LoadingCache.close() was called from a load")
    let began = Locked(0)
    await #expect {
      try await lifecycle.close(checking: { throw refusal }, atFirst: { began.withLock { $0 += 1 } }, {})
    } throws: { error in
      (error as? AsyncCacheError)?.message == refusal.message
    }
    #expect(!lifecycle.isClosed)
    #expect(began.withLock { $0 } == 0)
    let begin: () -> Void = { began.withLock { $0 += 1 } }
    try await lifecycle.close(atFirst: begin) {}
    try await lifecycle.close(atFirst: begin) {}
    #expect(lifecycle.isClosed)
    #expect(began.withLock { $0 } == 1)
  }

  @Test("cancelling a caller calls onCancel, and the work still ends before the caller returns")
  func cancelledCallerWaits() async throws {
    let lifecycle = Lifecycle("Component")
    let work = GatedWork()
    let cancelled = OneShotSignal()
    let closing = Task {
      try await lifecycle.close(onCancel: { cancelled.fire() }, work.run)
    }
    await work.waitUntilStarted()
    closing.cancel()
    await cancelled.wait()
    work.open()
    try await closing.value
    #expect(work.count == 1)
  }

  @Test("beginClosing answers true once, and ends the runs")
  func beginClosingOnce() async throws {
    let lifecycle = Lifecycle("RedisLayer")
    let running = Task { try await lifecycle.run(orUntil: nil) }
    #expect(lifecycle.beginClosing())
    #expect(!lifecycle.beginClosing())
    #expect(lifecycle.isClosed)
    try await running.value
  }
}
