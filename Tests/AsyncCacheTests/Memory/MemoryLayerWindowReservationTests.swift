import Testing

@testable import AsyncCache

/// The admission window a running prefetcher reserves in an ``EvictionPolicy/adaptive`` layer
/// (``MemoryStore/reserveWindow(entries:)``).
@Suite(.timeLimit(.minutes(1)))
struct MemoryLayerWindowReservationTests {
  @Test("reservations add up, are capped at the largest window, and end with their release")
  func reservationsAddUpAndEnd() throws {
    let layer = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 1_000))
    let store = layer.store
    func publishedShare() -> Double { Double(bitPattern: store.windowShareBits.load(ordering: .relaxed)) }
    #expect(publishedShare() == WindowTarget.minimumShare)
    let first = try #require(store.reserveWindow(entries: 50))
    #expect(publishedShare() == 0.05)
    let second = try #require(store.reserveWindow(entries: 100))
    #expect(publishedShare() == 0.15)
    let huge = try #require(store.reserveWindow(entries: .max))
    #expect(store.windowFloor.load(ordering: .relaxed) == .max)
    #expect(publishedShare() == WindowTarget.maximumShare)
    store.releaseWindow(huge)
    store.releaseWindow(first)
    #expect(publishedShare() == 0.1)
    store.releaseWindow(second)
    store.releaseWindow(second)
    #expect(store.windowFloor.load(ordering: .relaxed) == 0)
    #expect(publishedShare() == WindowTarget.minimumShare)
    // The segments size their window from the published share at their next insert.
    try layer.insert(1, for: 1)
    #expect(store.segments.withLock(0) { $0.admission.appliedShare } == WindowTarget.minimumShare)
  }

  @Test("a fixed window grows while reserved and goes back to exactly its own size after")
  func fixedWindow() throws {
    var configuration = MemoryLayer<Int, Int>.Configuration(countLimit: 150, segmentCount: 1)
    configuration.evictionPolicy = .windowTinyLFU
    let layer = try MemoryLayer<Int, Int>(configuration: configuration)
    func windowMaximum() -> Int { layer.store.segments.withLock(0) { $0.admission.windowCountMaximum } }
    // Caffeine's rounding: 150 - Int(150 * 0.99) = 2, where 1% would be 1.
    #expect(windowMaximum() == 2)
    let reservation = try #require(layer.store.reserveWindow(entries: 30))
    try layer.insert(1, for: 1)
    #expect(windowMaximum() == 30)
    layer.store.releaseWindow(reservation)
    try layer.insert(2, for: 2)
    #expect(windowMaximum() == 2)
  }

  @Test("least recently used has no admission window: nothing to reserve")
  func leastRecentlyUsed() throws {
    var configuration = MemoryLayer<Int, Int>.Configuration(countLimit: 100)
    configuration.evictionPolicy = .leastRecentlyUsed
    let layer = try MemoryLayer<Int, Int>(configuration: configuration)
    #expect(layer.store.reserveWindow(entries: 10) == nil)
  }
}
