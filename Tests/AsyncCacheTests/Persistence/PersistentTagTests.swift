import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

func tagged<Value>(_ value: Value, _ tags: Set<String>, producedAt seconds: Int64) -> CacheEntry<Value> {
  CacheEntry(
    value, expiresAt: nil, metadata: EntryMetadata(producedAt: CacheInstant(secondsSince1970: seconds), tags: tags))
}

@Suite("TagInvalidationRecord: the stored form of tag invalidations")
struct TagInvalidationRecordTests {
  @Test("invalidations round-trip, canonically")
  func roundTrip() throws {
    let invalidations = [
      "tenant:7": CacheInstant(nanosecondsSince1970: 1_800_000_000_123_456_789),
      "prix-été": CacheInstant(secondsSince1970: -5), String(repeating: "x", count: 255): .distantFuture,
    ]
    let bytes = TagInvalidationRecord.encode(invalidations)
    #expect(try TagInvalidationRecord.decode(bytes) == invalidations)
    #expect(TagInvalidationRecord.encode(try TagInvalidationRecord.decode(bytes)) == bytes)
    #expect(try TagInvalidationRecord.decode(TagInvalidationRecord.encode([:])) == [:])
  }

  @Test("every mutation of a record decodes to the same or throws; nothing crashes")
  func mutations() throws {
    let bytes = TagInvalidationRecord.encode([
      "a": CacheInstant(secondsSince1970: 1), "bc": CacheInstant(secondsSince1970: 2),
    ])
    var random = SeededGenerator(seed: 38)
    for _ in 0..<5_000 {
      var mutated = bytes
      switch random.next() % 3 {
      case 0: mutated[Int(random.next() % UInt64(mutated.count))] ^= UInt8(truncatingIfNeeded: random.next() | 1)
      case 1: mutated.removeLast(Int(random.next() % UInt64(mutated.count)) + 1)
      default: mutated.append(UInt8(truncatingIfNeeded: random.next()))
      }
      #expect(throws: TagInvalidationRecord.Damage.self) { try TagInvalidationRecord.decode(mutated) }
    }
  }
}

@Suite("DiskLayer: tag invalidation", .timeLimit(.minutes(3)))
struct DiskLayerTagTests {
  @Test("an invalidated tag kills the entries filed under it, and stays recorded across a reopen")
  func survivesRestart() async throws {
    let fixture = try DiskFixture()
    defer { fixture.parent.remove() }
    let layer = try await fixture.open()
    try await layer.insert(tagged(Data([1]), ["t"], producedAt: 100), for: "old")
    try await layer.insert(tagged(Data([2]), ["u"], producedAt: 100), for: "other")
    try await layer.insert(tagged(Data([3]), ["t"], producedAt: 300), for: "later")
    try await layer.invalidate(tag: "t", at: CacheInstant(secondsSince1970: 200))
    #expect(fixture.names.contains(DiskLayer<String, Data>.tagFileName))
    #expect(fixture.temporaryNames.isEmpty)

    let reopened = try await fixture.open()
    #expect(try await reopened.entry(for: "old") == nil)
    #expect(await reopened.statistics.evictions[.invalidated] == 1, "its file was deleted when read")
    #expect(await reopened.count == 2)
    #expect(try await reopened.value(for: "other") == Data([2]))
    #expect(try await reopened.value(for: "later") == Data([3]))
    // removeAll empties the entries; the invalidations stay.
    try await reopened.removeAll()
    #expect(fixture.names == [DiskLayer<String, Data>.tagFileName])
    try await reopened.insert(tagged(Data([4]), ["t"], producedAt: 150), for: "old")
    #expect(try await reopened.entry(for: "old") == nil)
  }

  @Test("a damaged invalidations file removes every entry, since any may have been invalidated")
  func damagedFile() async throws {
    let fixture = try DiskFixture()
    defer { fixture.parent.remove() }
    let logs = RecordingLogHandler()
    let layer = try await fixture.open()
    try await layer.insert(tagged(Data([1]), ["t"], producedAt: 100), for: "a")
    try await layer.insert(CacheEntry(Data([2]), expiresAt: nil), for: "b")
    try await layer.invalidate(tag: "t", at: CacheInstant(secondsSince1970: 200))
    let file = fixture.directory.appendingPathComponent(DiskLayer<String, Data>.tagFileName)
    var bytes = try Data(contentsOf: file)
    bytes[6] ^= 0xFF
    try bytes.write(to: file)

    let reopened = try await fixture.open(.init(logger: logs.logger()))
    #expect(await reopened.count == 0)
    #expect(await reopened.statistics.damagedEntries == 1)
    #expect(logs.records.contains { $0.level == .error && $0.message.contains("tag invalidations file is damaged") })
    #expect(!fixture.names.contains(DiskLayer<String, Data>.tagFileName))
  }

  @Test("a temporary file of an interrupted rewrite is swept at opening")
  func sweepsTemporaryFiles() async throws {
    let fixture = try DiskFixture()
    defer { fixture.parent.remove() }
    _ = try await fixture.open()
    let leftover = fixture.directory.appendingPathComponent(
      DiskLayer<String, Data>.tagFileName + ".tmp-0123456789abcdef")
    try Data([1, 2, 3]).write(to: leftover)
    _ = try await fixture.open()
    #expect(fixture.temporaryNames.isEmpty)
  }
}

extension UserDefaultsLayerTests {
  @Test("tags: an invalidation reaches every layer of the suite and namespace, and the next process")
  func tagInvalidation() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let first = try UserDefaultsLayer<String, String>(suiteName: suite.name, valueCoder: .utf8)
    let second = try UserDefaultsLayer<String, String>(suiteName: suite.name, valueCoder: .utf8)
    let elsewhere = try UserDefaultsLayer<String, String>(
      suiteName: suite.name, configuration: .init(namespace: "elsewhere"), valueCoder: .utf8)
    try await first.insert(tagged("old", ["t"], producedAt: 100), for: "old")
    try await first.insert(tagged("later", ["t"], producedAt: 300), for: "later")
    try await elsewhere.insert(tagged("kept", ["t"], producedAt: 100), for: "old")
    try await first.invalidate(tag: "t", at: CacheInstant(secondsSince1970: 200))
    #expect(try await second.entry(for: "old") == nil, "another layer of the namespace sees it")
    #expect(await second.statistics.invalidated == 1)
    #expect(try await first.value(for: "later") == "later")
    #expect(try await elsewhere.value(for: "old") == "kept", "another namespace does not")
    try await first.insert(tagged("again", ["t"], producedAt: 150), for: "old")
    let reopened = try UserDefaultsLayer<String, String>(suiteName: suite.name, valueCoder: .utf8)
    #expect(try await reopened.entry(for: "old") == nil)
    try await first.removeAll()
    #expect(suite.defaults.data(forKey: "asynccache-tags.default") != nil, "removeAll leaves the invalidations")
  }

  @Test("tags: a damaged record removes the namespace's entries")
  func damagedTagRecord() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let layer = try UserDefaultsLayer<String, String>(suiteName: suite.name, valueCoder: .utf8)
    try await layer.insert(tagged("a", ["t"], producedAt: 100), for: "a")
    try await layer.insert(CacheEntry("b", expiresAt: nil), for: "b")
    suite.defaults.set(Data("not a record".utf8), forKey: "asynccache-tags.default")
    #expect(try await layer.entry(for: "a") == nil)
    #expect(try await layer.entry(for: "b") == nil)
    #expect(await layer.statistics.damagedEntries == 1)
  }
}
