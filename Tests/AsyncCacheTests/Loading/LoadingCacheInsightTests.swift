import AsyncCacheTesting
import Foundation
import TestSupport
import Testing

@testable import AsyncCache

struct InsightTestFailure: Error, CustomStringConvertible {
  var description: String { "origin down" }
}

@Suite("LoadingCache statistics", .timeLimit(.minutes(3))) struct LoadingCacheStatisticsTests {
  let clock = ManualClock()

  @Test func statisticsMatchAHandCountedScenario() async throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(countLimit: 2, clock: clock))
    let lower = FakeLayer<String, Int>(entries: ["ccc": CacheEntry(3)])
    let origin = GatedFetcher<String, Int> { $0.count }
    let cache = try LoadingCache(
      layers: [memory, lower], origin: origin,
      configuration: .init(
        clock: clock, retryPolicy: RetryPolicy(maximumAttempts: 2, initialDelay: .seconds(1), jitter: 0)))

    // 1. A miss: the origin answers after 2 s.
    let a = Task { try await cache.value(for: "a") }
    await origin.waitForFetches(1, for: "a")
    clock.advance(by: .seconds(2))
    #expect(origin.release("a") == 1)
    #expect(try await a.value == 1)

    // 2. Two requests share one load of 5 s: two misses, one of them coalesced.
    let bb = (0..<2).map { _ in Task { try await cache.value(for: "bb") } }
    await origin.waitForFetches(1, for: "bb")
    await cache.waitForRequests(2, for: "bb")
    clock.advance(by: .seconds(5))
    #expect(origin.release("bb") == 1)
    for request in bb { #expect(try await request.value == 2) }

    // 3. A hit in the top layer, without a load.
    #expect(try await cache.value(for: "a") == 1)

    // 4. A load that finds the value in the layer below, at once; the back-fill evicts "bb",
    //    the least recently used of the top layer's two entries.
    #expect(try await cache.value(for: "ccc") == 3)

    // 5. A load that fails twice, with a retry after 1 s.
    let x = Task { try await cache.value(for: "x") }
    await origin.waitForFetches(1, for: "x")
    #expect(origin.release("x", throwing: InsightTestFailure()) == 1)
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    await origin.waitForFetches(1, for: "x")
    #expect(origin.release("x", throwing: InsightTestFailure()) == 1)
    await #expect(throws: InsightTestFailure.self) { try await x.value }

    let statistics = cache.statistics
    #expect(statistics.hits == 2)  // "a" at the top, "ccc" below
    #expect(statistics.misses == 4)  // "a", "bb" twice, "x"
    #expect(statistics.hitRatio == 2.0 / 6.0)
    #expect(statistics.loads == 4)
    #expect(statistics.coalescedRequests == 1)
    #expect(statistics.loadFailures == 1)
    #expect(statistics.retries == 1)
    #expect(statistics.loadTime.count == 4)
    #expect(statistics.loadTime.total == .seconds(8))  // 2 + 5 + 0 + 1
    #expect(statistics.loadTime.minimum == .zero)
    #expect(statistics.loadTime.maximum == .seconds(5))
    #expect(statistics.loadTime.percentile(1) == .seconds(5))
    let median = try #require(statistics.loadTime.percentile(0.5))
    #expect(median >= .seconds(1) && median <= .seconds(1) * 1.125, "the 2nd of 0, 1, 2, 5 s, within 12.5%")
    #expect(statistics.evictions[.countLimit] == 1)
    #expect(statistics.evictions.total == 1)

    try #require(statistics.layers.count == 2)
    // The top layer: the request hit, then the chain's lookups of each load (all misses).
    #expect(statistics.layers[0].hits == 1)
    #expect(statistics.layers[0].misses == 4)
    #expect(statistics.layers[0].evictions[.countLimit] == 1)
    #expect(statistics.layers[1].hits == 1)
    #expect(statistics.layers[1].misses == 3)
    #expect(statistics.layers[1].evictions.total == 0)
    #expect(statistics.layers[1].failures == 0)
  }

  @Test func aStaleValueServedAfterAnErrorIsOneHitNotAHitAndAMiss() async throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let origin = GatedFetcher<String, Int> { $0.count }
    let cache = try LoadingCache(
      layers: [memory], origin: origin,
      configuration: .init(timeToLive: .seconds(10), staleIfError: .seconds(30), clock: clock))
    let first = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    #expect(try await first.value == 1)

    // Stale, and only for errors: the top layer has the entry, but the request loads.
    clock.advance(by: .seconds(15))
    let second = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", throwing: InsightTestFailure()) == 1)
    #expect(try await second.value == 1)

    let statistics = cache.statistics
    #expect(statistics.misses == 1, "the first request")
    #expect(statistics.hits == 1, "the second, answered by the stale value its load kept")
    #expect(statistics.staleServedOnError == 1)
    try #require(statistics.layers.count == 1)
    #expect(statistics.layers[0].hits == 1, "the load's lookup; the declined request hit is not counted")
  }

  @Test func negativeHitsAndPrefetchesAreNeitherHitsNorMisses() async throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let origin = GatedFetcher<String, Int> { key in
      guard key == "k" else { return key.count }
      throw AsyncCacheError(code: .notFound, message: "no such key")
    }
    let cache = try LoadingCache(
      layers: [memory], origin: origin,
      configuration: .init(negativeCaching: .notFound(timeToLive: .seconds(5)), clock: clock))
    let first = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    await #expect(throws: AsyncCacheError.self) { try await first.value }
    await #expect(throws: AsyncCacheError.self) { try await cache.value(for: "k") }
    #expect(cache.cachedValue(for: "k") == nil)
    // A prefetch that loads, and one that finds the value in the top layer, are not requests.
    let prefetch = Task { await cache.prefetch("p", ticket: cache.makePrefetchTicket(), skipsTopLayer: false) }
    await origin.waitForFetches(1, for: "p")
    #expect(origin.release("p") == 1)
    _ = await prefetch.value
    origin.open()  // a load, which should not happen, would end and fail the check below
    guard case .skipped = await cache.prefetch("p", ticket: cache.makePrefetchTicket(), skipsTopLayer: false) else {
      Issue.record("a prefetch of a key in the top layer skips it")
      return
    }
    #expect(memory.value(for: "p") == 1)

    let statistics = cache.statistics
    #expect(statistics.misses == 1)
    #expect(statistics.hits == 0)
    #expect(statistics.negativeHits == 1)
    #expect(statistics.loadFailures == 1)
  }

  /// A cache over a memory layer and a gated origin that answers a key's length.
  func gatedCache() throws -> (LoadingCache<String, Int>, GatedFetcher<String, Int>) {
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let origin = GatedFetcher<String, Int> { $0.count }
    return (try LoadingCache(layers: [memory], origin: origin, configuration: .init(clock: clock)), origin)
  }

  /// Expects one load, counted as one miss (`who`) and no hit.
  func expectOneLoadOneMiss(
    _ cache: LoadingCache<String, Int>, _ who: Comment, sourceLocation: SourceLocation = #_sourceLocation
  ) {
    let statistics = cache.statistics
    #expect(statistics.misses == 1, who, sourceLocation: sourceLocation)
    #expect(statistics.hits == 0 && statistics.loads == 1, sourceLocation: sourceLocation)
  }

  @Test func aLoadCountsTheRequestsThatJoinedItNotThePrefetches() async throws {
    let (cache, origin) = try gatedCache()
    // A prefetch starts the load, two requests join it, and one of them leaves.
    let prefetch = Task { await cache.prefetch("k", ticket: cache.makePrefetchTicket(), skipsTopLayer: false) }
    await origin.waitForFetches(1, for: "k")
    let staying = Task { try await cache.value(for: "k") }
    let leaving = Task { try await cache.value(for: "k") }
    await cache.waitForWaiters(3, for: "k")
    leaving.cancel()
    await #expect(throws: CancellationError.self) { try await leaving.value }
    #expect(origin.release("k") == 1)
    #expect(try await staying.value == 1)
    _ = await prefetch.value
    expectOneLoadOneMiss(cache, "the request that stayed; the prefetch is not a request")
  }

  @Test func aPrefetchThatJoinsARequestsLoadIsNotCounted() async throws {
    let (cache, origin) = try gatedCache()
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    let prefetch = Task { await cache.prefetch("k", ticket: cache.makePrefetchTicket(), skipsTopLayer: false) }
    await cache.waitForWaiters(2, for: "k")
    #expect(origin.release("k") == 1)
    #expect(try await request.value == 1)
    _ = await prefetch.value
    expectOneLoadOneMiss(cache, "the request; the prefetch that joined its load is not a request")
  }

  @Test func aBatchOriginsLoadsAreCountedAndTimedPerKey() async throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    try memory.insert(1, for: "a")
    let clock = clock
    let cache = try LoadingCache(
      layers: [memory], origin: UnimplementedFetcher<String, Int>(),
      batchOrigin: ClosureBatchFetcher { keys in
        clock.advance(by: .seconds(3))
        return Dictionary(uniqueKeysWithValues: keys.map { ($0, $0.count) })
      },
      configuration: .init(clock: clock))
    let events = cache.events()
    let values = await cache.values(for: ["a", "bb", "ccc"])
    #expect(values.values == ["a": 1, "bb": 2, "ccc": 3])
    let statistics = cache.statistics
    #expect(statistics.hits == 1)
    #expect(statistics.misses == 2)
    #expect(statistics.loads == 2)
    #expect(statistics.loadTime.count == 2)
    #expect(statistics.loadTime.total == .seconds(6), "each key's load lasted the batch call")
    events.finish()
    let lines = await events.read(100)
    #expect(lines.prefix(5) == ["hit a", "miss bb", "miss ccc", "loadStarted bb", "loadStarted ccc"])
    #expect(
      Set(lines.dropFirst(5)) == [
        "loadFinished bb from origin in 3s",
        "loadFinished ccc from origin in 3s",
      ])
    #expect(lines.count == 7)
  }

  @Test func theEvictionsOfAMemoryLayerInANestedChainAreCounted() async throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(countLimit: 1, clock: clock))
    let nested = try CacheChain<String, Int>([memory, FakeLayer<String, Int>()])
    let origin = GatedFetcher<String, Int> { $0.count }
    origin.open()
    let cache = try LoadingCache(
      layers: [nested, FakeLayer<String, Int>()], origin: origin, configuration: .init(clock: clock))
    let events = cache.events()
    _ = try await cache.value(for: "a")
    _ = try await cache.value(for: "bb")
    #expect(cache.statistics.evictions[.countLimit] == 1)
    try #require(cache.statistics.layers.count == 2)
    #expect(cache.statistics.layers[0].evictions[.countLimit] == 1)
    events.finish()
    #expect(await events.read(100).contains("eviction a from layer 0: countLimit"))
  }

  @Test func bulkRequestsCountEachKey() async throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    try memory.insert(1, for: "a")
    let origin = GatedFetcher<String, Int> { $0.count }
    origin.open()
    let cache = try LoadingCache(layers: [memory], origin: origin, configuration: .init(clock: clock))
    let values = await cache.values(for: ["a", "bb", "ccc", "a"])
    #expect(values.values == ["a": 1, "bb": 2, "ccc": 3])
    let statistics = cache.statistics
    #expect(statistics.hits == 1)
    #expect(statistics.misses == 2)
  }
}

