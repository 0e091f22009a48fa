import AsyncCacheTesting
import Foundation
import Synchronization
import Testing

@testable import AsyncCache

/// An origin whose values say which load brought them, filed under the tags the test sets.
final class TaggingOrigin: EntryFetcher, Sendable {
  private let state = Locked<(loads: Int, tags: [String: Set<String>])>((0, [:]))
  /// Holds the fetches when the test gates them.
  let gate: GatedFetcher<String, Int>?

  init(gated: Bool = false) {
    gate = gated ? GatedFetcher { _ in 0 } : nil
  }

  /// Files the values of `key` loaded from now on under `tags`.
  func file(_ key: String, under tags: Set<String>) { state.withLock { $0.tags[key] = tags } }

  var loads: Int { state.withLock(\.loads) }

  func fetchEntry(_ key: String, current: CacheEntry<Int>?) async throws -> FetchedEntry<Int> {
    let (load, tags) = state.withLock { state in
      state.loads += 1
      return (state.loads, state.tags[key] ?? [])
    }
    if let gate { _ = try await gate.fetch(key) }
    return .value(load, metadata: EntryMetadata(tags: tags))
  }
}

@Suite("Tags: invalidate(tag:) on one instance", .timeLimit(.minutes(3)))
struct TagInvalidationTests {
  let clock = ManualClock()
  let memory: MemoryLayer<String, Int>
  let below = FakeLayer<String, Int>()

  init() throws {
    memory = try MemoryLayer(configuration: .init(clock: clock))
  }

  func cache(_ origin: TaggingOrigin, layers: [any AsyncCacheLayer<String, Int>]? = nil) throws -> LoadingCache<
    String, Int
  > {
    try LoadingCache(layers: layers ?? [memory, below], origin: origin, configuration: .init(clock: clock))
  }

  @Test("an invalidated tag makes its entries misses in every layer; the others stay")
  func invalidatesEveryLayer() async throws {
    let origin = TaggingOrigin()
    let cache = try cache(origin)
    try await cache.insert(1, for: "a", tags: ["tenant:1"])
    try await cache.insert(2, for: "b", tags: ["tenant:1", "catalogue"])
    try await cache.insert(3, for: "c", tags: ["tenant:2"])
    try await cache.insert(4, for: "d")
    // Stamps never go back, in this process: no earlier than the clock says (see TagStamps).
    #expect(try #require(below.storedEntries["a"]?.metadata.producedAt) >= clock.now, "a tagged write is stamped")
    #expect(below.storedEntries["d"]?.metadata == EntryMetadata(), "an untagged one carries nothing")

    try await cache.invalidate(tag: "tenant:1")

    #expect(cache.cachedValue(for: "a") == nil)
    #expect(cache.cachedValue(for: "b") == nil)
    #expect(cache.cachedValue(for: "c") == 3)
    #expect(cache.cachedValue(for: "d") == 4)
    #expect(memory.statistics.evictions[.invalidated] == 2, "removed from memory when looked up")
    #expect(below.invalidatedTags["tenant:1"] != nil, "every layer is told")
    // The lower layer still holds them; the chain holds them dead: the origin is asked.
    #expect(below.storedEntries["a"] != nil)
    #expect(try await cache.value(for: "a") == 1)
    #expect(try await cache.value(for: "b") == 2)
    #expect(origin.loads == 2)
    #expect(below.storedEntries["a"]?.metadata.tags == [], "the load replaced the dead entry below")
    #expect(try await cache.value(for: "c") == 3)
    #expect(origin.loads == 2)
  }

  @Test("a write after the invalidation lives, on a clock that stands still")
  func writeAfterInvalidation() async throws {
    let cache = try cache(TaggingOrigin())
    try await cache.insert(1, for: "a", tags: ["t"])
    try await cache.invalidate(tag: "t")
    try await cache.insert(2, for: "a", tags: ["t"])
    #expect(cache.cachedValue(for: "a") == 2)
    let stamped = try #require(memory.entry(for: "a")?.metadata.producedAt)
    #expect(stamped > clock.now, "stamped after the invalidation, on the same instant of the clock")
    // A write that says it was produced before the invalidation is dead on arrival.
    try await cache.insert(3, for: "a", metadata: EntryMetadata(producedAt: clock.now, tags: ["t"]))
    #expect(cache.cachedValue(for: "a") == nil)
  }

