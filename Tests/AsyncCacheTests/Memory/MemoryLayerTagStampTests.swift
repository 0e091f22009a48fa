import AsyncCacheTesting
import Testing

@testable import AsyncCache

/// The stamps that let a hit on an entry with tags skip the check of its tags until the next
/// invalidation (`MemorySegment+Tags.swift`): 16 bits that cycle, kept honest by a sweep.
@Suite("MemoryLayer: stamps of entries whose tags were found alive", .timeLimit(.minutes(3)))
struct MemoryLayerTagStampTests {
  let clock = ManualClock()

  /// A layer of one segment, so that every entry shares its generations.
  func layer(countLimit: Int = 1_000) throws -> MemoryLayer<String, Int> {
    try MemoryLayer(configuration: .init(countLimit: countLimit, segmentCount: 1, clock: clock))
  }

  /// The instant of the `index`th invalidation: each later than the one before.
  func instant(_ index: Int) -> CacheInstant {
    clock.now.advanced(by: .nanoseconds(index + 1))
  }

  /// The stamps of the segment's live nodes that are not 0.
  func stamps(in memory: MemoryLayer<String, Int>) -> [UInt16] {
    memory.store.segments.withLock(0) { segment in
      segment.liveSlots.map { segment.nodes[$0].aliveStamp }.filter { $0 != 0 }
    }
  }

  @Test("a hit stamps an entry alive; the next invalidation makes it checked again, and a dead one a miss")
  func stampsFollowInvalidations() async throws {
    let memory = try layer()
    let produced = clock.now
    try memory.insert(
      CacheEntry(1, expiresAt: nil, metadata: EntryMetadata(producedAt: produced, tags: ["a"])), for: "a")
    try memory.insert(2, for: "plain")
    #expect(stamps(in: memory).isEmpty, "nothing is stamped before an invalidation")
    await memory.invalidate(tag: "x", at: instant(0))
    #expect(memory.value(for: "a") == 1)
    #expect(stamps(in: memory).count == 1, "the entry with tags, found alive")
    #expect(memory.value(for: "a") == 1, "served from its stamp")
    await memory.invalidate(tag: "a", at: instant(1))
    #expect(memory.value(for: "a") == nil, "the stamp of an earlier generation does not keep it")
    #expect(memory.value(for: "plain") == 2)
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test("a write of new tags clears the entry's stamp: an entry dead on arrival is not served")
  func writesClearTheStamp() async throws {
    let memory = try layer()
    let early = clock.now
    try memory.insert(CacheEntry(1, expiresAt: nil, metadata: EntryMetadata(producedAt: early, tags: ["a"])), for: "k")
    await memory.invalidate(tag: "b", at: instant(0))
    #expect(memory.value(for: "k") == 1)
    #expect(stamps(in: memory).count == 1)
    // Produced before "b" was invalidated: dead as soon as it is written, in the same generation.
    try memory.insert(CacheEntry(2, expiresAt: nil, metadata: EntryMetadata(producedAt: early, tags: ["b"])), for: "k")
    #expect(stamps(in: memory).isEmpty)
    #expect(memory.value(for: "k") == nil)
    #expect(memory.invariantViolations.isEmpty)
  }

  /// Stamps have 16 bits: after 65,535 generations the current one is the one a node was stamped
  /// in long ago. Without the sweep, this entry, stamped alive and killed in the next
  /// generation, would be served again when the generations came round.
  @Test("an entry stamped alive 65,535 generations ago is checked, not served from its stamp")
  func generationsComeRound() async throws {
    let memory = try layer()
    let produced = clock.now
    try memory.insert(
      CacheEntry(1, expiresAt: nil, metadata: EntryMetadata(producedAt: produced, tags: ["a"])), for: "a")
    try memory.insert(
      CacheEntry(2, expiresAt: nil, metadata: EntryMetadata(producedAt: produced, tags: ["b"])), for: "b")
    await memory.invalidate(tag: "x", at: instant(0))
    #expect(memory.value(for: "a") == 1, "stamped alive")
    let generation = memory.store.segments.withLock(0) { $0.tagGeneration }
    await memory.invalidate(tag: "a", at: instant(1))
    // Each invalidation, then a hit on another entry with tags, starts a generation.
    #expect(memory.value(for: "b") == 2)
    for index in 2...Int(UInt16.max) {
      await memory.invalidate(tag: "x", at: instant(index))
      #expect(memory.value(for: "b") == 2)
    }
    #expect(memory.store.segments.withLock(0) { $0.tagGeneration } == generation, "the generations came round")
    #expect(memory.value(for: "a") == nil)
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test("the sweep clears every stamp within 32,768 generations, however many slots the segment has")
  func sweepCoversTheSegment() async throws {
    // 40,000 entries: about 50,000 slots, two swept per generation.
    let count = 40_000
    let memory = try layer(countLimit: count)
    let produced = clock.now
    let tagged = EntryMetadata(producedAt: produced, tags: ["t"])
    for index in 0..<count { try memory.insert(CacheEntry(index, expiresAt: nil, metadata: tagged), for: "k\(index)") }
    await memory.invalidate(tag: "x", at: instant(0))
    for index in 0..<count { #expect(memory.value(for: "k\(index)") == index) }
    #expect(stamps(in: memory).count == count)
    let slotCount = memory.store.segments.withLock(0) { $0.slotCount }
    #expect(slotCount > MemorySegment<String, Int>.stampSweepGenerations, "more than one slot a generation")
    // Generations started by hits on one entry: it alone is stamped again.
    for index in 1...MemorySegment<String, Int>.stampSweepGenerations {
      await memory.invalidate(tag: "x", at: instant(index))
      #expect(memory.value(for: "k0") == 0)
    }
    let generation = memory.store.segments.withLock(0) { $0.tagGeneration }
    let left = stamps(in: memory)
    #expect(
      left.count == 1 && left.first == generation,
      "only the entry hit in this generation keeps a stamp; \(left.count) do, of \(Set(left).sorted().prefix(10))")
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test("a table that grows moves its nodes to other slots and clears their stamps")
  func rebuildsClearTheStamps() async throws {
    let memory = try layer(countLimit: 10_000)
    let tagged = EntryMetadata(producedAt: clock.now, tags: ["t"])
    try memory.insert(CacheEntry(0, expiresAt: nil, metadata: tagged), for: "k0")
    await memory.invalidate(tag: "x", at: instant(0))
    #expect(memory.value(for: "k0") == 0)
    #expect(stamps(in: memory).count == 1)
    let rebuilds = memory.store.segments.withLock(0) { $0.rebuilds }
    for index in 1..<100 { try memory.insert(index, for: "k\(index)") }
    #expect(memory.store.segments.withLock(0) { $0.rebuilds } > rebuilds)
    #expect(stamps(in: memory).isEmpty)
    #expect(memory.value(for: "k0") == 0)
    #expect(memory.invariantViolations.isEmpty)
  }
}