@Suite("LoadTimeHistogram") struct LoadTimeHistogramTests {
  @Test func aStatisticsSnapshotDoesNotShareTheLoadTimeCounters() async throws {
    let clock = ManualClock()
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let origin = GatedFetcher<String, Int> { $0.count }
    let cache = try LoadingCache(layers: [memory], origin: origin, configuration: .init(clock: clock))
    let load = Task { try await cache.value(for: "a") }
    await origin.waitForFetches(1, for: "a")
    clock.advance(by: .seconds(1))
    #expect(origin.release("a") == 1)
    _ = try await load.value
    let snapshot = cache.statistics.loadTime
    #expect(snapshot.count == 1)
    #expect(snapshot.total == .seconds(1))
    // Were the storage shared, the next load would copy it under the in-flight lock.
    #expect(!cache.loadTable.state.withLock { $0.counters.loadTime.sharesStorage(with: snapshot) })
    var copy = snapshot
    #expect(copy.sharesStorage(with: snapshot), "a plain copy shares, so the check can fail")
    copy.record(.seconds(2))
    #expect(!copy.sharesStorage(with: snapshot))
  }

  @Test func copyingContentsGivesAnEqualHistogramThatSharesNothing() {
    var empty = LoadTimeHistogram.allocated()
    empty.copyContents(of: LoadTimeHistogram())
    #expect(empty == LoadTimeHistogram(), "an empty copy has no counters, as an empty histogram")
    var original = LoadTimeHistogram()
    for milliseconds in [3, 5, 700, 9_000] { original.record(.milliseconds(milliseconds)) }
    var copy = LoadTimeHistogram.allocated()
    copy.copyContents(of: original)
    #expect(copy == original)
    #expect(!copy.sharesStorage(with: original))
    #expect(copy.percentile(0.5) == original.percentile(0.5))
  }

