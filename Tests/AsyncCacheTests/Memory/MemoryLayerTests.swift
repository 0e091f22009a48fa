import AsyncCacheTesting
import Testing

@testable import AsyncCache

@Suite struct MemoryLayerTests {
  // MARK: Basics

  @Test func returnsWhatWasInsertedAndCountsHitsAndMisses() throws {
    let memory = try MemoryLayer<String, Int>()
    try memory.insert(1, for: "a")
    #expect(memory.value(for: "a") == 1)
    #expect(memory.value(for: "b") == nil)
    #expect(memory.entry(for: "a") == CacheEntry(1))
    let statistics = memory.statistics
    #expect(statistics.hits == 2)
    #expect(statistics.misses == 1)
    #expect(statistics.count == 1)
  }

  @Test func replacingAValueKeepsOneEntry() throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(cost: { $0 }))
    try memory.insert(5, for: "a")
    try memory.insert(7, for: "a")
    #expect(memory.value(for: "a") == 7)
    #expect(memory.count == 1)
    #expect(memory.totalCost == 7)
  }

  @Test func removingAndRemovingAll() throws {
    let memory = try MemoryLayer<Int, Int>()
    for key in 0..<100 { try memory.insert(key, for: key) }
    memory.removeValue(for: 3)
    #expect(memory.value(for: 3) == nil)
    #expect(memory.count == 99)
    #expect(Set(memory.keys) == Set((0..<100).filter { $0 != 3 }))
    memory.removeAll()
    #expect(memory.count == 0)
    #expect(memory.keys.isEmpty)
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test func containsChangesNeitherRecencyNorStatistics() throws {
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 2, segmentCount: 1, evictionPolicy: .leastRecentlyUsed))
    try memory.insert(1, for: 1)
    try memory.insert(2, for: 2)
    #expect(memory.contains(1))
    #expect(!memory.contains(3))
    try memory.insert(3, for: 3)  // 1 is still the least recently used
    #expect(!memory.contains(1))
    #expect(memory.statistics.hits == 0 && memory.statistics.misses == 0)
  }

  // MARK: Limits

  @Test func countLimitEvictsTheLeastRecentlyUsed() throws {
    let memory = try MemoryLayer<String, Int>(
      configuration: .init(countLimit: 2, segmentCount: 1, evictionPolicy: .leastRecentlyUsed))
    try memory.insert(1, for: "a")
    try memory.insert(2, for: "b")
    _ = memory.value(for: "a")  // b is now the least recently used
    try memory.insert(3, for: "c")
    #expect(memory.value(for: "b") == nil)
    #expect(memory.value(for: "a") == 1)
    #expect(memory.value(for: "c") == 3)
    #expect(memory.statistics.evictions[.countLimit] == 1)
  }

  @Test func costLimitEvictsUntilTheNewEntryFits() throws {
    let memory = try MemoryLayer<String, Int>(
      configuration: .init(costLimit: 10, cost: { $0 }, segmentCount: 1, evictionPolicy: .leastRecentlyUsed))
    try memory.insert(4, for: "a")
    try memory.insert(4, for: "b")
    try memory.insert(1, for: "c")
    try memory.insert(8, for: "d")  // needs a and b gone: 1 + 8 = 9
    #expect(Set(memory.keys) == ["c", "d"])
    #expect(memory.totalCost == 9)
    #expect(memory.statistics.evictions[.costLimit] == 2)
  }

  @Test func anEntryCostingMoreThanTheLimitIsRefusedAndDropsTheOldValue() throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(costLimit: 10, cost: { $0 }))
    try memory.insert(5, for: "a")
    try memory.insert(11, for: "a")
    #expect(memory.value(for: "a") == nil, "the old value must not outlive a newer write")
    #expect(memory.totalCost == 0)
    #expect(memory.statistics.evictions[.oversized] == 1)
  }

  @Test func aZeroCountLimitStoresNothing() throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(countLimit: 0))
    try memory.insert(1, for: "a")
    #expect(memory.value(for: "a") == nil)
    #expect(memory.count == 0)
  }

  @Test func aNegativeCostIsATypedErrorAndChangesNothing() throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(cost: { $0 }))
    try memory.insert(3, for: "a")
    let error = #expect(throws: AsyncCacheError.self) { try memory.insert(-1, for: "a") }
    #expect(error?.code == .invalidCost)
    #expect(error?.message.contains("-1") == true)
    #expect(memory.value(for: "a") == 3)
    #expect(memory.totalCost == 3)
  }

  @Test(arguments: [
    ("countLimit", MemoryLayer<Int, Int>.Configuration(countLimit: -1)),
    ("costLimit", MemoryLayer<Int, Int>.Configuration(costLimit: -5)),
    ("timeToLive", MemoryLayer<Int, Int>.Configuration(timeToLive: .zero)),
    ("warningTrimFraction", MemoryLayer<Int, Int>.Configuration(warningTrimFraction: 1.5)),
    ("segmentCount", MemoryLayer<Int, Int>.Configuration(segmentCount: 3)),
    ("segmentCount", MemoryLayer<Int, Int>.Configuration(segmentCount: 512)),
  ])
  func invalidConfigurationIsATypedErrorNamingTheValue(
    field: String, configuration: MemoryLayer<Int, Int>.Configuration
  ) {
    let error = #expect(throws: AsyncCacheError.self) { try MemoryLayer(configuration: configuration) }
    #expect(error?.code == .invalidConfiguration)
    #expect(error?.message.contains(field) == true)
  }

  // MARK: Expiry

  @Test func entriesExpireAfterTheTimeToLive() throws {
    let clock = ManualClock()
    let memory = try MemoryLayer<String, Int>(configuration: .init(timeToLive: .seconds(60), clock: clock))
    try memory.insert(1, for: "a")
    clock.advance(by: .seconds(59))
    #expect(memory.value(for: "a") == 1)
    clock.advance(by: .seconds(1))
    #expect(memory.value(for: "a") == nil)
    #expect(memory.count == 0)
    #expect(memory.statistics.evictions[.expired] == 1)
  }

  @Test func aPerEntryTimeToLiveShorterThanTheLayersWins() throws {
    let clock = ManualClock()
    let memory = try MemoryLayer<String, Int>(configuration: .init(timeToLive: .seconds(60), clock: clock))
    try memory.insert(1, for: "a", timeToLive: .seconds(10))
    #expect(memory.entry(for: "a")?.expiresAt == clock.now.advanced(by: .seconds(10)))
    clock.advance(by: .seconds(10))
    #expect(memory.value(for: "a") == nil)
  }

  @Test func anEntryNeverOutlivesItsOwnExpiryNorTheLayersTimeToLive() throws {
    let clock = ManualClock()
    let memory = try MemoryLayer<String, Int>(configuration: .init(timeToLive: .seconds(60), clock: clock))
    let soon = clock.now.advanced(by: .seconds(5))
    let late = clock.now.advanced(by: .seconds(600))
    try memory.insert(CacheEntry(1, expiresAt: soon), for: "soon")
    try memory.insert(CacheEntry(2, expiresAt: late), for: "late")
    try memory.insert(CacheEntry(3), for: "never")
    #expect(memory.entry(for: "soon")?.expiresAt == soon)
    #expect(memory.entry(for: "late")?.expiresAt == clock.now.advanced(by: .seconds(60)))
    #expect(memory.entry(for: "never")?.expiresAt == clock.now.advanced(by: .seconds(60)))
  }

  @Test func anAlreadyExpiredEntryIsNotStoredAndDropsTheOldOne() throws {
    let clock = ManualClock()
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    try memory.insert(1, for: "a")
    try memory.insert(CacheEntry(2, expiresAt: clock.now), for: "a")
    #expect(memory.value(for: "a") == nil)
    #expect(memory.count == 0)
  }

  @Test func removeExpiredSweepsOnlyExpiredEntries() throws {
    let clock = ManualClock()
    let memory = try MemoryLayer<Int, Int>(configuration: .init(cost: { $0 }, segmentCount: 4, clock: clock))
    for key in 0..<1000 {
      try memory.insert(key, for: key, timeToLive: key.isMultiple(of: 2) ? .seconds(10) : nil)
    }
    clock.advance(by: .seconds(10))
    #expect(memory.removeExpired() == 500)
    #expect(memory.count == 500)
    #expect(memory.keys.allSatisfy { !$0.isMultiple(of: 2) })
    #expect(memory.totalCost == (0..<1000).filter { !$0.isMultiple(of: 2) }.reduce(0, +))
    #expect(memory.statistics.evictions[.expired] == 500)
    #expect(memory.invariantViolations.isEmpty)
  }

  // MARK: Memory pressure

  @Test func warningTrimsToTheConfiguredFractionAndCriticalEmpties() async throws {
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 1000, warningTrimFraction: 0.25, segmentCount: 1))
    for key in 0..<1000 { try memory.insert(key, for: key) }
    for key in 750..<1000 { _ = memory.value(for: key) }  // most recently used
    await memory.handleMemoryPressure(.warning)
    #expect(memory.count == 250)
    #expect(Set(memory.keys) == Set(750..<1000), "the least recently used go first")
    #expect(memory.statistics.evictions[.memoryPressure] == 750)
    await memory.handleMemoryPressure(.critical)
    #expect(memory.count == 0)
    #expect(memory.statistics.evictions[.memoryPressure] == 1000)
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test func warningTrimsTheCostToo() async throws {
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(costLimit: 1000, cost: { _ in 10 }, warningTrimFraction: 0.5))
    for key in 0..<100 { try memory.insert(key, for: key) }
    await memory.handleMemoryPressure(.warning)
    #expect(memory.totalCost <= 500)
    #expect(memory.invariantViolations.isEmpty)
  }

  /// Regression: each segment kept an equal share of the target, rounded down, so a small
  /// cache spread over many segments was emptied by a warning.
  @Test(arguments: [1, 4, 32, 256])
  func warningTrimsTheCountExactlyWhateverTheSegments(segments: Int) async throws {
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 10_000, warningTrimFraction: 0.5, segmentCount: segments)
    )
    for key in 0..<40 { try memory.insert(key, for: key) }
    await memory.handleMemoryPressure(.warning)
    #expect(memory.count == 20)
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test(arguments: [1, 4, 32, 256])
  func warningTrimsTheCostWithoutEmptyingTheLayer(segments: Int) async throws {
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 10_000, cost: { $0 % 7 + 1 }, warningTrimFraction: 0.5, segmentCount: segments)
    )
    for key in 0..<40 { try memory.insert(key, for: key) }
    let before = memory.totalCost
    await memory.handleMemoryPressure(.warning)
    #expect(memory.totalCost <= before / 2)
    // Costs are 1...7, so getting under half the cost never needs more than 7/8 of the entries.
    #expect(memory.count >= 40 / 8, "kept \(memory.count) of 40")
    #expect(memory.count <= 20)
    #expect(memory.invariantViolations.isEmpty)
  }

  /// Regression: in `async` code Swift prefers an `async` overload, so a synchronous
  /// `handleMemoryPressure` on the concrete type lost to the protocol's do-nothing default.
  @Test func memoryPressureCalledOnTheConcreteTypeInAsyncCodeIsHandled() async throws {
    let memory = try MemoryLayer<Int, Int>()
    try memory.insert(1, for: 1)
    await memory.handleMemoryPressure(.critical)
    #expect(memory.count == 0)
    try memory.insert(1, for: 1)
    let layer: any AsyncCacheLayer<Int, Int> = memory
    await layer.handleMemoryPressure(.critical)
    #expect(memory.count == 0)
  }

  @Test func normalPressureChangesNothing() async throws {
    let memory = try MemoryLayer<Int, Int>()
    try memory.insert(1, for: 1)
    await memory.handleMemoryPressure(.normal)
    #expect(memory.count == 1)
  }

  // MARK: Storage

  @Test func storageGrowsAndShrinksWithoutLosingEntries() async throws {
    let memory = try MemoryLayer<Int, String>(configuration: .init(countLimit: 100_000, segmentCount: 1))
    for key in 0..<20_000 { try memory.insert(String(key), for: key) }
    #expect(memory.invariantViolations.isEmpty)
    for key in 0..<19_000 { memory.removeValue(for: key) }
    await memory.handleMemoryPressure(.warning)  // shrinks sparse storage
    #expect(memory.invariantViolations.isEmpty)
    for key in 19_000..<20_000 where memory.contains(key) {
      #expect(memory.value(for: key) == String(key))
    }
  }

  @Test func keysThatCollideOnTheirTagAreStillTold() throws {
    // Keys whose hashes collide (same hashValue) must still be told apart by equality.
    struct Colliding: Hashable, Sendable {
      var id: Int
      func hash(into hasher: inout Hasher) { hasher.combine(0) }
    }
    let memory = try MemoryLayer<Colliding, Int>(configuration: .init(segmentCount: 1))
    for id in 0..<200 { try memory.insert(id, for: Colliding(id: id)) }
    for id in 0..<200 { #expect(memory.value(for: Colliding(id: id)) == id) }
    for id in stride(from: 0, to: 200, by: 3) { memory.removeValue(for: Colliding(id: id)) }
    for id in 0..<200 { #expect(memory.value(for: Colliding(id: id)) == (id % 3 == 0 ? nil : id)) }
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test func valuesLeavingTheLayerAreReleasedOutsideItsLocks() async throws {
    // A value whose deinit uses the layer would deadlock if released under the segment's lock.
    final class Reentrant: Sendable {
      let memory: MemoryLayer<Int, Reentrant>?
      init(_ memory: MemoryLayer<Int, Reentrant>?) { self.memory = memory }
      deinit { _ = memory?.value(for: 0) }
    }
    let memory = try MemoryLayer<Int, Reentrant>(configuration: .init(countLimit: 1, segmentCount: 1))
    try memory.insert(Reentrant(memory), for: 1)
    try memory.insert(Reentrant(memory), for: 1)  // replaced
    try memory.insert(Reentrant(memory), for: 2)  // evicts 1
    memory.removeValue(for: 2)
    #expect(memory.count == 0)
    try memory.insert(Reentrant(memory), for: 3)
    memory.removeAll()
    try memory.insert(Reentrant(memory), for: 4)
    await memory.handleMemoryPressure(.critical)
    #expect(memory.count == 0)
  }

  @Test func automaticSegmentsKeepSmallCachesExact() {
    #expect(MemoryLayer<Int, Int>.Configuration.automaticSegmentCount(countLimit: 100) == 1)
    #expect(MemoryLayer<Int, Int>.Configuration.automaticSegmentCount(countLimit: 511) == 1)
    #expect(MemoryLayer<Int, Int>.Configuration.automaticSegmentCount(countLimit: 1_000_000) > 1)
  }
}
