import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

@Suite("MemoryLayer: entry metadata", .timeLimit(.minutes(3)))
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

  @Test("a revalidation changes the entry it names in place, within the layer's own time-to-live")
  func revalidate() async throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init(timeToLive: .seconds(100), clock: clock))
    let first = clock.now.advanced(by: .seconds(50))
    let held = CacheEntry(1, expiresAt: first, metadata: Self.metadata)
    try memory.insert(held, for: "k")
    let newer = EntryMetadata(entityTag: #""v2""#)
    // Another entry than the one named (another expiry, or the same expiry with other metadata:
    // another version written with the same deadline), or none: nothing changes.
    #expect(try await !memory.revalidate(CacheEntry(1), for: "k", replacing: CacheEntry(1)))
    let sameExpiryOtherVersion = CacheEntry(1, expiresAt: first, metadata: newer)
    #expect(try await !memory.revalidate(CacheEntry(1, expiresAt: nil), for: "k", replacing: sameExpiryOtherVersion))
    #expect(try await !memory.revalidate(CacheEntry(1), for: "absent", replacing: CacheEntry(1)))
    #expect(memory.entry(for: "k") == held)
    // Capped by the layer's 100 s; the value is the one the layer holds.
    let later = clock.now.advanced(by: .seconds(500))
    #expect(try await memory.revalidate(CacheEntry(99, expiresAt: later, metadata: newer), for: "k", replacing: held))
    let capped = clock.now.advanced(by: .seconds(100))
    #expect(memory.entry(for: "k") == CacheEntry(1, expiresAt: capped, metadata: newer))
    // Metadata cleared when the revalidated entry has none.
    #expect(
      try await memory.revalidate(
        CacheEntry(1, expiresAt: capped), for: "k", replacing: CacheEntry(1, expiresAt: capped, metadata: newer)))
    #expect(memory.entry(for: "k") == CacheEntry(1, expiresAt: capped))
    // An expiry that has passed already changes nothing (the caller's insert refuses it).
    #expect(
      try await !memory.revalidate(
        CacheEntry(1, expiresAt: clock.now), for: "k", replacing: CacheEntry(1, expiresAt: capped)))
    #expect(memory.invariantViolations.isEmpty)
  }

  @Test("a snapshot written before metadata existed (by 0117f2a) restores without loss")
  func restoresVersion1Snapshot() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("old.snapshot")
    try Data(hexadecimal: Self.version1Snapshot).write(to: file)
    let restored = try MemoryLayer<String, String>(configuration: .init(clock: clock))
    let result = try #require(try await restored.restoreSnapshot(from: file))
    #expect(result.restored == 2)
    #expect(restored.entry(for: "alpha") == CacheEntry("one"))
    #expect(restored.entry(for: "beta") == CacheEntry("two", expiresAt: CacheInstant(secondsSince1970: 4_102_444_800)))
  }

  /// A `MemoryLayer<String, String>` snapshot of "alpha" → "one" and "beta" → "two" (expiring
  /// 2100-01-01), written at commit 0117f2a.
  static let version1Snapshot =
    "894143534e41500a010000000000000079738db5f56cec1802000000000000006100000000000000931f840c322d814d"
    + "58ed81490614cc1c62706c6973743030a20105a302030455616c706861536f6e65137fffffffffffffffa306070854"
    + "626574615374776f1338eecfcf56a60000080b0f151922262b2f000000000000010100000000000000090000000000"
    + "0000000000000000000038"

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