  @Test("loaded entries carry the origin's tags and are stamped when the load started")
  func loadedEntries() async throws {
    let origin = TaggingOrigin()
    origin.file("a", under: ["t"])
    let cache = try cache(origin)
    #expect(try await cache.value(for: "a") == 1)
    let stored = try #require(memory.entry(for: "a")?.metadata)
    #expect(stored.tags == ["t"])
    #expect(try #require(stored.producedAt) >= clock.now)
    try await cache.invalidate(tag: "t")
    #expect(try await cache.value(for: "a") == 2)
    #expect(cache.cachedValue(for: "a") == 2)
    #expect(origin.loads == 2)
  }

  @Test("a load in flight when its tag is invalidated answers its requests, is stored nowhere, and is not joined")
  func loadInFlightIsRefused() async throws {
    let origin = TaggingOrigin(gated: true)
    origin.file("a", under: ["t"])
    let gate = try #require(origin.gate)
    let cache = try cache(origin)
    try await cache.insert(0, for: "a", tags: ["t"])
    try await cache.removeValue(for: "a")
    let first = Task { try await cache.value(for: "a") }
    await gate.waitForFetches(1, for: "a")
    try await cache.invalidate(tag: "t")
    // A request after the invalidation does not join the load that started before it.
    let second = Task { try await cache.value(for: "a") }
    await gate.waitForFetches(2, for: "a")
    #expect(gate.release("a") == 2)
    let answers = [try await first.value, try await second.value]
    #expect(answers == [1, 2])
    #expect(cache.cachedValue(for: "a") == 2, "the older load stored nothing")
    #expect(below.storedEntries["a"]?.value == 2)
  }

  @Test("a load that brings an untagged value in flight is not refused")
  func untaggedLoadInFlight() async throws {
    let origin = TaggingOrigin(gated: true)
    let gate = try #require(origin.gate)
    let cache = try cache(origin)
    let first = Task { try await cache.value(for: "a") }
    await gate.waitForFetches(1, for: "a")
    try await cache.invalidate(tag: "t")
    #expect(gate.release("a") == 1)
    #expect(try await first.value == 1)
    #expect(cache.cachedValue(for: "a") == 1)
  }

  @Test("the memory layer honours invalidations through operators and on synchronous hits")
  func throughOperators() async throws {
    let mapped = memory.mappingKeys { (key: String) in key }
    let cache = try cache(TaggingOrigin(), layers: [mapped, below])
    try await cache.insert(1, for: "a", tags: ["t"])
    #expect(cache.cachedValue(for: "a") == 1)
    try await cache.invalidate(tag: "t")
    #expect(cache.cachedValue(for: "a") == nil)
    #expect(memory.value(for: "a") == nil)
    #expect(!memory.contains("a"))
  }

  @Test("a stale entry of an invalidated tag is not served, not even after an error")
  func noStaleServing() async throws {
    struct Down: Error {}
    let failing = ClosureEntryFetcher<String, Int> { _, _ in throw Down() }
    var configuration = LoadingCache<String, Int>.Configuration(clock: clock)
    configuration.timeToLive = .seconds(10)
    configuration.staleIfError = .seconds(100)
    let cache = try LoadingCache(layers: [memory, below], origin: failing, configuration: configuration)
    try await cache.insert(1, for: "a", tags: ["t"])
    clock.advance(by: .seconds(20))
    try await cache.invalidate(tag: "t")
    await #expect(throws: Down.self) { try await cache.value(for: "a") }
  }