  @Test func anEmptyHistogramHasNoPercentiles() {
    let histogram = LoadTimeHistogram()
    #expect(histogram.count == 0)
    #expect(histogram.total == .zero)
    #expect(histogram.percentile(0.5) == nil)
    #expect(histogram.minimum == nil && histogram.maximum == nil && histogram.mean == nil)
    #expect(histogram.description == "no loads")
  }

  @Test func bucketsCoverEveryDurationWithoutGapsOrOverlaps() {
    // Every bucket starts right after the previous one ends, up to Int64.max.
    var expectedStart: Int64 = 0
    for index in 0..<LoadTimeHistogram.bucketCount {
      #expect(LoadTimeHistogram.bucket(of: expectedStart) == index)
      let end = LoadTimeHistogram.upperBound(ofBucket: index)
      #expect(LoadTimeHistogram.bucket(of: end) == index)
      // A bucket spans at most 1/8 of its start (exact below 16 ns).
      #expect(Double(end - expectedStart) <= Swift.max(Double(expectedStart) / 8, 0))
      if end == .max {
        #expect(index == LoadTimeHistogram.bucketCount - 1)
        break
      }
      expectedStart = end + 1
    }
  }

  @Test func percentilesAreWithinTheirBucketOfTheTrueValue() throws {
    var generator = SplitMix64(seed: 7)
    var histogram = LoadTimeHistogram()
    var durations: [Int64] = []
    for _ in 0..<10_000 {
      // Log-uniform from 1 µs to about 17 s.
      let nanoseconds = Int64(1_000 * pow(2.0, Double(generator.next() % 24_000) / 1_000))
      durations.append(nanoseconds)
      histogram.record(.nanoseconds(nanoseconds))
    }
    durations.sort()
    for fraction in [0.001, 0.1, 0.5, 0.9, 0.99, 0.999] {
      let truth = durations[Int((fraction * Double(durations.count)).rounded(.up)) - 1]
      let reported = try #require(histogram.percentile(fraction)).saturatingNanoseconds
      #expect(reported >= truth, "p\(fraction): never under the true value")
      #expect(Double(reported) <= Double(truth) * 1.125, "p\(fraction): within 12.5%")
    }
    #expect(histogram.percentile(0) == .nanoseconds(durations.first!))
    #expect(histogram.percentile(1) == .nanoseconds(durations.last!))
    #expect(histogram.total == .nanoseconds(durations.reduce(0, +)))
    #expect(histogram.mean == .nanoseconds(durations.reduce(0, +) / Int64(durations.count)))
  }

