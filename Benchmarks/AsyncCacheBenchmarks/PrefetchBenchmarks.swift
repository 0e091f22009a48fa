import AsyncCache
import Synchronization

/// The prefetcher's benchmarks: how much of a gallery it has ready in time, how fast a move
/// reaches the origin as a cancellation, and what a prefetch storm costs the urgent requests.
///
/// Their origins are simulated remote services (``SimulatedOrigin``): latencies are
/// `Task.sleep`, so the figures depend on the timer and the scheduler of the machine, and the
/// walks run in real time.
enum PrefetchBenchmarks {
  /// The window of a gallery: the next 5 items, starting with the one after the current.
  private static let galleryWindow = PrefetchWindow(direction: .upcoming, range: 5, offset: 1)

  // MARK: prefetch.gallery

  /// The latency of the gallery's origin.
  private static let galleryLatency = Duration.milliseconds(20)
  /// How long the user looks at each item.
  private static let galleryStep = Duration.milliseconds(50)
  /// The prefetcher's concurrent loads in the gallery: its default. One new item enters the
  /// window per step, and a load takes 20 ms of a 50 ms step, so one load at a time keeps up
  /// (measured: 1 gives the same share as 2); the second fills the window faster at the start.
  private static let galleryLoads = 2

  /// `prefetch.gallery`: a user swipes through a gallery, one item every 50 ms, whose origin
  /// takes 20 ms. On each arrival the UI peeks into memory (`cachedValue(for:)`), as it would to
  /// show the item without a placeholder, then requests it (`value(for:)`, urgent on a miss) and
  /// moves the prefetcher to it. The figure is the share of items the peek found in memory,
  /// against the same walk without a prefetcher.
  ///
  /// The first item cannot be prefetched (the window starts after the current item), so 200
  /// items give at most 99.5%, 40 items 97.5%.
  static func gallery(_ run: RunConfiguration) async throws -> [ResultRow] {
    let items = run.galleryItems
    let prefetched = try await galleryWalk(items: items, prefetching: true)
    let plain = try await galleryWalk(items: items, prefetching: false)
    let benchmark = Benchmark.prefetchGallery.rawValue
    let prefetcherName = "AsyncPrefetcher"
    let plainName = "no prefetcher"
    var rows = ResultRow.rows(
      benchmark: benchmark,
      measurements: [
        Measurement(name: prefetcherName, samples: [prefetched.hitPercent]),
        Measurement(name: plainName, samples: [plain.hitPercent]),
      ],
      baseline: plainName,
      target: .valueAtLeast(95),
      unit: .percent,
      notes: [
        "share of \(items) items in memory on arrival; one item every \(milliseconds(galleryStep)) ms, "
          + "origin \(milliseconds(galleryLatency)) ms, window 5 upcoming, \(galleryLoads) loads",
        "the first item cannot be prefetched",
      ]
    )
    rows.annotate(
      plainName,
      with: "\(prefetched.originFetches) origin fetches with the prefetcher, \(plain.originFetches) without"
    )
    let waitName = "\(prefetcherName): UI wait"
    let plainWaitName = "\(plainName): UI wait"
    rows += ResultRow.rows(
      benchmark: benchmark,
      measurements: [
        Measurement(name: waitName, samples: [prefetched.meanWait]),
        Measurement(name: plainWaitName, samples: [plain.meanWait]),
      ],
      baseline: plainWaitName,
      target: nil,
      unit: .milliseconds,
      notes: ["informational: mean time from arrival to the item's value, per item"]
    )
    return rows
  }

  /// What one gallery walk saw.
  private struct GalleryWalk {
    var items = 0
    /// Items that `cachedValue(for:)` found on arrival.
    var hits = 0
    /// The time from arrival to the value, summed over the items.
    var waited = Duration.zero
    /// The origin's fetches, prefetches included.
    var originFetches = 0

    var hitPercent: Double { items == 0 ? 0 : Double(hits) * 100 / Double(items) }
    /// The mean wait per item, in milliseconds.
    var meanWait: Double { items == 0 ? 0 : waited / .milliseconds(1) / Double(items) }
  }

