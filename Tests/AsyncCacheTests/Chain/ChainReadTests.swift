import Testing

@testable import AsyncCache

/// A read-through of a chain ends once, however it goes: by what it stores, or when dropped.
@Suite(.timeLimit(.minutes(3))) struct ChainReadTests {
  let top: MemoryLayer<String, Int>
  let middle: MemoryLayer<String, Int>
  let bottom: MemoryLayer<String, Int>

  init() throws {
    (top, middle, bottom) = (try MemoryLayer(), try MemoryLayer(), try MemoryLayer())
  }

  func chain(backfill: BackfillPolicy = .awaited) throws -> CacheChain<String, Int> {
    try CacheChain([top, middle, bottom], configuration: .init(backfill: backfill))
  }

  @Test func aReadDroppedEndsAndStoresNothing() async throws {
    let chain = try chain()
    try bottom.insert(1, for: "k")
    func lookUp() async throws -> Int? {
      let read = ChainRead(of: "k", in: chain)
      #expect(!chain.coordinator.isIdle, "the read is open")
      return try await read.locate()?.entry.value
    }
    #expect(try await lookUp() == 1)
    #expect(chain.coordinator.isIdle, "dropped, the read ended")
    #expect(top.value(for: "k") == nil, "nothing was copied")
  }

  @Test func aCopyGoesAboveTheLayerItWasFoundInFromTheTopOrBelowIt() async throws {
    let chain = try chain()
    await ChainRead(of: "a", in: chain).copy(CacheEntry(1), foundIn: 2)
    #expect(top.value(for: "a") == 1 && middle.value(for: "a") == 1)
    #expect(bottom.value(for: "a") == nil, "not into the layer it came from")
    await ChainRead(of: "b", in: chain).copy(CacheEntry(2), foundIn: 2, skippingTop: true)
    #expect(top.value(for: "b") == nil && middle.value(for: "b") == 2)
    await ChainRead(of: "c", in: chain).copy(CacheEntry(3), foundIn: 1, everywhere: true)
    #expect(top.value(for: "c") == 3 && middle.value(for: "c") == 3 && bottom.value(for: "c") == 3)
    #expect(chain.coordinator.isIdle)
  }

  @Test func aStoreSkipsTheLayerExcludedAndLosesToAWrite() async throws {
    let chain = try chain()
    let stored = await ChainRead(of: "a", in: chain).store(CacheEntry(1), excluding: 1)
    #expect(stored)
    #expect(top.value(for: "a") == 1 && middle.value(for: "a") == nil && bottom.value(for: "a") == 1)
    let read = ChainRead(of: "b", in: chain)
    try await chain.insert(2, for: "b")
    #expect(await read.store(CacheEntry(1)) == false, "a write since the read began wins")
    #expect(top.value(for: "b") == 2 && bottom.value(for: "b") == 2)
    #expect(chain.coordinator.isIdle)
  }

  @Test func aCopyInTheBackgroundEndsTheReadOnceItIsDone() async throws {
    let chain = try chain(backfill: .background)
    await ChainRead(of: "a", in: chain).copy(CacheEntry(1), foundIn: 2)
    await chain.coordinator.waitUntil { $0.isIdle }
    #expect(top.value(for: "a") == 1 && middle.value(for: "a") == 1)
    ChainRead(of: "b", in: chain).copyBelowTopInBackground(CacheEntry(2))
    await chain.coordinator.waitUntil { $0.isIdle }
    #expect(top.value(for: "b") == nil && middle.value(for: "b") == 2 && bottom.value(for: "b") == 2)
  }
}
