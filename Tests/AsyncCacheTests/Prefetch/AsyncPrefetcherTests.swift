import AsyncCacheTesting
import TestSupport
import Testing

@testable import AsyncCache

@Suite("AsyncPrefetcher", .timeLimit(.minutes(3)))
struct AsyncPrefetcherTests {
  typealias Prefetcher = AsyncPrefetcher<String, String>

  static let keys = (0..<10).map { "k\($0)" }

  static func configuration(
    _ direction: PrefetchWindow.Direction = .upcoming, range: Int = 2, offset: Int = 1, limit: Int = 2,
    destination: Prefetcher.Destination = .allLayers
  ) -> Prefetcher.Configuration {
    .init(
      window: PrefetchWindow(direction: direction, range: range, offset: offset), maximumConcurrentLoads: limit,
      destination: destination)
  }

  // MARK: Loading the window

  @Test("the window loads nearest first within the limit; cached keys are skipped without asking lower layers")
  func loadsTheWindow() async throws {
    let origin = TrackingFetcher()
    let lower = RecordingLayer(try MemoryLayer<String, String>())
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>(), lower], origin: origin)
    try await cache.insert("cached", for: "k2")
    lower.clearCalls()
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration(range: 3))
    var updates = UpdateReader(prefetcher.events())
    let run = Task { try await prefetcher.run() }

    await origin.gate.waitForFetches(1, for: "k1")
    await origin.gate.waitForFetches(1, for: "k3")
    #expect(Set(origin.gate.heldKeys) == ["k1", "k3"])
    origin.gate.releaseAll()
    let last = await updates.read { $0.progress.completed == 3 }
    #expect(last?.progress == PrefetchProgress(completed: 3, total: 3, currentIndex: 0, isPaused: false))
    #expect(Array(updates.events.prefix(4)) == ["moved 0", "started k1", "started k2", "skipped k2"])
    #expect(Set(updates.events.dropFirst(4)) == ["started k3", "loaded k1", "loaded k3"])
    #expect(!lower.calls.contains(.entry("k2")), "a key in memory costs no lookup below")
    #expect(cache.cachedValue(for: "k1") == "value of k1" && cache.cachedValue(for: "k3") == "value of k3")
    #expect(await prefetcher.progress.fractionCompleted == 1)

    run.cancel()
    try await run.value
    #expect(origin.callCount == 2)
  }

  @Test("a value in a lower layer is copied up into memory and counts as loaded")
  func lowerLayerHit() async throws {
    let origin = TrackingFetcher()
    let lower = try MemoryLayer<String, String>()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>(), lower], origin: origin)
    try lower.insert(CacheEntry("from below"), for: "k1")
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration(range: 1))
    var updates = UpdateReader(prefetcher.events())
    let run = Task { try await prefetcher.run() }
    _ = await updates.read { $0.event.key == "k1" && $0.progress.completed == 1 }
    #expect(updates.events.last == "loaded k1")
    #expect(cache.cachedValue(for: "k1") == "from below")
    #expect(origin.callCount == 0)
    run.cancel()
    try await run.value
  }

  @Test("at both ends of the list the window holds only the items that exist")
  func listEnds() async throws {
    let origin = TrackingFetcher()
    origin.gate.open()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: origin)
    let prefetcher = try Prefetcher(
      cache: cache, keys: Self.keys, currentIndex: 9, configuration: Self.configuration(.both, range: 3, limit: 1))
    var updates = UpdateReader(prefetcher.events())
    let run = Task { try await prefetcher.run() }
    _ = await updates.read { $0.progress.completed == 3 }
    #expect(updates.events.filter { $0.hasPrefix("started") } == ["started k8", "started k7", "started k6"])
    await prefetcher.setCurrentIndex(-4)
    _ = await updates.read { $0.progress.completed == 3 && $0.progress.currentIndex == 0 }
    #expect(updates.events.filter { $0.hasPrefix("started") }.suffix(3) == ["started k1", "started k2", "started k3"])
    run.cancel()
    try await run.value
  }

  @Test(
    "while it runs, the prefetcher keeps room in the memory layer's admission window for twice its reach, each side")
  func reservesTheAdmissionWindow() async throws {
    let origin = TrackingFetcher()
    origin.gate.open()
    let memory = try MemoryLayer<String, String>()
    let cache = try LoadingCache(layers: [memory], origin: origin)
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration(.both, range: 3))
    var updates = UpdateReader(prefetcher.events())
    #expect(memory.store.windowFloor.load(ordering: .relaxed) == 0)
    let run = Task { try await prefetcher.run() }
    _ = await updates.read { $0.progress.completed == 3 }
    // Both sides, each reaching 1 + 3 items away.
    #expect(memory.store.windowFloor.load(ordering: .relaxed) == 16)
    await prefetcher.stop()
    try await run.value
    #expect(memory.store.windowFloor.load(ordering: .relaxed) == 0)
    // Values kept below the top layer need no room in it.
    let twoLayers = try LoadingCache(layers: [memory, try MemoryLayer<String, String>()], origin: origin)
    let below = try Prefetcher(
      cache: twoLayers, keys: Self.keys, configuration: Self.configuration(destination: .lowerLayers))
    var belowUpdates = UpdateReader(below.events())
    let belowRun = Task { try await below.run() }
    _ = await belowUpdates.read { _ in true }
    #expect(memory.store.windowFloor.load(ordering: .relaxed) == 0)
    await below.stop()
    try await belowRun.value
  }

  /// Walks a gallery of 300 items (three times the layer's size) over `memory` with a
  /// prefetcher of 5 items after `offset`, as a UI does: at each item, once the window ahead of
  /// the one before has loaded, it peeks into memory, requests the item and moves the
  /// prefetcher. Returns the items the peek found, and the origin's calls.
  static func walkGallery(over memory: MemoryLayer<String, String>, offset: Int = 1) async throws -> (
    found: Int, originCalls: Int
  ) {
    let keys = (0..<300).map { "k\($0)" }
    let origin = TrackingFetcher()
    origin.gate.open()
    let cache = try LoadingCache(layers: [memory], origin: origin)
    let prefetcher = try Prefetcher(
      cache: cache, keys: keys, configuration: Self.configuration(range: 5, offset: offset))
    var updates = UpdateReader(prefetcher.events())
    let run = Task { try await prefetcher.run() }
    var found = 0
    for (index, key) in keys.enumerated() {
      let loaded = await updates.read {
        $0.progress.currentIndex == max(index - 1, 0) && $0.progress.completed == $0.progress.total
      }
      #expect(loaded != nil)
      if cache.cachedValue(for: key) != nil { found += 1 }
      _ = try await cache.value(for: key)
      await prefetcher.setCurrentIndex(index)
    }
    await prefetcher.stop()
    try await run.value
    return (found, origin.callCount)
  }

  @Test(
    "a gallery walked item by item finds every item after the first in memory, whatever the layer's policy",
    arguments: [EvictionPolicy.adaptive, .windowTinyLFU, .leastRecentlyUsed])
  func gallery(policy: EvictionPolicy) async throws {
    // The items loaded ahead must win their place at admission against the items already read
    // (read twice each), which a 1% window alone does not give.
    var configuration = MemoryLayer<String, String>.Configuration(countLimit: 100)
    configuration.evictionPolicy = policy
    let walk = try await Self.walkGallery(over: try MemoryLayer(configuration: configuration))
    #expect(walk.found == 299)
    #expect(walk.originCalls == 300)
  }

  @Test(
    "a gallery over a layer bounded by cost finds every item in memory, whatever the window's offset",
    arguments: [1, 3])
  func galleryBoundedByCost(offset: Int) async throws {
    // 100 items of cost 10 fill the layer; its count limit (the default 10,000) bounds nothing.
    // One segment: the automatic count follows the count limit, and would make segments of a
    // few items each here.
    let memory = try MemoryLayer<String, String>(
      configuration: .init(costLimit: 1_000, cost: { _ in 10 }, segmentCount: 1))
    let walk = try await Self.walkGallery(over: memory, offset: offset)
    // The items within the offset of the start are not prefetched (the window starts after).
    #expect(walk.found == 300 - offset)
    #expect(walk.originCalls == 300)
  }

  @Test("a failed load reports its error, counts as done, and is not retried in the same window")
  func failure() async throws {
    let origin = TrackingFetcher()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: origin)
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration(range: 1))
    var updates = UpdateReader(prefetcher.events())
    let run = Task { try await prefetcher.run() }
    await origin.gate.waitForFetches(1, for: "k1")
    origin.gate.release("k1", throwing: TestError("offline"))
    let failed = await updates.read { $0.event.key == "k1" && $0.progress.completed == 1 }
    guard case .failed(_, let error)? = failed?.event else {
      Issue.record("expected a failure, got \(String(describing: failed?.event))")
      return
    }
    #expect(error as? TestError == TestError("offline"))
    run.cancel()
    try await run.value
    #expect(origin.callCount(for: "k1") == 1)
  }

  // MARK: Moving

  @Test("moving the index cancels the loads that left the window before it returns, and starts the new ones")
  func moveCancels() async throws {
    let origin = TrackingFetcher()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: origin)
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration())
    var updates = UpdateReader(prefetcher.events())
    let run = Task { try await prefetcher.run() }
    await origin.gate.waitForFetches(1, for: "k1")
    await origin.gate.waitForFetches(1, for: "k2")

    await prefetcher.setCurrentIndex(3)
    #expect(origin.gate.wasCancelled("k1"), "the origin saw the cancellation before setCurrentIndex returned")
    #expect(origin.gate.wasCancelled("k2"))
    await origin.gate.waitForFetches(1, for: "k4")
    await origin.gate.waitForFetches(1, for: "k5")
    await prefetcher.setCurrentIndex(7)
    #expect(origin.gate.cancellationCount() == 4)
    await origin.gate.waitForFetches(1, for: "k8")
    await origin.gate.waitForFetches(1, for: "k9")
    origin.gate.releaseAll()
    _ = await updates.read { $0.progress == PrefetchProgress(completed: 2, total: 2, currentIndex: 7, isPaused: false) }
    #expect(["cancelled k1", "cancelled k2", "cancelled k4", "cancelled k5"].allSatisfy(updates.events.contains))
    #expect(cache.cachedValue(for: "k1") == nil, "a cancelled load stores nothing")
    #expect(cache.statistics.cancelledLoads == 4)
    run.cancel()
    try await run.value
  }

  @Test("moving onto a key being prefetched keeps its load for the request that follows; moving on cancels it")
  func movingOntoAPrefetch() async throws {
    let origin = TrackingFetcher()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: origin)
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration())
    let run = Task { try await prefetcher.run() }
    await origin.gate.waitForFetches(1, for: "k1")
    await origin.gate.waitForFetches(1, for: "k2")

    // A UI moves the index first, then requests the item on screen.
    await prefetcher.setCurrentIndex(1)
    #expect(!origin.gate.wasCancelled("k1"), "k1 is on screen: its load goes on")
    let request = Task { try await cache.value(for: "k1") }
    await cache.waitForRequests(2, for: "k1")
    origin.gate.release("k1")
    #expect(try await request.value == "value of k1")
    #expect(origin.callCount(for: "k1") == 1, "the request joined the prefetch")

    await origin.gate.waitForFetches(1, for: "k3")
    await prefetcher.setCurrentIndex(2)
    #expect(!origin.gate.wasCancelled("k2"))
    await prefetcher.setCurrentIndex(6)
    #expect(origin.gate.wasCancelled("k2"), "k2 left the screen without being requested: cancelled")
    #expect(origin.gate.wasCancelled("k3"))
    origin.gate.open()
    run.cancel()
    try await run.value
  }

  @Test("a load a request also waits for is not cancelled when its key leaves the window")
  func foregroundWaiterKeepsTheLoad() async throws {
    let origin = TrackingFetcher()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: origin)
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration(range: 1))
    var updates = UpdateReader(prefetcher.events())
    let run = Task { try await prefetcher.run() }
    await origin.gate.waitForFetches(1, for: "k1")
    let request = Task { try await cache.value(for: "k1") }
    await cache.waitForRequests(2, for: "k1")

    await prefetcher.setCurrentIndex(5)
    #expect(!origin.gate.wasCancelled("k1"))
    #expect(origin.gate.release("k1") == 1)
    #expect(try await request.value == "value of k1")
    #expect(cache.cachedValue(for: "k1") == "value of k1")
    _ = await updates.read { $0.event.key == "k6" && $0.progress.completed == 0 }
    #expect(updates.events.contains("cancelled k1"))
    #expect(origin.callCount(for: "k1") == 1)
    origin.gate.open()
    run.cancel()
    try await run.value
  }

  @Test("replacing the keys keeps the loads of keys still in the window")
  func setKeys() async throws {
    let origin = TrackingFetcher()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: origin)
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration())
    let run = Task { try await prefetcher.run() }
    await origin.gate.waitForFetches(1, for: "k1")
    await origin.gate.waitForFetches(1, for: "k2")
    await prefetcher.setKeys(["new", "k2", "k1", "other"], currentIndex: 0)
    #expect(!origin.gate.wasCancelled("k1") && !origin.gate.wasCancelled("k2"))
    await prefetcher.setKeys(["x", "k1"], currentIndex: 0)
    #expect(origin.gate.wasCancelled("k2") && !origin.gate.wasCancelled("k1"))
    #expect(await prefetcher.keys == ["x", "k1"])
    origin.gate.open()
    run.cancel()
    try await run.value
  }

  @Test("an origin's own CancellationError is a failure: the key is not asked for again and again")
  func originCancellationIsAFailure() async throws {
    let origin = TrackingFetcher()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: origin)
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration(range: 1))
    var updates = UpdateReader(prefetcher.events())
    let run = Task { try await prefetcher.run() }
    await origin.gate.waitForFetches(1, for: "k1")
    origin.gate.release("k1", throwing: CancellationError())  // a timeout of the origin's own
    let failed = await updates.read { $0.progress.completed == 1 }
    #expect(updates.events.last == "failed k1")
    #expect(failed?.event.key == "k1")
    #expect(origin.callCount(for: "k1") == 1)
    run.cancel()
    try await run.value
  }

  @Test("a cancelled load stops counting at once, though its origin does not let go; run() waits for it")
  func cancelledLoadsFreeTheirSlotAtOnce() async throws {
    let origin = StubbornFetcher<String, Int> { _ in 0 }
    let cache = try LoadingCache(layers: [try MemoryLayer<String, Int>()], origin: origin)
    let prefetcher = try AsyncPrefetcher<String, Int>(
      cache: cache, keys: Self.keys,
      configuration: .init(window: PrefetchWindow(range: 1), maximumConcurrentLoads: 1))
    var updates = UpdateReader(prefetcher.events())
    let run = Task { try await prefetcher.run() }
    await origin.waitForCalls(1)  // k1
    await prefetcher.setCurrentIndex(3)  // k1 is cancelled, but its origin call goes on
    _ = await updates.read { $0.event.key == "k4" }
    #expect(updates.events.suffix(3) == ["moved 3", "cancelled k1", "started k4"], "k4 did not wait for k1")
    await origin.waitForCalls(2)
    origin.finish(call: 2, with: 4)
    let loaded = await updates.read { UpdateReader.describe($0.event) == "loaded k4" }
    #expect(loaded?.progress.completed == 1)
    #expect(cache.cachedValue(for: "k4") == 4)
    // Structured: the prefetcher's run returns once k1's call, which ignored its cancellation,
    // has ended; its late value is not stored (a fresh load may follow).
    run.cancel()
    origin.finish(call: 1, with: 1)
    try await run.value
    #expect(cache.cachedValue(for: "k1") == nil)
    #expect(cache.statistics.loadsInFlight == 0)
  }

  @Test("stop() right after a move starts nothing more")
  func stopAfterMove() async throws {
    let origin = TrackingFetcher()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: origin)
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration(range: 1))
    let subscription = prefetcher.events()
    let updates = Task { await UpdateReader(subscription).readToEnd() }
    try await prefetcher.start()
    await origin.gate.waitForFetches(1, for: "k1")
    await Self.move(prefetcher, to: 5, thenStop: true)
    let events = await updates.value
    #expect(!events.contains("started k6"), "\(events)")
    #expect(events.suffix(2) == ["moved 5", "cancelled k1"])
  }

  /// Moves and stops in one turn of the prefetcher's actor: its run loop cannot start a load
  /// in between.
  static func move(_ prefetcher: isolated Prefetcher, to index: Int, thenStop: Bool) async {
    prefetcher.setCurrentIndex(index)
    if thenStop { await prefetcher.stop() }
  }

  // MARK: Urgent and background work

  @Test("while a request's load is in flight no prefetch starts; prefetching resumes when it ends")
  func pausesUnderUrgentLoad() async throws {
    let origin = TrackingFetcher()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: origin)
    let urgent = Task { try await cache.value(for: "on screen") }
    await origin.gate.waitForFetches(1, for: "on screen")
    #expect(cache.hasUrgentLoads)

    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration(limit: 1))
    var updates = UpdateReader(prefetcher.events())
    let run = Task { try await prefetcher.run() }
    _ = await updates.read { $0.event.isPaused }
    #expect(await prefetcher.isPaused)
    await prefetcher.setCurrentIndex(3)
    origin.gate.release("on screen")
    #expect(try await urgent.value == "value of on screen")
    _ = await updates.read { $0.event.key == "k4" }
    #expect(updates.events == ["moved 0", "paused", "moved 3", "resumed", "started k4"])
    await origin.gate.waitForFetches(1, for: "k4")
    #expect(origin.calls == ["on screen", "k4"])
    origin.gate.open()
    run.cancel()
    try await run.value
  }

  @Test("a request that joins a prefetch promotes it: it runs at the request's priority and lands in memory")
  func promotion() async throws {
    let origin = TrackingFetcher()
    let lower = try MemoryLayer<String, String>()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>(), lower], origin: origin)
    let prefetcher = try Prefetcher(
      cache: cache, keys: Self.keys, configuration: Self.configuration(destination: .lowerLayers))
    var updates = UpdateReader(prefetcher.events())
    let run = Task { try await prefetcher.run() }
    await origin.gate.waitForFetches(1, for: "k1")
    await origin.gate.waitForFetches(1, for: "k2")
    #expect(!cache.hasUrgentLoads, "prefetches are background work")

    let request = Task(priority: .high) { try await cache.value(for: "k1") }
    await cache.waitForRequests(2, for: "k1")
    #expect(cache.hasUrgentLoads, "the request made k1's load urgent")
    _ = await updates.read { $0.event.isPaused }
    origin.gate.releaseAll()
    #expect(try await request.value == "value of k1")
    _ = await updates.read { $0.progress.completed == 2 }
    #expect(try #require(origin.gate.releasedPriorities(for: "k1").first) >= .high)
    #expect(try #require(origin.gate.releasedPriorities(for: "k2").first) < .high)
    #expect(cache.cachedValue(for: "k1") == "value of k1", "the promoted load stored in every layer")
    #expect(cache.cachedValue(for: "k2") == nil, "a lower-layers prefetch leaves memory alone")
    #expect(lower.value(for: "k2") == "value of k2")
    run.cancel()
    try await run.value
  }

  @Test("a demoted load waits for urgent work before it asks the origin again; a request promotes it")
  func demotion() async throws {
    let clock = ManualClock()
    let origin = TrackingFetcher()
    let policy = RetryPolicy(maximumAttempts: 3, initialDelay: .milliseconds(100), jitter: 0)
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, String>()], origin: origin,
      configuration: .init(clock: clock, retryPolicy: policy))
    let scrolledAway = Task { try await cache.value(for: "d") }
    await origin.gate.waitForFetches(1, for: "d")
    origin.gate.release("d", throwing: TestError("flaky"))
    await clock.waitForSleepers(1)

    #expect(cache.demote("d"))
    #expect(!cache.demote("d"), "demoting twice changes nothing")
    #expect(!cache.hasUrgentLoads)
    let onScreen = Task { try await cache.value(for: "u") }
    await origin.gate.waitForFetches(1, for: "u")
    clock.advance(by: .milliseconds(100))
    await cache.waitForLoadsWaitingForUrgentWork(1)
    #expect(origin.callCount(for: "d") == 1, "the retry holds back while urgent work runs")
    #expect(cache.statistics.loadsWaitingForUrgentWork == 1)

    origin.gate.release("u")
    #expect(try await onScreen.value == "value of u")
    await origin.gate.waitForFetches(1, for: "d")
    origin.gate.release("d")
    #expect(try await scrolledAway.value == "value of d")
    #expect(cache.statistics.loadsWaitingForUrgentWork == 0)
  }

  /// A request for "d" whose first attempt failed, demoted during its retry delay; an urgent
  /// request for "u" held at the origin; "d"'s retry due and held at the gate.
  static func demotedLoadHeldAtTheGate() async throws -> (
    cache: LoadingCache<String, String>, origin: TrackingFetcher,
    demoted: Task<String, any Error>, onScreen: Task<String, any Error>
  ) {
    let clock = ManualClock()
    let origin = TrackingFetcher()
    let policy = RetryPolicy(maximumAttempts: 3, initialDelay: .milliseconds(100), jitter: 0)
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, String>()], origin: origin,
      configuration: .init(clock: clock, retryPolicy: policy))
    let demoted = Task { try await cache.value(for: "d") }
    await origin.gate.waitForFetches(1, for: "d")
    origin.gate.release("d", throwing: TestError("flaky"))
    await clock.waitForSleepers(1)
    cache.demote("d")
    let onScreen = Task { try await cache.value(for: "u") }
    await origin.gate.waitForFetches(1, for: "u")
    clock.advance(by: .milliseconds(100))
    await cache.waitForLoadsWaitingForUrgentWork(1)
    return (cache, origin, demoted, onScreen)
  }

  @Test("a request for a demoted key held back by urgent work promotes it at once")
  func demotedThenRequested() async throws {
    let (cache, origin, first, onScreen) = try await Self.demotedLoadHeldAtTheGate()
    let again = Task { try await cache.value(for: "d") }
    await origin.gate.waitForFetches(1, for: "d")
    #expect(origin.gate.heldCount(for: "u") == 1, "the urgent load still runs")
    origin.gate.releaseAll()
    #expect(try await [first.value, again.value] == ["value of d", "value of d"])
    #expect(try await onScreen.value == "value of u")
    #expect(origin.callCount(for: "d") == 2)
  }

  @Test("a background load whose request was cancelled leaves the gate at once")
  func cancelledAtTheGate() async throws {
    let (cache, origin, demoted, onScreen) = try await Self.demotedLoadHeldAtTheGate()
    demoted.cancel()
    await #expect(throws: CancellationError.self) { try await demoted.value }
    #expect(cache.statistics.loadsWaitingForUrgentWork == 0)
    #expect(origin.callCount(for: "d") == 1)
    origin.gate.release("u")
    _ = try await onScreen.value
  }

  // MARK: Destination

  @Test("into lower layers only: memory is left alone, and a key any layer has is skipped")
  func lowerLayersDestination() async throws {
    let origin = TrackingFetcher()
    origin.gate.open()
    let top = try MemoryLayer<String, String>()
    let lower = RecordingLayer(try MemoryLayer<String, String>())
    let cache = try LoadingCache(layers: [top, lower], origin: origin)
    try await lower.insert(CacheEntry("below"), for: "k1")
    try top.insert(CacheEntry("on top"), for: "k2")
    lower.clearCalls()
    let prefetcher = try Prefetcher(
      cache: cache, keys: Self.keys, configuration: Self.configuration(range: 3, limit: 3, destination: .lowerLayers))
    var updates = UpdateReader(prefetcher.events())
    let run = Task { try await prefetcher.run() }
    _ = await updates.read { $0.progress.completed == 3 }
    #expect(
      Set(updates.events.filter { !$0.hasPrefix("started") }) == ["moved 0", "skipped k1", "skipped k2", "loaded k3"])
    #expect(top.value(for: "k1") == nil && top.value(for: "k3") == nil)
    #expect(lower.base.value(for: "k3") == "value of k3")
    #expect(!lower.calls.contains(.entry("k2")))
    #expect(origin.calls == ["k3"])
    run.cancel()
    try await run.value
  }

  @Test("the configuration is checked")
  func configurationErrors() throws {
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: TrackingFetcher())
    let noLoads = #expect(throws: AsyncCacheError.self) {
      try Prefetcher(cache: cache, keys: [], configuration: Self.configuration(limit: 0))
    }
    #expect(noLoads?.code == .invalidConfiguration)
    #expect(noLoads?.message.contains("maximumConcurrentLoads") == true)
    let oneLayer = #expect(throws: AsyncCacheError.self) {
      try Prefetcher(cache: cache, keys: [], configuration: Self.configuration(destination: .lowerLayers))
    }
    #expect(oneLayer?.message.contains("lowerLayers") == true)
  }

  // MARK: Lifecycle

  @Test("cancelling run() cancels its loads, returns once they ended, and finishes every update sequence")
  func runEndsWhenCancelled() async throws {
    let origin = TrackingFetcher()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: origin)
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration())
    // Subscribed before run(), so that both see every update.
    let (firstUpdates, secondUpdates) = (prefetcher.events(), prefetcher.events())
    let first = Task { await UpdateReader(firstUpdates).readToEnd() }
    let second = Task { await UpdateReader(secondUpdates).readToEnd() }
    let run = Task { try await prefetcher.run() }
    await origin.gate.waitForFetches(2)

    run.cancel()
    try await run.value
    #expect(origin.active == 0, "no origin call outlives run()")
    #expect(cache.statistics.loadsInFlight == 0)
    let (firstEvents, secondEvents) = await (first.value, second.value)
    #expect(firstEvents == secondEvents, "every observer sees every update")
    #expect(Set(firstEvents.suffix(2)) == ["cancelled k1", "cancelled k2"])
    #expect(await UpdateReader(prefetcher.events()).readToEnd().isEmpty, "a sequence made after the end is empty")
    await #expect(throws: AsyncCacheError.self) { try await prefetcher.run() }
  }

  @Test("start() and stop() for unstructured code; stop() returns once the loads ended")
  func startAndStop() async throws {
    let origin = TrackingFetcher()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: origin)
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration())
    let subscription = prefetcher.events()
    let updates = Task { await UpdateReader(subscription).readToEnd() }
    try await prefetcher.start()
    try await prefetcher.start()  // running already: nothing happens
    await origin.gate.waitForFetches(2)
    let running = await #expect(throws: AsyncCacheError.self) { try await prefetcher.run() }
    #expect(running?.code == .invalidState)

    await prefetcher.stop()
    #expect(origin.active == 0)
    #expect(await updates.value.last?.hasPrefix("cancelled") == true)
    await prefetcher.stop()  // stopped already: nothing happens
    let stopped = await #expect(throws: AsyncCacheError.self) { try await prefetcher.start() }
    #expect(stopped?.code == .invalidState)
  }

  @Test("a slow observer's sequence drops the oldest updates and says so, with the latest dropped progress")
  func aSlowObserverIsToldWhatItLost() async throws {
    let origin = TrackingFetcher()
    origin.gate.open()
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: origin)
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys, configuration: Self.configuration(range: 3))
    let everything = prefetcher.events()
    let lastTwo = prefetcher.events(bufferingNewest: 2)
    var reader = UpdateReader(everything)
    let run = Task { try await prefetcher.run() }
    _ = await reader.read { $0.progress.completed == 3 }
    await prefetcher.stop()
    try await run.value
    let all = await everything.drained()
    let kept = await lastTwo.drained()
    let seen = reader.updates + all
    #expect(kept.count == 3)
    guard case .dropped(let count) = kept.first?.event else {
      Issue.record("the first update is the report of what was dropped: \(kept)")
      return
    }
    #expect(count == seen.count - 2)
    #expect(kept.first?.progress == seen[seen.count - 3].progress, "the progress of the latest update dropped")
    #expect(
      kept.dropFirst().map { UpdateReader.describe($0.event) } == seen.suffix(2).map { UpdateReader.describe($0.event) }
    )
    #expect(lastTwo.droppedCount == count)
  }

  @Test("a prefetcher stopped before it ran never runs, and its updates end at once")
  func stopBeforeRun() async throws {
    let cache = try LoadingCache(layers: [try MemoryLayer<String, String>()], origin: TrackingFetcher())
    let prefetcher = try Prefetcher(cache: cache, keys: Self.keys)
    let updates = prefetcher.events()
    await prefetcher.stop()
    #expect(await UpdateReader(updates).readToEnd().isEmpty)
    await #expect(throws: AsyncCacheError.self) { try await prefetcher.run() }
  }
}