  private static func galleryWalk(items: Int, prefetching: Bool) async throws -> GalleryWalk {
    let origin = SimulatedOrigin { _ in galleryLatency }
    let cache = try LoadingCache(
      layers: [MemoryLayer<Int, Int>(configuration: .init(countLimit: 100))],
      origin: origin
    )
    let keys = Array(0..<items)
    var walk: GalleryWalk
    if prefetching {
      let prefetcher = try AsyncPrefetcher(
        cache: cache,
        keys: keys,
        configuration: .init(window: galleryWindow, maximumConcurrentLoads: galleryLoads)
      )
      walk = try await withThrowingDiscardingTaskGroup { group in
        group.addTask { try await prefetcher.run() }
        let walk = try await walkGallery(keys, cache: cache, prefetcher: prefetcher)
        group.cancelAll()
        return walk
      }
    } else {
      walk = try await walkGallery(keys, cache: cache, prefetcher: nil)
    }
    walk.originFetches = origin.fetchCount
    return walk
  }

  /// Arrives at each item of `keys` in turn, one every ``galleryStep`` on a fixed schedule, as
  /// the UI of a gallery would.
  private static func walkGallery(
    _ keys: [Int],
    cache: LoadingCache<Int, Int>,
    prefetcher: AsyncPrefetcher<Int, Int>?
  ) async throws -> GalleryWalk {
    let clock = ContinuousClock()
    let start = clock.now
    var walk = GalleryWalk(items: keys.count)
    for (index, key) in keys.enumerated() {
      try await clock.sleep(until: start.advanced(by: galleryStep * index), tolerance: nil)
      let arrival = clock.now
      if cache.cachedValue(for: key) != nil { walk.hits += 1 }
      // The UI requests the item before it moves the prefetcher: the window starts after the
      // current item, so moving first would cancel a prefetch of this item still in flight,
      // whereas a request joins it (and promotes it).
      let value = try await cache.value(for: key)
      walk.waited += arrival.duration(to: clock.now)
      guard value == SimulatedOrigin.value(for: key) else {
        throw BenchmarkFailure("the gallery got \(value) for item \(key); expected \(SimulatedOrigin.value(for: key))")
      }
      await prefetcher?.setCurrentIndex(index)
    }
    return walk
  }

  // MARK: prefetch.cancelOnMove

  /// How far each move jumps: past the 5-item window, so that every load in flight leaves it.
  private static let moveDistance = 10

  /// `prefetch.cancelOnMove`: the time from an index move to the origin observing the
  /// cancellation of the loads that left the window. The prefetcher has its 2 loads in flight at
  /// an origin that never answers; the clock starts just before
  /// `await prefetcher.setCurrentIndex(_:)` and stops at the later of the two `onCancel`s of the
  /// origin's `withTaskCancellationHandler`. Against the floor: two tasks calling the same origin
  /// directly, cancelled with `Task.cancel()`.
  static func cancelOnMove(_ run: RunConfiguration) async throws -> [ResultRow] {
    let movesPerRepetition = (run.cancelMoves + run.repetitions - 1) / run.repetitions
    _ = try await prefetcherMoves(10)
    _ = try await taskCancellations(10)
    var prefetcher: [[Double]] = []
    var tasks: [[Double]] = []
    for _ in 0..<run.repetitions {
      prefetcher.append(try await prefetcherMoves(movesPerRepetition))
      tasks.append(try await taskCancellations(movesPerRepetition))
    }
    let benchmark = Benchmark.prefetchCancelOnMove.rawValue
    let moves = movesPerRepetition * run.repetitions
    return
      ResultRow.percentileRows(
        benchmark: benchmark,
        percentile: 50,
        (name: "AsyncPrefetcher", prefetcher),
        baseline: (name: "Task.cancel()", tasks),
        unit: .nanoseconds,
        target: nil,
        notes: [
          "\(moves) moves of \(moveDistance) items, each leaving 2 loads in flight at the origin behind; "
            + "ns from before setCurrentIndex to the later origin onCancel"
        ]
      )
      + ResultRow.percentileRows(
        benchmark: benchmark,
        percentile: 99,
        (name: "AsyncPrefetcher", prefetcher),
        baseline: (name: "Task.cancel()", tasks),
        unit: .nanoseconds,
        target: .valueAtMost(1_000_000),
        notes: []
      )
  }