  @Test func smallDurationsAreExactAndOddInputIsClamped() {
    var histogram = LoadTimeHistogram()
    for nanoseconds in [3, 5, 7] as [Int64] { histogram.record(.nanoseconds(nanoseconds)) }
    #expect(histogram.percentile(0.5) == .nanoseconds(5))
    histogram.record(.nanoseconds(-4))  // a clock that went back
    #expect(histogram.minimum == .zero)
    #expect(histogram.percentile(.nan) == .zero)
    #expect(histogram.percentile(-1) == .zero)
    #expect(histogram.percentile(2) == .nanoseconds(7))
    histogram.record(.seconds(Int64.max))  // saturates
    #expect(histogram.total == .nanoseconds(Int64.max))
    #expect(histogram.maximum == .nanoseconds(Int64.max))
  }

  @Test func mergingAddsTheDurationsOfBoth() {
    var left = LoadTimeHistogram()
    var right = LoadTimeHistogram()
    var both = LoadTimeHistogram()
    for milliseconds in 1...50 {
      left.record(.milliseconds(milliseconds))
      both.record(.milliseconds(milliseconds))
    }
    for milliseconds in 51...100 {
      right.record(.milliseconds(milliseconds))
      both.record(.milliseconds(milliseconds))
    }
    left.merge(right)
    #expect(left == both)
    #expect(left.count == 100)
    left.merge(LoadTimeHistogram())
    #expect(left == both)
  }
}

