import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

@Suite("MemoryLayer: entry metadata", .timeLimit(.minutes(1)))
struct MemoryLayerMetadataTests {
  let clock = ManualClock()
  static let metadata = EntryMetadata(
    entityTag: #""v1""#, lastModified: CacheInstant(secondsSince1970: 1_700_000_000), tags: ["tenant:7"])

  func layer(policy: EvictionPolicy = .adaptive, countLimit: Int = 1_000) throws -> MemoryLayer<String, Int> {
    try MemoryLayer(configuration: .init(countLimit: countLimit, evictionPolicy: policy, clock: clock))
  }

  @Test("an entry keeps its metadata until it is replaced, and a replacement without metadata has none")
  func replacing() throws {
    let memory = try layer()
    try memory.insert(CacheEntry(1, expiresAt: nil, metadata: Self.metadata), for: "a")
    #expect(memory.entry(for: "a") == CacheEntry(1, expiresAt: nil, metadata: Self.metadata))
    #expect(memory.value(for: "a") == 1)
    let newer = EntryMetadata(entityTag: #""v2""#)
    try memory.insert(CacheEntry(2, expiresAt: nil, metadata: newer), for: "a")
    #expect(memory.entry(for: "a")?.metadata == newer)
    try memory.insert(2, for: "a")
    #expect(memory.entry(for: "a")?.metadata == EntryMetadata())
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test(
    "removing, expiring, evicting and clearing drop the metadata with the entry",
    arguments: [EvictionPolicy.leastRecentlyUsed, .windowTinyLFU, .adaptive])
  func leaving(policy: EvictionPolicy) async throws {
    let memory = try layer(policy: policy, countLimit: 8)
    for index in 0..<40 {
      let expiry = index % 3 == 0 ? clock.now.advanced(by: .seconds(10)) : nil
      try memory.insert(
        CacheEntry(index, expiresAt: expiry, metadata: EntryMetadata(tags: ["t\(index)"])), for: "k\(index)")
      #expect(memory.invariantViolations.isEmpty, "after insert \(index)")
    }
    memory.removeValue(for: "k39")
    clock.advance(by: .seconds(11))
    _ = memory.removeExpired()
    #expect(memory.invariantViolations.isEmpty)
    for key in memory.store.keysInEvictionOrder.joined() {
      #expect(memory.entry(for: key)?.metadata.tags == ["t\(key.dropFirst())"])
    }
    await memory.handleMemoryPressure(.critical)
    #expect(memory.count == 0)
    #expect(memory.invariantViolations.isEmpty)
    try memory.insert(CacheEntry(1, expiresAt: nil, metadata: Self.metadata), for: "again")
    memory.removeAll()
    #expect(memory.entry(for: "again") == nil)
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test("metadata over a limit is refused with the error naming it; the previous entry stays")
  func limits() throws {
    let memory = try layer()
    try memory.insert(CacheEntry(1, expiresAt: nil, metadata: Self.metadata), for: "a")
    #expect(throws: EntryMetadataError.emptyTag) {
      try memory.insert(CacheEntry(2, expiresAt: nil, metadata: EntryMetadata(tags: [""])), for: "a")
    }
    #expect(memory.entry(for: "a") == CacheEntry(1, expiresAt: nil, metadata: Self.metadata))
  }

  @Test("a snapshot keeps metadata (format 2); one without metadata is still written as format 1")
  func snapshots() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let source = try MemoryLayer<String, Int>(configuration: .init(segmentCount: 1, clock: clock))
    try source.insert(CacheEntry(1), for: "plain")
    #expect(try await source.writeSnapshot(to: file) == 1)
    #expect(try Self.version(of: file) == 1)
    try source.insert(CacheEntry(2, expiresAt: clock.now.advanced(by: .seconds(60)), metadata: Self.metadata), for: "a")
    #expect(try await source.writeSnapshot(to: file) == 2)
    #expect(try Self.version(of: file) == 2)
    let restored = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    #expect(try await restored.restoreSnapshot(from: file)?.restored == 2)
    #expect(restored.entry(for: "a") == source.entry(for: "a"))
    #expect(restored.entry(for: "plain") == CacheEntry(1))
    #expect(restored.invariantViolations.isEmpty)
  }

  @Test("a hit below back-fills the layers above with the entry's metadata")
  func backFill() async throws {
    let top = try layer()
    let bottom = FakeLayer<String, Int>()
    bottom.seed(CacheEntry(7, expiresAt: nil, metadata: Self.metadata), for: "a")
    let chain = try CacheChain<String, Int>([top, bottom])
    #expect(try await chain.entry(for: "a")?.metadata == Self.metadata)
    #expect(top.entry(for: "a")?.metadata == Self.metadata)
  }

  /// The format version in a snapshot file's header.
  static func version(of file: URL) throws -> UInt32 {
    let bytes = [UInt8](try Data(contentsOf: file))
    try #require(bytes.count >= 12)
    return UInt32(bytes[8]) | UInt32(bytes[9]) << 8 | UInt32(bytes[10]) << 16 | UInt32(bytes[11]) << 24
  }
}