  /// Moves a running prefetcher `count` times, each time once its 2 loads are at the origin;
  /// returns each move's latency in nanoseconds.
  private static func prefetcherMoves(_ count: Int) async throws -> [Double] {
    let origin = SimulatedOrigin { _ in .seconds(3_600) }
    let cache = try LoadingCache(layers: [MemoryLayer<Int, Int>(configuration: .init(countLimit: 100))], origin: origin)
    let keys = Array(0..<((count + 1) * moveDistance + galleryWindow.range + 1))
    let prefetcher = try AsyncPrefetcher(
      cache: cache,
      keys: keys,
      configuration: .init(window: galleryWindow, maximumConcurrentLoads: 2)
    )
    let latencies = try await withThrowingDiscardingTaskGroup { group in
      group.addTask { try await prefetcher.run() }
      let clock = ContinuousClock()
      var latencies: [Double] = []
      latencies.reserveCapacity(count)
      for move in 0..<count {
        let position = move * moveDistance
        // The window's 2 nearest items: the ones the prefetcher loads first.
        let loading = [keys[position + 1], keys[position + 2]]
        try await origin.waitUntil("the prefetcher's loads of \(loading) reach the origin") { origin in
          loading.allSatisfy(origin.started.contains)
        }
        let moved = clock.now
        await prefetcher.setCurrentIndex(position + moveDistance)
        let cancelled = try await origin.cancellationTimes(of: loading)
        latencies.append(moved.duration(to: cancelled.max()!).nanoseconds)
      }
      group.cancelAll()
      return latencies
    }
    let statistics = cache.statistics
    guard statistics.cancelledLoads >= 2 * count else {
      throw BenchmarkFailure(
        "\(count) moves cancelled \(statistics.cancelledLoads) loads; expected at least \(2 * count)"
      )
    }
    return latencies
  }

  /// The floor of ``prefetcherMoves(_:)``: `count` times, two tasks fetch from the origin and are
  /// cancelled once both are there; returns each round's latency in nanoseconds.
  private static func taskCancellations(_ count: Int) async throws -> [Double] {
    let origin = SimulatedOrigin { _ in .seconds(3_600) }
    let clock = ContinuousClock()
    var latencies: [Double] = []
    latencies.reserveCapacity(count)
    for round in 0..<count {
      let loading = [2 * round, 2 * round + 1]
      let tasks = loading.map { key in Task { try await origin.fetch(key) } }
      try await origin.waitUntil("the fetches of \(loading) reach the origin") { origin in
        loading.allSatisfy(origin.started.contains)
      }
      let cancelledAt = clock.now
      for task in tasks { task.cancel() }
      let cancelled = try await origin.cancellationTimes(of: loading)
      latencies.append(cancelledAt.duration(to: cancelled.max()!).nanoseconds)
      for task in tasks {
        guard case .failure(is CancellationError) = await task.result else {
          throw BenchmarkFailure("a cancelled fetch did not end with CancellationError")
        }
      }
    }
    return latencies
  }

  // MARK: prefetch.urgentLatency

  /// The connections of the urgent-latency benchmark's origin, as in an HTTP/1.1 client's pool.
  private static let connections = 6
  /// The time between two urgent requests (or bursts): new items appear on screen.
  private static let requestInterval = Duration.milliseconds(40)
  /// The requests of a burst in the informational rows: a row of a grid appearing at once.
  private static let burst = 3
  /// The storm: a list view flung through its items, with a wide window.
  private static let stormWindow = PrefetchWindow(direction: .upcoming, range: 50, offset: 1)
  private static let stormLoads = 4
  private static let stormStep = Duration.milliseconds(50)
  private static let stormDistance = 25
  /// The first key of the storm's list; the urgent requests ask for keys below it.
  private static let stormKeyBase = 1_000_000