// MARK: - Support

/// A gated origin that also counts the fetches in progress, to prove none outlives a prefetcher.
final class TrackingFetcher: AsyncFetcher, Sendable {
  let gate = GatedFetcher<String, String> { "value of \($0)" }
  private let inProgress = Locked(0)

  func fetch(_ key: String) async throws -> String {
    inProgress.withLock { $0 += 1 }
    defer { inProgress.withLock { $0 -= 1 } }
    return try await gate.fetch(key)
  }

  /// Fetches in progress now.
  var active: Int { inProgress.withLock { $0 } }
  var calls: [String] { gate.calls }
  var callCount: Int { gate.callCount }
  func callCount(for key: String) -> Int { gate.callCount(for: key) }

}

/// Reads a prefetcher's updates in order and keeps their events as short strings.
struct UpdateReader {
  private var iterator: EventSequence<PrefetchUpdate<String>>.AsyncIterator
  private(set) var events: [String] = []
  private(set) var updates: [PrefetchUpdate<String>] = []

  init(_ updates: EventSequence<PrefetchUpdate<String>>) {
    iterator = updates.makeAsyncIterator()
  }

  /// Reads until an update satisfies `condition` and returns it; `nil` if the sequence ended.
  mutating func read(until condition: (PrefetchUpdate<String>) -> Bool) async -> PrefetchUpdate<String>? {
    while let update = await iterator.next() {
      events.append(Self.describe(update.event))
      updates.append(update)
      if condition(update) { return update }
    }
    return nil
  }

  /// Reads every update until the sequence ends and returns all the events.
  consuming func readToEnd() async -> [String] {
    _ = await read { _ in false }
    return events
  }

  static func describe(_ event: PrefetchEvent<String>) -> String {
    switch event {
    case .moved(let index): "moved \(index)"
    case .started(let key): "started \(key)"
    case .loaded(let key): "loaded \(key)"
    case .skipped(let key): "skipped \(key)"
    case .failed(let key, _): "failed \(key)"
    case .cancelled(let key): "cancelled \(key)"
    case .paused: "paused"
    case .resumed: "resumed"
    case .dropped(let count): "dropped \(count)"
    }
  }
}

extension PrefetchEvent {
  var isPaused: Bool {
    if case .paused = self { return true }
    return false
  }
}