@Suite("Cache events", .timeLimit(.minutes(3))) struct CacheEventsTests {
  let clock = ManualClock()

  func cache(
    countLimit: Int = 100, origin: GatedFetcher<String, Int>,
    configure: (inout LoadingCache<String, Int>.Configuration) -> Void = { _ in }
  ) throws -> (LoadingCache<String, Int>, MemoryLayer<String, Int>) {
    let memory = try MemoryLayer<String, Int>(configuration: .init(countLimit: countLimit, clock: clock))
    var configuration = LoadingCache<String, Int>.Configuration(clock: clock)
    configure(&configuration)
    return (try LoadingCache(layers: [memory], origin: origin, configuration: configuration), memory)
  }

  @Test func aMissALoadAndAHitAreDeliveredInOrderToEveryObserver() async throws {
    let origin = GatedFetcher<String, Int> { $0.count }
    let (cache, _) = try cache(origin: origin)
    let first = cache.events()
    let second = cache.events()
    let load = Task { try await cache.value(for: "ab") }
    await origin.waitForFetches(1, for: "ab")
    clock.advance(by: .milliseconds(250))
    #expect(origin.release("ab") == 1)
    #expect(try await load.value == 2)
    #expect(try await cache.value(for: "ab") == 2)
    let expected = [
      "miss ab", "loadStarted ab", "loadFinished ab from origin in 250ms", "hit ab",
    ]
    first.finish()
    second.finish()
    #expect(await first.read(100) == expected, "these events and no others")
    #expect(await second.read(100) == expected)
    #expect(first.droppedCount == 0)
  }

  @Test func evictionsOfTheChainsMemoryLayersComeWithTheirLayerIndex() async throws {
    let origin = GatedFetcher<String, Int> { $0.count }
    origin.open()
    let top = try MemoryLayer<String, Int>(configuration: .init(countLimit: 1, clock: clock))
    let below = try MemoryLayer<String, Int>(configuration: .init(countLimit: 1, clock: clock))
    let cache = try LoadingCache(layers: [top, below], origin: origin, configuration: .init(clock: clock))
    _ = try await cache.value(for: "a")
    let events = cache.events()
    _ = try await cache.value(for: "bb")
    #expect(
      await events.read(5) == [
        "miss bb", "loadStarted bb", "eviction a from layer 0: countLimit", "eviction a from layer 1: countLimit",
        "loadFinished bb from origin in 0s",
      ])
  }

  @Test func anObserverThatFallsBehindLosesTheOldestEventsAndIsToldHowMany() async throws {
    let origin = GatedFetcher<String, Int> { $0.count }
    let (cache, memory) = try cache(origin: origin)
    try memory.insert(1, for: "a")
    let events = cache.events(bufferingNewest: 3)
    for _ in 0..<10 { _ = try await cache.value(for: "a") }
    #expect(events.droppedCount == 7)
    #expect(await events.read(4) == ["dropped 7", "hit a", "hit a", "hit a"])
    // Caught up: the next event comes without a drop report.
    _ = try await cache.value(for: "a")
    #expect(await events.read(1) == ["hit a"])
    #expect(events.droppedCount == 7)
  }

  @Test func noEventIsBuiltWhileNobodyObserves() async throws {
    let origin = GatedFetcher<String, Int> { $0.count }
    let (cache, memory) = try cache(origin: origin)
    #expect(!cache.eventHub.isObserved)
    #expect(!memory.store.eventHub.isObserved)
    do {
      let events = cache.events()
      #expect(cache.eventHub.isObserved)
      #expect(memory.store.eventHub.isObserved)
      events.finish()
      #expect(!cache.eventHub.isObserved, "finished")
    }
    do {
      _ = cache.events()
      _ = memory.events()
    }
    #expect(!cache.eventHub.isObserved, "unsubscribed when the sequence is gone")
    #expect(!memory.store.eventHub.isObserved)
  }

  @Test func aLoadAbandonedByItsRequestsEndsAsCancelled() async throws {
    let origin = GatedFetcher<String, Int> { $0.count }
    let (cache, _) = try cache(origin: origin)
    let events = cache.events()
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    request.cancel()
    await #expect(throws: CancellationError.self) { try await request.value }
    await cache.waitUntilIdle()
    events.finish()
    #expect(
      await events.read(100) == [
        "miss k", "loadStarted k", "loadFailed k after 1 attempt in 0s: \(CancellationError())",
      ])
    #expect(cache.statistics.misses == 0, "a cancelled request is neither a hit nor a miss")
    #expect(cache.statistics.hits == 0)
    #expect(cache.statistics.loadTime.count == 0)
  }

  @Test func theBufferGrowsAsNeededKeepsOrderAndTakesAnyLimit() async throws {
    let buffer = EventBuffer<CacheEvent<Int>>(capacity: 4)
    buffer.append(.hit(key: 1))
    buffer.append(.hit(key: 2))
    #expect(await buffer.next()?.description == "hit 1")
    for key in 3...5 { buffer.append(.hit(key: key)) }  // wraps around, then grows
    buffer.append(.hit(key: 6))  // full: drops "hit 2"
    var lines: [String] = []
    buffer.finish()
    while let event = await buffer.next() { lines.append(event.description) }
    #expect(lines == ["dropped 1", "hit 3", "hit 4", "hit 5", "hit 6"])

    let origin = GatedFetcher<String, Int> { $0.count }
    let (cache, memory) = try cache(origin: origin)
    try memory.insert(1, for: "a")
    let unbounded = cache.events(bufferingNewest: .max)
    for _ in 0..<100 { _ = try await cache.value(for: "a") }
    unbounded.finish()
    #expect(await unbounded.read(1_000).count == 100)
    #expect(unbounded.droppedCount == 0)
  }

  @Test func cancellingTheReaderEndsTheSequence() async throws {
    let origin = GatedFetcher<String, Int> { $0.count }
    let (cache, _) = try cache(origin: origin)
    let events = cache.events()
    let reader = Task {
      var count = 0
      for await _ in events { count += 1 }
      return count
    }
    reader.cancel()
    #expect(await reader.value == 0)
    #expect(!cache.eventHub.isObserved)
    #expect(await events.read(1) == [])
  }

  @Test func cancellingAParkedReaderEndsTheSequenceAndUnsubscribes() async throws {
    let origin = GatedFetcher<String, Int> { $0.count }
    let (cache, memory) = try cache(origin: origin)
    let events = cache.events()
    let reader = Task {
      var lines: [String] = []
      for await event in events { lines.append(event.description) }
      return lines
    }
    while events.subscription.buffer.parkedReaderCount == 0 { await Task.yield() }
    reader.cancel()
    #expect(await reader.value == [])
    #expect(events.subscription.buffer.parkedReaderCount == 0)
    #expect(!cache.eventHub.isObserved)
    try memory.insert(1, for: "a")
    _ = try await cache.value(for: "a")
    #expect(await events.read(1) == [], "nothing is delivered after the end")
  }

  @Test func finishingEndsTheSequenceAfterWhatIsBuffered() async throws {
    let origin = GatedFetcher<String, Int> { $0.count }
    let (cache, memory) = try cache(origin: origin)
    try memory.insert(1, for: "a")
    let events = cache.events()
    _ = try await cache.value(for: "a")
    events.finish()
    _ = try await cache.value(for: "a")
    #expect(await events.read(3) == ["hit a"])
  }

  @Test func theSequenceEndsWhenTheCacheGoesAway() async throws {
    let origin = GatedFetcher<String, Int> { $0.count }
    var (cache, memory): (LoadingCache<String, Int>?, MemoryLayer<String, Int>) = try cache(origin: origin)
    try memory.insert(1, for: "a")
    let events = cache!.events()
    _ = try await cache!.value(for: "a")
    cache = nil
    #expect(await events.read(3) == ["hit a"])
  }

  @Test func refreshesRetriesStaleAndNegativeHitsAreReported() async throws {
    let origin = GatedFetcher<String, Int> { $0.count }
    let (cache, _) = try cache(origin: origin) {
      $0.timeToLive = .seconds(10)
      $0.staleWhileRevalidate = .seconds(10)
      $0.staleIfError = .seconds(10)
      $0.retryPolicy = RetryPolicy(maximumAttempts: 2, initialDelay: .seconds(1), jitter: 0) { error in
        (error as? AsyncCacheError)?.code == .notFound ? .fatal : .transient
      }
      $0.negativeCaching = .notFound(timeToLive: .seconds(60))
    }
    let first = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    #expect(try await first.value == 1)

    clock.advance(by: .seconds(12))
    let events = cache.events()
    #expect(try await cache.value(for: "k") == 1, "stale, served at once")
    // The refresh fails twice; the stale value stays.
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", throwing: InsightTestFailure()) == 1)
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", throwing: InsightTestFailure()) == 1)
    await cache.waitUntilIdle()

    let missing = Task { try await cache.value(for: "none") }
    await origin.waitForFetches(1, for: "none")
    #expect(origin.release("none", throwing: AsyncCacheError(code: .notFound, message: "gone")) == 1)
    await #expect(throws: AsyncCacheError.self) { try await missing.value }
    await #expect(throws: AsyncCacheError.self) { try await cache.value(for: "none") }

    let notFound = AsyncCacheError(code: .notFound, message: "gone")
    let lines = await events.read(10)
    // The hit is reported once the refresh has started, on another thread: either comes first.
    #expect(Set(lines.prefix(2)) == ["hit k", "refreshStarted k"])
    #expect(
      lines.dropFirst(2) == [
        "retrying k after attempt 1 in 1s: origin down",
        "loadFailed k after 2 attempts in 1s: origin down",
        "servedStale k: origin down",
        "miss none", "loadStarted none",
        "loadFailed none after 1 attempt in 0s: \(notFound)",
        "miss none", "negativeHit none: \(notFound)",
      ])
  }

  @Test func aMemoryLayerReportsEvictionsForEveryReason() async throws {
    let memory = try MemoryLayer<String, Int>(
      configuration: .init(
        countLimit: 2, costLimit: 10, cost: { $0 }, warningTrimFraction: 0.5, evictionPolicy: .leastRecentlyUsed,
        clock: clock))
    let events = memory.events()
    try memory.insert(1, for: "a")
    try memory.insert(2, for: "b")
    try memory.insert(3, for: "c")  // over the count limit: "a" goes
    try memory.insert(11, for: "big")  // refused
    try memory.insert(9, for: "d")  // over the cost limit: "b", then "c"
    #expect(
      await events.read(4) == [
        "eviction a from layer 0: countLimit", "eviction big from layer 0: oversized",
        "eviction b from layer 0: countLimit", "eviction c from layer 0: costLimit",
      ])
    try memory.insert(1, for: "e", timeToLive: .seconds(1))
    clock.advance(by: .seconds(2))
    #expect(memory.value(for: "e") == nil)
    #expect(await events.read(1) == ["eviction e from layer 0: expired"])
    try memory.insert(1, for: "f", timeToLive: .seconds(1))
    clock.advance(by: .seconds(2))
    #expect(memory.removeExpired() == 1)
    #expect(await events.read(1) == ["eviction f from layer 0: expired"])
    try memory.insert(1, for: "g")
    await memory.handleMemoryPressure(.warning)  // half of the 2 entries ("d", "g")
    #expect(await events.read(1) == ["eviction d from layer 0: memoryPressure"])
    await memory.handleMemoryPressure(.critical)
    #expect(await events.read(1) == ["eviction g from layer 0: memoryPressure"])
    #expect(memory.statistics.evictions.total == 8)
  }
}