  /// `prefetch.urgentLatency`: the latency of urgent requests (`value(for:)` misses, one fresh key
  /// every 40 ms) against an origin of 5-20 ms per key that admits 6 fetches at a time (FIFO, like
  /// an HTTP/1.1 connection pool), while a prefetch storm runs through the same cache: a
  /// prefetcher over a long list with a 50-item window and 4 concurrent loads, whose index jumps
  /// 25 items every 50 ms (faster than it can load, so its loads never stop). Against the same
  /// requests, for the same keys, on an idle cache. Every run has a fresh cache, so every
  /// repetition replays the same keys with the same latencies (5 to 20 ms, evenly spread).
  ///
  /// Every request is a miss, as a newly shown item's image is. In the target rows they come one
  /// at a time, as the items of a gallery do; the informational rows send bursts of 3 at once, as
  /// a row of a grid appears, which with the storm's 4 fetches asks for more than the 6
  /// connections.
  static func urgentLatency(_ run: RunConfiguration) async throws -> [ResultRow] {
    let ticks = max(1, run.urgentRequests / run.repetitions)
    let benchmark = Benchmark.prefetchUrgentLatency.rawValue
    var rows: [ResultRow] = []
    for size in [1, burst] {
      // Every run has a fresh cache, so the same keys are misses in every run: each repetition
      // replays the same requests with the same latencies, 5 to 20 ms evenly, in a shuffled order.
      let requests = ticks * size
      var generator = SplitMix64(seed: 5)
      let latencies = (0..<requests).map { Duration.microseconds(5_000 + 15_000 * $0 / max(requests - 1, 1)) }
        .shuffled(using: &generator)
      let batches = (0..<ticks).map { tick in Array((tick * size)..<((tick + 1) * size)) }
      _ = try await urgentRequests(Array(batches.prefix(3)), latencies: latencies, duringStorm: true)
      _ = try await urgentRequests(Array(batches.prefix(3)), latencies: latencies, duringStorm: false)
      var storm: [UrgentRun] = []
      var idle: [UrgentRun] = []
      for _ in 0..<run.repetitions {
        storm.append(try await urgentRequests(batches, latencies: latencies, duringStorm: true))
        idle.append(try await urgentRequests(batches, latencies: latencies, duringStorm: false))
      }
      let allRequests = requests * run.repetitions
      let name = size == 1 ? "value(for:)" : "value(for:) x\(size)"
      let stormName = "\(name) during prefetch storm"
      let idleName = "\(name) on idle cache"
      let queued = storm.reduce(0) { $0 + $1.queuedForConnection }
      let idleQueued = idle.reduce(0) { $0 + $1.queuedForConnection }
      // The same key's latency in both runs of a repetition: what the storm added to each request.
      let added = zip(storm, idle).flatMap { storm, idle in
        storm.latencies.keys.map { storm.latencies[$0]! - idle.latencies[$0]! }
      }
      var notes = [
        size == 1
          ? "\(allRequests) misses, one every \(milliseconds(requestInterval)) ms; origin 5-20 ms per key, "
            + "\(connections) connections FIFO; storm: window \(stormWindow.range), \(stormLoads) loads, "
            + "+\(stormDistance) items every \(milliseconds(stormStep)) ms"
          : "informational: \(allRequests) misses in bursts of \(size) every \(milliseconds(requestInterval)) ms",
        "\(queued) of \(allRequests) urgent fetches queued for a connection (idle: \(idleQueued)); "
          + "added per request, same key: p50 \(format(percentile(50, of: added), decimals: 2)) ms, "
          + "p99 \(format(percentile(99, of: added), decimals: 2)) ms",
      ]
      if size == 1 {
        let stormFetches = storm.reduce(0) { $0 + $1.prefetchFetches }
        let stormSeconds = storm.reduce(0) { $0 + $1.duration / .seconds(1) }
        let atArrival = storm.flatMap(\.prefetchesAtOrigin)
        let meanAtArrival = Double(atArrival.reduce(0, +)) / Double(max(atArrival.count, 1))
        notes.append(
          "storm: \(stormFetches) prefetch fetches (\(format(Double(stormFetches) / stormSeconds, decimals: 0))/s), "
            + "\(format(meanAtArrival, decimals: 1)) at the origin on average when a request came"
        )
      }
      for rank in [50.0, 99] {
        rows += ResultRow.percentileRows(
          benchmark: benchmark,
          percentile: rank,
          (name: stormName, storm.map { Array($0.latencies.values) }),
          baseline: (name: idleName, idle.map { Array($0.latencies.values) }),
          unit: .milliseconds,
          target: size == 1 && rank == 50 ? .ratioAtMost(1.2) : nil,
          notes: rank == 50 ? notes : ["informational"]
        )
      }
    }
    return rows
  }

