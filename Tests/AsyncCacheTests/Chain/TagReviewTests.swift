import AsyncCacheTesting
import Foundation
import Synchronization
import Testing

@testable import AsyncCache

// Probes of an independent review of tags, kept as regression tests: each states a promise of
// invalidate(tag:) that an earlier build broke.
@Suite("Tags: what a review broke", .timeLimit(.minutes(3)))
struct TagReviewTests {
  let clock = ManualClock()
  let memory: MemoryLayer<String, Int>
  let below = FakeLayer<String, Int>()

  init() throws {
    memory = try MemoryLayer(configuration: .init(clock: clock))
  }

  /// Year 2100: a producer whose clock runs ahead (another process, an origin's `Date`), far
  /// beyond anything this process has stamped.
  static let ahead = CacheInstant(secondsSince1970: 4_102_444_800)

  @Test("a write that says it was produced later than now does not survive an invalidation made after it")
  func producedAtFromTheFuture() async throws {
    let origin = TaggingOrigin()
    let cache = try LoadingCache(layers: [memory, below], origin: origin, configuration: .init(clock: clock))
    try await cache.insert(1, for: "a", metadata: EntryMetadata(producedAt: Self.ahead, tags: ["t"]))
    #expect(cache.cachedValue(for: "a") == 1)
    try await cache.invalidate(tag: "t")
    // Promise: after invalidate(tag:) returns, no request answers an entry stored with the tag
    // before it.
    #expect(cache.cachedValue(for: "a") == nil, "stored before the invalidation, still answered")
    _ = try await cache.value(for: "a")
    #expect(origin.loads == 1, "loaded anew")
  }

  @Test("both lanes of a lane layer are told of the invalidation")
  func laneDoesNotForward() async throws {
    let other = FakeLayer<String, Int>()
    let lane = below.lane(other) { $0.hasPrefix("file:") }
    let cache = try LoadingCache(layers: [memory, lane], origin: TaggingOrigin(), configuration: .init(clock: clock))
    try await cache.insert(1, for: "a", tags: ["t"])
    try await cache.invalidate(tag: "t")
    // AsyncCacheLayer.invalidate(tag:at:): "Layers that wrap others pass it on".
    #expect(below.invalidatedTags["t"] != nil, "the primary lane never heard of it")
    #expect(other.invalidatedTags["t"] != nil, "the other lane never heard of it")
  }

  @Test("CacheChain.invalidate(tag:at:) refuses a tag that could be no entry's")
  func chainInvalidateAtDoesNotValidate() async throws {
    let chain = try CacheChain<String, Int>([.init(memory), .init(below)])
    await #expect(throws: EntryMetadataError.self) { try await chain.invalidate(tag: "", at: clock.now) }
    #expect(below.invalidatedTags[""] == nil, "an empty tag reached the layers")
  }

  @Test("invalidate(tag:) keeps the errors negative caching remembers")
  func unrelatedInvalidationForgetsNegatives() async throws {
    struct NotFound: Error {}
    let calls = Atomic<Int>(0)
    let origin = ClosureFetcher<String, Int> { _ in
      calls.add(1, ordering: .relaxed)
      throw NotFound()
    }
    var configuration = LoadingCache<String, Int>.Configuration(clock: clock)
    configuration.negativeCaching = NegativeCachingPolicy(timeToLive: .seconds(60)) { _ in true }
    let cache = try LoadingCache(layers: [memory, below], origin: origin, configuration: configuration)
    await #expect(throws: NotFound.self) { try await cache.value(for: "missing") }
    await #expect(throws: NotFound.self) { try await cache.value(for: "missing") }
    #expect(calls.load(ordering: .relaxed) == 1, "remembered")
    try await cache.invalidate(tag: "unrelated")
    await #expect(throws: NotFound.self) { try await cache.value(for: "missing") }
    #expect(calls.load(ordering: .relaxed) == 1, "an unrelated tag invalidation made the origin be asked again")
  }
}

@Suite("Tags: a tag too long for the file layer's record")
struct TagReviewLongTagTests {
  @Test("a 256-byte tag is refused with a typed error, not written")
  func longTag() async throws {
    let fixture = try DiskFixture()
    defer { fixture.parent.remove() }
    let layer = try await fixture.open()
    let chain = try CacheChain<String, Data>([.init(layer)])
    let long = String(repeating: "x", count: 256)
    await #expect(throws: EntryMetadataError.self) { try await chain.invalidate(tag: long, at: WallClock().now) }
    await #expect(throws: EntryMetadataError.self) { try await layer.invalidate(tag: long, at: WallClock().now) }
    #expect(!fixture.names.contains(DiskLayer<String, Data>.tagFileName))
  }
}