  @Test("tags that could be no entry's are refused, naming what is wrong")
  func badTags() async throws {
    let cache = try cache(TaggingOrigin())
    await #expect(throws: EntryMetadataError.emptyTag) { try await cache.invalidate(tag: "") }
    let long = String(repeating: "x", count: 256)
    await #expect(throws: EntryMetadataError.tagTooLong(tag: String(long.prefix(40)), bytes: 256, limit: 255)) {
      try await cache.invalidate(tag: long)
    }
    await #expect(throws: EntryMetadataError.emptyTag) { try await cache.insert(1, for: "a", tags: [""]) }
    #expect(below.invalidatedTags.isEmpty)
  }

  @Test("a snapshot leaves dead entries out")
  func snapshot() async throws {
    let cache = try cache(TaggingOrigin())
    try await cache.insert(1, for: "a", tags: ["t"])
    try await cache.insert(2, for: "b", tags: ["u"])
    try await cache.invalidate(tag: "t")
    let url = FileManager.default.temporaryDirectory.appendingPathComponent("tags-\(UInt64.random(in: 0 ... .max))")
    defer { try? FileManager.default.removeItem(at: url) }
    #expect(try await memory.writeSnapshot(to: url) == 1)
  }

  @Test("a failing layer fails the invalidation after the others are told; this cache holds the tag dead")
  func failingLayer() async throws {
    struct Broken: Error {}
    let cache = try cache(TaggingOrigin())
    try await cache.insert(1, for: "a", tags: ["t"])
    below.fail(.invalidateTag, with: Broken())
    await #expect(throws: AsyncCacheError.self) { try await cache.invalidate(tag: "t") }
    #expect(cache.cachedValue(for: "a") == nil)
    #expect(try await cache.value(for: "a") == 1, "loaded anew from the origin")
  }

  /// The property: after `invalidate(tag:)` returns, no request answers with a value loaded
  /// before it under that tag. Tasks read at once while one invalidates, one invalidation after
  /// another: each value records the number of invalidations begun when the origin was asked
  /// (after the load was stamped), and a read must answer a value at least as new as the
  /// invalidations finished before it began.
  @Test("no request answers a value from before an invalidation that returned", arguments: [1, 2, 3])
  func property(seed: UInt64) async throws {
    // Values: epoch * 1_000_000 + serial.
    final class Counters: Sendable {
      let begun = Atomic<Int>(0)
      let finished = Atomic<Int>(0)
      let serial = Atomic<Int>(0)
    }
    let counters = Counters()
    let origin = ClosureEntryFetcher<String, Int> { _, _ in
      let epoch = counters.begun.load(ordering: .sequentiallyConsistent)
      await Task.yield()
      let value = epoch * 1_000_000 + counters.serial.wrappingAdd(1, ordering: .relaxed).newValue
      return .value(value, metadata: EntryMetadata(tags: ["t"]))
    }
    let small = try MemoryLayer<String, Int>(configuration: .init(countLimit: 4, clock: clock))
    let cache = try LoadingCache(layers: [small, below], origin: origin, configuration: .init(clock: clock))
    let keys = ["a", "b", "c", "d", "e", "f"]
    try await withThrowingTaskGroup(of: Void.self) { group in
      group.addTask {
        for epoch in 1...30 {
          counters.begun.store(epoch, ordering: .sequentiallyConsistent)
          try await cache.invalidate(tag: "t")
          counters.finished.store(epoch, ordering: .sequentiallyConsistent)
          for _ in 0..<5 { await Task.yield() }
        }
      }
      for task in 0..<5 {
        group.addTask {
          var random = SeededGenerator(seed: seed &* 100 &+ UInt64(task))
          for _ in 0..<200 {
            let key = keys[Int(random.next() % UInt64(keys.count))]
            if random.next() % 8 == 0 { try await cache.removeValue(for: key) }
            let floor = counters.finished.load(ordering: .sequentiallyConsistent)
            let value = try await cache.value(for: key)
            #expect(value / 1_000_000 >= floor, "read \(value) of \(key) after \(floor) invalidations")
            await Task.yield()
          }
        }
      }
      try await group.waitForAll()
    }
  }

  @Test("stamps never repeat, never go back, and pass what they observe, unless it is far ahead")
  func stamps() {
    let stamps = TagStamps()
    let now = WallClock().now
    let first = stamps.next(now: now)
    #expect(first >= now)
    #expect(stamps.next(now: now) > first, "the same clock reading gives a later stamp")
    #expect(stamps.next(now: CacheInstant(secondsSince1970: 10)) > first, "a clock that goes back does not")
    let near = now.advanced(by: .seconds(30))
    TagStamps.observe(near)
    #expect(stamps.next(now: now) > near, "past an invalidation it learnt of, a little ahead")
    let far = now.advanced(by: .seconds(86_400))
    TagStamps.observe(far)
    #expect(stamps.next(now: now) < far, "not carried a day ahead")
  }

  @Test("a hit found alive is checked again after every later invalidation, also of another tag first")
  func verdictsExpire() async throws {
    let cache = try cache(TaggingOrigin())
    try await cache.insert(1, for: "a", tags: ["t"])
    try await cache.insert(2, for: "b", metadata: EntryMetadata(entityTag: "e"))
    try await cache.invalidate(tag: "x")
    #expect(cache.cachedValue(for: "a") == 1, "checked, alive")
    #expect(cache.cachedValue(for: "a") == 1, "alive, from the verdict")
    #expect(cache.cachedValue(for: "b") == 2, "metadata without tags")
    try await cache.invalidate(tag: "y")
    #expect(cache.cachedValue(for: "a") == 1)
    try await cache.invalidate(tag: "t")
    #expect(cache.cachedValue(for: "a") == nil, "dead after its tag's invalidation")
    #expect(memory.contains("b"))
  }
}