  /// What one run of urgent requests saw.
  private struct UrgentRun {
    /// Each request's latency, in milliseconds, by key.
    var latencies: [Int: Double] = [:]
    /// Urgent fetches that waited for a free connection.
    var queuedForConnection = 0
    /// Fetches of storm keys at the origin when each request (or burst) came.
    var prefetchesAtOrigin: [Int] = []
    /// Fetches of storm keys during the run.
    var prefetchFetches = 0
    /// The duration of the run.
    var duration = Duration.zero
  }

  /// Sends urgent requests for `batches` of keys, a batch every ``requestInterval``, its requests
  /// at once, to a fresh cache, with or without a prefetch storm running through it. The origin
  /// takes `latencies[key]` for the urgent keys.
  private static func urgentRequests(
    _ batches: [[Int]],
    latencies: [Duration],
    duringStorm: Bool
  ) async throws -> UrgentRun {
    let origin = SimulatedOrigin(connections: connections) { key in
      key < latencies.count ? latencies[key] : remoteLatency(of: key)
    }
    let cache = try LoadingCache(
      layers: [MemoryLayer<Int, Int>(configuration: .init(countLimit: 1_000))],
      origin: origin
    )
    let requests = batches.reduce(0) { $0 + $1.count }
    guard duringStorm else {
      let run = try await sendRequests(batches, cache: cache, origin: origin)
      guard origin.fetchCount == requests else {
        throw BenchmarkFailure("\(requests) requests on an idle cache made \(origin.fetchCount) origin fetches")
      }
      return run
    }
    // Enough items that the storm never reaches the end of its list.
    let stormKeys = Array(stormKeyBase..<(stormKeyBase + (batches.count + 40) * stormDistance + stormWindow.range))
    let prefetcher = try AsyncPrefetcher(
      cache: cache,
      keys: stormKeys,
      configuration: .init(window: stormWindow, maximumConcurrentLoads: stormLoads)
    )
    var run = try await withThrowingDiscardingTaskGroup { group in
      group.addTask { try await prefetcher.run() }
      group.addTask {
        // The user flings through the list: the index jumps on a fixed schedule.
        let clock = ContinuousClock()
        let start = clock.now
        var step = 0
        while true {
          step += 1
          do {
            try await clock.sleep(until: start.advanced(by: stormStep * step), tolerance: nil)
          } catch {
            return
          }
          await prefetcher.setCurrentIndex(step * stormDistance)
        }
      }
      try await origin.waitUntil("the storm has its \(stormLoads) loads at the origin") { origin in
        origin.inProgress >= stormLoads
      }
      let run = try await sendRequests(batches, cache: cache, origin: origin)
      group.cancelAll()
      return run
    }
    run.prefetchFetches = origin.fetchCount - requests
    guard run.prefetchFetches > batches.count else {
      throw BenchmarkFailure("the storm made only \(run.prefetchFetches) fetches during \(batches.count) ticks")
    }
    return run
  }

  private static func sendRequests(
    _ batches: [[Int]],
    cache: LoadingCache<Int, Int>,
    origin: SimulatedOrigin
  ) async throws -> UrgentRun {
    let clock = ContinuousClock()
    let start = clock.now
    var run = UrgentRun()
    for (index, batch) in batches.enumerated() {
      try await clock.sleep(until: start.advanced(by: requestInterval * index), tolerance: nil)
      run.prefetchesAtOrigin.append(origin.inProgress)
      // One task per request, as the views that show the items would each have.
      try await withThrowingTaskGroup(of: (key: Int, latency: Double).self) { group in
        for key in batch {
          group.addTask {
            let requested = clock.now
            let value = try await cache.value(for: key)
            let latency = requested.duration(to: clock.now) / .milliseconds(1)
            guard value == SimulatedOrigin.value(for: key) else {
              throw BenchmarkFailure("request \(key) got \(value); expected \(SimulatedOrigin.value(for: key))")
            }
            return (key, latency)
          }
        }
        for try await (key, latency) in group { run.latencies[key] = latency }
      }
    }
    run.duration = start.duration(to: clock.now)
    run.queuedForConnection = origin.queuedCount(among: batches.flatMap { $0 })
    return run
  }

