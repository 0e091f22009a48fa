import AsyncCache
import Synchronization

/// The request-coalescing benchmark.
enum CoalescingBenchmarks {
  /// The one key every request asks for.
  private static let key = 42

  /// How a fan-in spawns its requests.
  private enum Spawning {
    /// One unstructured task per request, awaited in spawn order: the coalescer's own cost.
    case tasks
    /// Child tasks of one task group. The Swift 6.3 runtime detaches a finished child by walking
    /// the group's children from the oldest, so unless the requests finish in the order they were
    /// spawned the group costs O(n^2) and dominates: the figure then mostly reflects the order in
    /// which the coalescer resumes its waiters.
    case taskGroup
  }

  /// `coalescing.fanIn`: many concurrent requests for one uncached key, whose origin is held
  /// until all of them wait, then released. The time runs from spawning the requests until every
  /// one has its value, and is reported per request.
  ///
  /// Every repetition uses a fresh cache, so the value is never already cached, and fails unless
  /// the origin was called exactly once.
  static func fanIn(_ run: RunConfiguration) async throws -> [ResultRow] {
    let waiters = run.fanInWaiters
    let contenders = [
      Contender(name: "LoadingCache", operations: waiters) {
        try await loadingCacheFanIn(waiters: waiters, spawning: .tasks)
      },
      Contender(name: "naive-coalescer", operations: waiters) {
        try await naiveFanIn(waiters: waiters, spawning: .tasks)
      },
      Contender(name: "LoadingCache (task group)", operations: waiters) {
        try await loadingCacheFanIn(waiters: waiters, spawning: .taskGroup)
      },
      Contender(name: "naive-coalescer (task group)", operations: waiters) {
        try await naiveFanIn(waiters: waiters, spawning: .taskGroup)
      },
    ]
    let measurements = try await measureInterleaved(contenders, repetitions: run.repetitions)
    let benchmark = Benchmark.coalescingFanIn.rawValue
    return ResultRow.rows(
      benchmark: benchmark,
      measurements: Array(measurements[0..<2]),
      baseline: "naive-coalescer",
      target: .ratioAtMost(1.5),
      notes: ["\(abbreviated(waiters)) waiters on one key, one task each; ns per waiter"]
    )
      + ResultRow.rows(
        benchmark: benchmark,
        measurements: Array(measurements[2..<4]),
        baseline: "naive-coalescer (task group)",
        target: nil,
        notes: ["informational: child tasks of one group; O(n^2) runtime detach unless resumed FIFO"]
      )
  }

  private static func loadingCacheFanIn(waiters: Int, spawning: Spawning) async throws -> Duration {
    let gate = Gate()
    let originCalls = CallCounter()
    let cache = try LoadingCache(
      layers: [MemoryLayer<Int, Int>(configuration: .init(countLimit: 16))],
      origin: ClosureFetcher { (key: Int) async throws -> Int in
        originCalls.record()
        await gate.wait()
        return key
      }
    )
    let elapsed = try await timed(expecting: key * waiters) {
      try await fanIn(
        waiters: waiters,
        spawning: spawning,
        request: { try await cache.value(for: key) },
        joined: { cache.waitingRequestCount(for: key) },
        release: gate.open
      )
    }
    let statistics = cache.statistics
    guard originCalls.count == 1, statistics.loads == 1, statistics.coalescedRequests == waiters - 1 else {
      throw BenchmarkFailure(
        "LoadingCache called the origin \(originCalls.count) times for \(waiters) concurrent requests "
          + "(\(statistics.loads) loads, \(statistics.coalescedRequests) coalesced requests); expected exactly 1"
      )
    }
    return elapsed
  }

  private static func naiveFanIn(waiters: Int, spawning: Spawning) async throws -> Duration {
    let gate = Gate()
    let originCalls = CallCounter()
    let coalescer = NaiveCoalescer { key in
      originCalls.record()
      await gate.wait()
      return key
    }
    let elapsed = try await timed(expecting: key * waiters) {
      try await fanIn(
        waiters: waiters,
        spawning: spawning,
        request: { try await coalescer.value(for: key) },
        joined: { coalescer.joinedRequests },
        release: gate.open
      )
    }
    guard originCalls.count == 1 else {
      throw BenchmarkFailure("the naive coalescer called the origin \(originCalls.count) times; expected exactly 1")
    }
    return elapsed
  }

  /// Spawns `waiters` concurrent `request`s, waits until `joined()` reports that all of them wait,
  /// calls `release`, and returns the sum of their answers.
  private static func fanIn(
    waiters: Int,
    spawning: Spawning,
    request: @escaping @Sendable () async throws -> Int,
    joined: () -> Int,
    release: () -> Void
  ) async throws -> Int {
    func awaitJoins() async throws {
      let allJoined = await poll(until: { joined() >= waiters }, timeout: .seconds(60))
      // Released even when not all joined: a request left waiting would never finish.
      release()
      guard allJoined else {
        throw BenchmarkFailure("only \(joined()) of \(waiters) requests joined the load within 60 s")
      }
    }
    switch spawning {
    case .tasks:
      let tasks = (0..<waiters).map { _ in Task(operation: request) }
      try await awaitJoins()
      var sum = 0
      for task in tasks { sum &+= try await task.value }
      return sum
    case .taskGroup:
      return try await withThrowingTaskGroup(of: Int.self) { group in
        for _ in 0..<waiters { group.addTask(operation: request) }
        try await awaitJoins()
        return try await group.reduce(0, &+)
      }
    }
  }

  /// Checks `condition` between yields until it holds (`true`) or `timeout` passes (`false`).
  ///
  /// Polling is acceptable in a benchmark, whose spawned requests are the only other work; tests
  /// must wait for an event instead.
  private static func poll(until condition: () -> Bool, timeout: Duration) async -> Bool {
    let clock = ContinuousClock()
    let deadline = clock.now.advanced(by: timeout)
    while !condition() {
      guard clock.now < deadline else { return false }
      await Task.yield()
    }
    return true
  }
}

/// A one-shot gate: ``wait()`` suspends until ``open()`` is called (or returns at once after), with
/// no sleeping and no polling, so that an origin can be held until every request has joined.
final class Gate: Sendable {
  private struct State {
    var isOpen = false
    var waiters: [CheckedContinuation<Void, Never>] = []
  }

  private let state = Mutex(State())

  /// Suspends until the gate is open.
  func wait() async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
      let isOpen = state.withLock { state in
        if !state.isOpen { state.waiters.append(continuation) }
        return state.isOpen
      }
      if isOpen { continuation.resume() }
    }
  }

  /// Opens the gate and resumes everyone waiting at it.
  func open() {
    let waiters = state.withLock { state in
      state.isOpen = true
      defer { state.waiters = [] }
      return state.waiters
    }
    // Resumed outside the lock: a resumed task may come straight back to the gate.
    for waiter in waiters { waiter.resume() }
  }
}
