import AsyncCacheTesting
import TestSupport
import Testing

@testable import AsyncCache

/// What an operator graphs: which layer answered each request, how long each layer took, and how
/// often the origin was asked.
@Suite("Statistics per layer: requests answered, lookup times, origin loads", .timeLimit(.minutes(3)))
struct LoadingCacheLayerStatisticsTests {
  /// A memory layer over a persistent one (a `FakeLayer` named "disk", skipped when it fails) that
  /// holds `stored`.
  static func makeCache(
    stored: [String: Int], clock: ManualClock, origin: GatedFetcher<String, Int>,
    reports: EventLog<LoadReport<String>>? = nil
  ) throws -> (LoadingCache<String, Int>, FakeLayer<String, Int>) {
    let disk = FakeLayer<String, Int>(entries: stored.mapValues { CacheEntry($0) })
    let cache = try LoadingCache(
      tiers: [.init(try MemoryLayer<String, Int>(), name: "memory"), .init(disk, failurePolicy: .skip, name: "disk")],
      origin: origin,
      configuration: .init(clock: clock, onLoadEnded: reports?.handler))
    return (cache, disk)
  }

  @Test("after a restart, the requests the disk answers are hits of the disk, not of memory; the origin's are misses")
  func answeredPerLayer() async throws {
    let clock = ManualClock()
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let stored = Dictionary(uniqueKeysWithValues: (0..<20).map { ("k\($0)", $0) })
    let (cache, _) = try Self.makeCache(stored: stored, clock: clock, origin: origin)

    for key in stored.keys.sorted() { _ = try await cache.value(for: key) }  // from disk
    for key in stored.keys.sorted() { _ = try await cache.value(for: key) }  // from memory now
    let missing = Task { try await cache.value(for: "new") }
    await origin.waitForFetches(1, for: "new")
    #expect(origin.release("new") == 1)
    #expect(try await missing.value == 7)

    let statistics = cache.statistics
    #expect(statistics.hits == 40 && statistics.misses == 1)
    #expect(statistics.topLayerHits == 20, "the second round, answered by memory at once")
    #expect(statistics.lowerLayerHits == 20, "the first round, answered by loads from the disk")
    #expect(statistics.loads == 21 && statistics.originLoads == 1)
    let layers = statistics.layers
    try #require(layers.count == 2)
    #expect(layers.map(\.name) == ["memory", "disk"])
    #expect(layers.map(\.answered) == [20, 20])
    #expect(layers.map(\.answered).reduce(0, +) == statistics.hits)
    #expect(layers[1].hits == 20 && layers[1].misses == 1)
  }

  @Test("a coalesced request counts with its load, as answered by the layer that had the value")
  func coalescedRequestsCountWithTheirLayer() async throws {
    let clock = ManualClock()
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let (cache, disk) = try Self.makeCache(stored: ["k": 1], clock: clock, origin: origin)
    disk.hold(.lookup)
    let requests = (0..<5).map { _ in Task { try await cache.value(for: "k") } }
    await cache.waitForRequests(5, for: "k")
    await disk.waitForHeld(1, .lookup)
    disk.release(.lookup)
    for request in requests { #expect(try await request.value == 1) }
    let statistics = cache.statistics
    #expect(statistics.loads == 1 && statistics.coalescedRequests == 4)
    #expect(statistics.layers.map(\.answered) == [0, 5])
    #expect(statistics.lowerLayerHits == 5 && statistics.originLoads == 0)
  }

  @Test("each layer's lookups during loads are timed on the cache's clock: hits, misses and failures")
  func lookupTimes() async throws {
    let clock = ManualClock()
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let (cache, disk) = try Self.makeCache(stored: ["slow": 1], clock: clock, origin: origin)

    disk.hold(.lookup)
    let slow = Task { try await cache.value(for: "slow") }
    await disk.waitForHeld(1, .lookup)
    clock.advance(by: .milliseconds(5))
    disk.release(.lookup)
    #expect(try await slow.value == 1)

    disk.hold(.lookup)
    let missing = Task { try await cache.value(for: "absent") }
    await disk.waitForHeld(1, .lookup)
    clock.advance(by: .milliseconds(40))
    disk.release(.lookup)
    await origin.waitForFetches(1, for: "absent")
    origin.release("absent")
    #expect(try await missing.value == 7)

    disk.fail(.lookup, with: TestError("disk down"), times: 1)
    let failing = Task { try await cache.value(for: "broken") }
    await origin.waitForFetches(1, for: "broken")
    origin.release("broken")
    #expect(try await failing.value == 7)

    let layers = cache.statistics.layers
    try #require(layers.count == 2)
    let diskTimes = layers[1].lookupTime
    #expect(diskTimes.count == 3, "a hit, a miss and a failure")
    #expect(diskTimes.minimum == .zero && diskTimes.maximum == .milliseconds(40))
    #expect(diskTimes.total == .milliseconds(45))
    #expect(layers[1].failures == 1)
    #expect(layers[0].lookupTime.count == 3, "the top layer's lookups in the three loads (its misses)")
    #expect(layers[0].lookupTime.total == .zero)
  }

  @Test("a load report names the layer that answered, or the origin; none when it brought no value")
  func reportsNameTheSource() async throws {
    let clock = ManualClock()
    let origin = GatedFetcher<String, Int> { _ in 7 }
    let reports = EventLog<LoadReport<String>>()
    let (cache, _) = try Self.makeCache(stored: ["stored": 1], clock: clock, origin: origin, reports: reports)

    #expect(try await cache.value(for: "stored") == 1)
    let fromOrigin = Task { try await cache.value(for: "new") }
    await origin.waitForFetches(1, for: "new")
    origin.release("new")
    _ = try await fromOrigin.value
    let failing = Task { try await cache.value(for: "bad") }
    await origin.waitForFetches(1, for: "bad")
    origin.release("bad", throwing: TestError("no"))
    await #expect(throws: TestError.self) { try await failing.value }

    #expect(reports.all.map(\.sourceName) == ["disk", "origin", nil])
    #expect(reports.all.map(\.outcome.name) == ["loaded", "loaded", "failed"])
    #expect(cache.statistics.originLoads == 2, "the failed call asked the origin too")
  }
}