  /// The latency of a remote fetch of a storm key: 5 to 20 ms, uniformly, the same for a key in
  /// every run.
  private static func remoteLatency(of key: Int) -> Duration {
    var generator = SplitMix64(seed: UInt64(truncatingIfNeeded: key))
    return .milliseconds(5) + .microseconds(Int(generator.next() % 15_001))
  }

  // MARK: Reporting

  private static func milliseconds(_ duration: Duration) -> String {
    format(duration / .milliseconds(1), decimals: 0)
  }
}

/// A simulated remote origin: each fetch sleeps for the key's latency (`Task.sleep`, so it ends
/// at once with `CancellationError` when its task is cancelled), optionally behind a limited pool
/// of connections. It records what the benchmarks check: the keys it started, when each fetch
/// saw its cancellation, which fetches had to wait for a connection. Benchmarks wait for what it
/// records with ``waitUntil(_:timeout:_:)``, without polling.
final class SimulatedOrigin: AsyncFetcher {
  /// What the origin saw so far.
  struct Record: Sendable {
    /// Every key whose fetch started.
    var started: Set<Int> = []
    /// Fetches started.
    var fetches = 0
    /// Fetches running now.
    var inProgress = 0
    /// When each cancelled key's fetch saw its cancellation first, from its `onCancel`.
    var cancelled: [Int: ContinuousClock.Instant] = [:]
    /// Keys whose fetch had to wait for a connection.
    var queued: Set<Int> = []
  }

  private struct Watcher {
    var id: Int
    var condition: @Sendable (Record) -> Bool
    var continuation: CheckedContinuation<Void, any Error>
  }

  private struct State {
    var record = Record()
    var watchers: [Watcher] = []
    var nextWatcherID = 0
  }

  private let state = Mutex(State())
  private let latency: @Sendable (Int) -> Duration
  private let connections: ConnectionPool?

  /// Creates an origin whose fetch of a key takes `latency(key)`, with at most `connections`
  /// fetches talking to it at once (the others wait their turn, first come first served), or
  /// any number when `nil`.
  init(connections: Int? = nil, latency: @escaping @Sendable (Int) -> Duration) {
    self.latency = latency
    self.connections = connections.map(ConnectionPool.init)
  }

  /// The value the origin returns for `key`.
  static func value(for key: Int) -> Int {
    key &* 31 &+ 7
  }

  func fetch(_ key: Int) async throws -> Int {
    update { record in
      record.started.insert(key)
      record.fetches += 1
      record.inProgress += 1
    }
    defer { update { $0.inProgress -= 1 } }
    return try await withTaskCancellationHandler {
      try await respond(to: key)
    } onCancel: {
      let now = ContinuousClock.now
      update { record in
        if record.cancelled[key] == nil { record.cancelled[key] = now }
      }
    }
  }

  private func respond(to key: Int) async throws -> Int {
    guard let connections else {
      try await Task.sleep(for: latency(key))
      return Self.value(for: key)
    }
    if try await connections.acquire() {
      update { $0.queued.insert(key) }
    }
    defer { connections.release() }
    try await Task.sleep(for: latency(key))
    return Self.value(for: key)
  }

  /// Fetches started so far.
  var fetchCount: Int { state.withLock { $0.record.fetches } }

  /// Fetches running now.
  var inProgress: Int { state.withLock { $0.record.inProgress } }

  /// How many of `keys` had to wait for a connection.
  func queuedCount(among keys: [Int]) -> Int {
    state.withLock { state in keys.count { state.record.queued.contains($0) } }
  }

  /// Waits until the fetches of every key of `keys` have seen their cancellation, and returns when
  /// each did.
  func cancellationTimes(of keys: [Int]) async throws -> [ContinuousClock.Instant] {
    try await waitUntil("the fetches of \(keys) see their cancellation") { record in
      keys.allSatisfy { record.cancelled[$0] != nil }
    }
    return state.withLock { state in keys.map { state.record.cancelled[$0]! } }
  }

