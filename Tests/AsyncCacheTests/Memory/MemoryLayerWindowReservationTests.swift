import Testing

@testable import AsyncCache

/// The room a running prefetcher reserves in the admission window of a W-TinyLFU layer, fixed
/// or adaptive (``MemoryStore/reserveWindow(entries:)``).
@Suite(.timeLimit(.minutes(3)))
struct MemoryLayerWindowReservationTests {
  static func layer(
    countLimit: Int = 10_000, costLimit: Int = .max, segments: Int, policy: EvictionPolicy = .adaptive
  ) throws -> MemoryLayer<Int, Int> {
    var cost: (@Sendable (Int) -> Int)?
    if costLimit != .max { cost = { _ in 10 } }
    return try MemoryLayer<Int, Int>(
      configuration: .init(
        countLimit: countLimit, costLimit: costLimit, cost: cost, segmentCount: segments, evictionPolicy: policy))
  }

  /// The window's count maximum of each segment.
  static func windows(_ layer: MemoryLayer<Int, Int>) -> [Int] {
    (0...layer.store.segmentMask).map { index in
      layer.store.segments.withLock(index) { $0.admission.windowCountMaximum }
    }
  }

  /// Inserts keys from `first` until every segment inserted a new key (each applies the
  /// reservations at its next insert).
  static func insertIntoEverySegment(_ layer: MemoryLayer<Int, Int>, from first: Int) throws {
    var seen = Set<Int>()
    var key = first
    while seen.count <= layer.store.segmentMask {
      try layer.insert(key, for: key)
      seen.insert(layer.store.segmentIndex(for: key.hashValue))
      key += 1
    }
  }

  @Test(
    "each segment keeps room for its part of the reservations, rounded up, and goes back to its own size after",
    arguments: [EvictionPolicy.adaptive, .windowTinyLFU])
  func roomPerSegment(policy: EvictionPolicy) throws {
    // 4 segments of 250: a window starts at 3 each (Caffeine's rounding, 250 - Int(247.5)). A
    // fixed one stays there; an adaptive one, once sized from its share, is 1% of 250: 2.
    let layer = try Self.layer(countLimit: 1_000, segments: 4, policy: policy)
    try Self.insertIntoEverySegment(layer, from: 0)
    #expect(Self.windows(layer) == [3, 3, 3, 3])
    let own = Array(repeating: policy == .windowTinyLFU ? 3 : 2, count: 4)
    // 11 entries: 3 a segment. A reservation never makes a window smaller.
    let small = try #require(layer.store.reserveWindow(entries: 11))
    try Self.insertIntoEverySegment(layer, from: 1_000)
    #expect(Self.windows(layer) == [3, 3, 3, 3])
    let large = try #require(layer.store.reserveWindow(entries: 30))
    try Self.insertIntoEverySegment(layer, from: 2_000)
    #expect(Self.windows(layer) == [11, 11, 11, 11])
    layer.store.releaseWindow(large)
    layer.store.releaseWindow(small)
    layer.store.releaseWindow(small)
    #expect(layer.store.windowFloor.load(ordering: .relaxed) == 0)
    try Self.insertIntoEverySegment(layer, from: 3_000)
    #expect(Self.windows(layer) == own)
  }

  @Test("a reservation takes at most half of each segment, and reservations add up without overflowing")
  func atMostHalf() throws {
    let layer = try Self.layer(countLimit: 100, segments: 1)
    let first = try #require(layer.store.reserveWindow(entries: .max))
    let second = try #require(layer.store.reserveWindow(entries: 10))
    #expect(layer.store.windowFloor.load(ordering: .relaxed) == .max)
    try layer.insert(0, for: 0)
    #expect(Self.windows(layer) == [50])
    #expect(layer.store.segments.withLock(0) { $0.admission.protectedCountMaximum } == 40)
    layer.store.releaseWindow(first)
    try layer.insert(1, for: 1)
    #expect(Self.windows(layer) == [10])
    layer.store.releaseWindow(second)
  }

  @Test("in a layer bounded by cost, the room is counted in cost by the entries' mean cost")
  func boundedByCost() throws {
    // Entries cost 10, the layer holds 100 of them: a count limit of 10,000 bounds nothing.
    let layer = try Self.layer(costLimit: 1_000, segments: 1)
    for key in 0..<50 { try layer.insert(key, for: key) }
    let own = layer.store.segments.withLock(0) { $0.admission.windowCostMaximum }
    #expect(own == 10)
    let reservation = try #require(layer.store.reserveWindow(entries: 12))
    try layer.insert(50, for: 50)
    #expect(layer.store.segments.withLock(0) { $0.admission.windowCostMaximum } == 120)
    layer.store.releaseWindow(reservation)
    try layer.insert(51, for: 51)
    #expect(layer.store.segments.withLock(0) { $0.admission.windowCostMaximum } == own)
  }

  @Test("while room is reserved, a span does not relax the adaptive target")
  func noRelaxingWhileReserved() throws {
    // Large enough for the ghosts' target (a smaller layer of one segment is refereed).
    let layer = try Self.layer(countLimit: 5_000, segments: 1)
    let store = try #require(layer.store.windowTarget)
    store.withLock { $0.share = 0.5 }
    let reservation = try #require(layer.store.reserveWindow(entries: 10))
    // A span in which the window earned nothing and main everything.
    layer.store.spanMainHits.store(1_000, ordering: .relaxed)
    layer.store.endSpan(entries: 1_000)
    #expect(store.withLock { $0.share } == 0.5)
    layer.store.releaseWindow(reservation)
    layer.store.spanMainHits.store(1_000, ordering: .relaxed)
    layer.store.endSpan(entries: 1_000)
    #expect(store.withLock { $0.share } < 0.5)
  }

  @Test("least recently used has no admission window: nothing to reserve")
  func leastRecentlyUsed() throws {
    let layer = try Self.layer(countLimit: 100, segments: 1, policy: .leastRecentlyUsed)
    #expect(layer.store.reserveWindow(entries: 10) == nil)
  }
}
