import AsyncCache
import AsyncCacheSQLite
import Foundation
import PersistenceTestSupport
import Testing

@Suite("SQLiteLayer: entry metadata", .timeLimit(.minutes(3)))
struct SQLiteLayerMetadataTests {
  static let metadata = EntryMetadata(
    entityTag: #"W/"v42""#,
    lastModified: CacheInstant(secondsSince1970: 1_700_000_000),
    producedAt: CacheInstant(nanosecondsSince1970: 1_800_000_000_123_456_789),
    tags: ["tenant:7", "catalogue", "prix-été"])

  @Test("metadata is read back from the pending write, after a flush, and across a reopen")
  func roundTrip() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let expiry = CacheInstant(secondsSince1970: 4_102_444_800)
    do {
      let layer = try await SQLiteLayer<String, String>(url: url)
      try await layer.insert(CacheEntry("page", expiresAt: expiry, metadata: Self.metadata), for: "a")
      try await layer.insert(CacheEntry("plain"), for: "b")
      #expect(try await layer.entry(for: "a")?.metadata == Self.metadata)
      try await layer.flush()
      let read = try #require(try await layer.entry(for: "a"))
      #expect(read.value == "page")
      #expect(read.expiresAt == expiry)
      #expect(read.metadata == Self.metadata)
      #expect(try await layer.entry(for: "b")?.metadata.isEmpty == true)
      try await layer.close()
    }
    let reopened = try await SQLiteLayer<String, String>(url: url)
    #expect(try await reopened.entry(for: "a")?.metadata == Self.metadata)
    #expect(try await reopened.entry(for: "b")?.metadata == EntryMetadata())
    try await reopened.close()
  }

  @Test("a row without metadata is written in record format 1, a row with metadata in format 2")
  func recordVersions() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let layer = try await SQLiteLayer<String, String>(url: url)
    try await layer.insert(CacheEntry("plain"), for: "plain")
    try await layer.insert(CacheEntry("tagged", expiresAt: nil, metadata: EntryMetadata(tags: ["t"])), for: "tagged")
    try await layer.close()
    let raw = try RawDatabase(url)
    let plain = try #require(try raw.blob(key: "plain"))
    let tagged = try #require(try raw.blob(key: "tagged"))
    try #require(plain.count > 8 && tagged.count > 8)
    // Version byte, then the reserved byte and the metadata length.
    #expect(Array(plain[4..<8]) == [1, 0, 0, 0])
    #expect(tagged[4] == 2)
    #expect(tagged[6] > 0)
  }

  @Test("a database written before metadata existed is read without loss, and written to again")
  func readsVersion3Database() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let fixture = try #require(Bundle.module.url(forResource: "Fixtures/entries-v3", withExtension: "sqlite"))
    let url = folder.appending("cache.sqlite")
    try FileManager.default.copyItem(at: fixture, to: url)
    let layer = try await SQLiteLayer<String, String>(url: url)
    let alpha = try #require(try await layer.entry(for: "alpha"))
    #expect(alpha.value == "one")
    #expect(alpha.expiresAt == nil)
    #expect(alpha.metadata.isEmpty)
    let beta = try #require(try await layer.entry(for: "beta"))
    #expect(beta.value == "two")
    #expect(beta.expiresAt == CacheInstant(secondsSince1970: 4_102_444_800))
    #expect(beta.metadata.isEmpty)
    #expect(await layer.statistics.damagedEntries == 0)
    try await layer.insert(CacheEntry("three", expiresAt: nil, metadata: Self.metadata), for: "gamma")
    try await layer.close()
    let reopened = try await SQLiteLayer<String, String>(url: url)
    #expect(try await reopened.value(for: "alpha") == "one")
    #expect(try await reopened.entry(for: "gamma")?.metadata == Self.metadata)
    try await reopened.close()
  }

  @Test("metadata over a limit is refused with a typed error naming the key and the limit; nothing is written")
  func refusesMetadataOverLimits() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let layer = try await SQLiteLayer<String, String>(url: folder.appending("cache.sqlite"))
    let tooMany = EntryMetadata(tags: Set((0...EntryMetadata.maximumTagCount).map { "tag\($0)" }))
    let error = await #expect(throws: PersistenceError.self) {
      try await layer.insert(CacheEntry("v", expiresAt: nil, metadata: tooMany), for: "crowded")
    }
    #expect(error?.code == .encodingFailed)
    #expect(error?.message.contains("crowded") == true)
    #expect(
      error?.underlying as? EntryMetadataError
        == .tooManyTags(count: EntryMetadata.maximumTagCount + 1, limit: EntryMetadata.maximumTagCount))
    await #expect(throws: PersistenceError.self) {
      try await layer.insert(CacheEntry("v", expiresAt: nil, metadata: EntryMetadata(tags: [""])), for: "empty")
    }
    #expect(try await layer.value(for: "crowded") == nil)
    #expect(try await layer.value(for: "empty") == nil)
    try await layer.close()
  }

  @Test("a row whose metadata does not decode (checksum intact) is a miss, counted as damaged and deleted")
  func undecodableMetadataIsDamage() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    do {
      let layer = try await SQLiteLayer<String, String>(url: url)
      try await layer.insert(CacheEntry("v", expiresAt: nil, metadata: EntryMetadata(tags: ["t"])), for: "k")
      try await layer.close()
    }
    // Rewrite the row with a metadata format version from the future, checksum recomputed.
    let raw = try RawDatabase(url)
    var blob = try #require(try raw.blob(key: "k"))
    try #require(blob.count > 24)
    blob[24] = 99
    try raw.setBlob(Self.rechecksummed(blob, key: "k"), key: "k")
    let layer = try await SQLiteLayer<String, String>(url: url)
    #expect(try await layer.entry(for: "k") == nil)
    #expect(await layer.statistics.damagedEntries == 1)
    try await layer.flush()
    #expect(try raw.rowCount() == 0)
    try await layer.close()
  }

  @Test("a format-1 row with a metadata length is damage, reported as an inconsistent header")
  func inconsistentHeader() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    do {
      let layer = try await SQLiteLayer<String, String>(url: url)
      try await layer.insert(CacheEntry("v"), for: "k")
      try await layer.close()
    }
    let raw = try RawDatabase(url)
    var blob = try #require(try raw.blob(key: "k"))
    try #require(blob.count > 24)
    blob[6] = 1
    try raw.setBlob(blob, key: "k")
    let layer = try await SQLiteLayer<String, String>(url: url)
    #expect(try await layer.entry(for: "k") == nil)
    #expect(await layer.statistics.damagedEntries == 1)
    let reasons = await layer.recentEvents.compactMap { event -> String? in
      guard case .rowDiscarded("k", let reason) = event else { return nil }
      return reason
    }
    #expect(reasons == ["inconsistentHeader"])
    try await layer.close()
  }

  /// `blob` (a format-2 row of a key that never expires) with its checksum recomputed.
  static func rechecksummed(_ blob: Data, key: String) -> Data {
    var blob = blob
    let metadataLength = Int(blob[6]) | Int(blob[7]) << 8
    let bytes = [UInt8](blob)
    let keyDigest = XXH64.hash(Array(key.utf8), seed: UInt64(bitPattern: Int64.min))
    let metadataDigest = XXH64.hash(Array(bytes[24..<24 + metadataLength]), seed: keyDigest)
    let digest = XXH64.hash(Array(bytes[(24 + metadataLength)...]), seed: metadataDigest)
    withUnsafeBytes(of: digest.littleEndian) { blob.replaceSubrange(16..<24, with: $0) }
    return blob
  }
}