  /// Returns once `condition` holds for what the origin recorded.
  ///
  /// - Throws: ``BenchmarkFailure`` naming `what` when it does not within `timeout`: the code
  ///   under test did not do what the benchmark waits for.
  func waitUntil(
    _ what: String,
    timeout: Duration = .seconds(30),
    _ condition: @escaping @Sendable (Record) -> Bool
  ) async throws {
    let met = try await withThrowingTaskGroup(of: Bool.self) { group in
      group.addTask {
        try await self.wait(for: condition)
        return true
      }
      group.addTask {
        try await Task.sleep(for: timeout)
        return false
      }
      let met = try await group.next()!
      group.cancelAll()
      return met
    }
    guard met else { throw BenchmarkFailure("timed out after \(timeout) waiting until \(what)") }
  }

  private func wait(for condition: @escaping @Sendable (Record) -> Bool) async throws {
    let id = state.withLock { state in
      state.nextWatcherID += 1
      return state.nextWatcherID
    }
    try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
        // Decided under the lock: the cancellation flag is set before `onCancel` runs, so either
        // this sees it, or `onCancel` finds the watcher.
        let outcome: Bool? = state.withLock { state in
          if condition(state.record) { return true }
          if Task.isCancelled { return nil }
          state.watchers.append(Watcher(id: id, condition: condition, continuation: continuation))
          return false
        }
        switch outcome {
        case true?: continuation.resume()
        case nil: continuation.resume(throwing: CancellationError())
        case false?: break
        }
      }
    } onCancel: {
      let watcher = state.withLock { state in
        state.watchers.firstIndex { $0.id == id }.map { state.watchers.remove(at: $0) }
      }
      watcher?.continuation.resume(throwing: CancellationError())
    }
  }

  /// Applies `change` to the record and resumes the watchers whose condition now holds.
  private func update(_ change: (inout Record) -> Void) {
    let ready = state.withLock { state -> [CheckedContinuation<Void, any Error>] in
      change(&state.record)
      guard !state.watchers.isEmpty else { return [] }
      var ready: [CheckedContinuation<Void, any Error>] = []
      state.watchers.removeAll { watcher in
        guard watcher.condition(state.record) else { return false }
        ready.append(watcher.continuation)
        return true
      }
      return ready
    }
    for continuation in ready { continuation.resume() }
  }
}

/// A limited number of connections, handed out first come first served, as an HTTP/1.1 client
/// pool does; waiting for one ends with `CancellationError` when the task is cancelled.
final class ConnectionPool: Sendable {
  private struct State {
    var available: Int
    var waiters: [(id: Int, continuation: CheckedContinuation<Void, any Error>)] = []
    var nextID = 0
  }

  private let state: Mutex<State>

  /// Creates a pool of `connections` connections.
  init(_ connections: Int) {
    state = Mutex(State(available: connections))
  }

  /// Takes a connection, waiting for one if none is free; give it back with ``release()``.
  /// Returns whether it had to wait.
  func acquire() async throws -> Bool {
    let id: Int? = state.withLock { state in
      if state.available > 0 {
        state.available -= 1
        return nil
      }
      state.nextID += 1
      return state.nextID
    }
    guard let id else { return false }
    try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
        let outcome: Bool? = state.withLock { state in
          if Task.isCancelled { return nil }
          // A connection came back in between, and nobody queued before: take it.
          if state.available > 0, state.waiters.isEmpty {
            state.available -= 1
            return true
          }
          state.waiters.append((id, continuation))
          return false
        }
        switch outcome {
        case true?: continuation.resume()
        case nil: continuation.resume(throwing: CancellationError())
        case false?: break
        }
      }
    } onCancel: {
      let waiter = state.withLock { state in
        state.waiters.firstIndex { $0.id == id }.map { state.waiters.remove(at: $0) }
      }
      waiter?.continuation.resume(throwing: CancellationError())
    }
    return true
  }

  /// Gives a connection back: to the longest waiter, if any.
  func release() {
    let next = state.withLock { state -> CheckedContinuation<Void, any Error>? in
      guard !state.waiters.isEmpty else {
        state.available += 1
        return nil
      }
      return state.waiters.removeFirst().continuation
    }
    next?.resume()
  }
}
