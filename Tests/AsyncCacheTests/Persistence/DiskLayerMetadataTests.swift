import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

@Suite("DiskLayer: entry metadata", .timeLimit(.minutes(3)))
struct DiskLayerMetadataTests {
  static let metadata = EntryMetadata(
    entityTag: #""v42""#,
    lastModified: CacheInstant(secondsSince1970: 1_700_000_000),
    producedAt: CacheInstant(nanosecondsSince1970: 1_800_000_000_123_456_789),
    tags: ["tenant:7", "catalogue", "prix-été"])

  /// The two files a `DiskLayer<String, String>` wrote at commit 0117f2a, before metadata
  /// existed: "alpha" → "one" (never expires), "beta" → "two" (expires 2100-01-01), by name.
  static let version1Files = [
    "8ed3f6ad685b959ead7022518e1af76cd816f8e8ec7ccdda1ed4018e8f2223f8":
      "4143444b010000000500000000000000ffffffffffffff7f05000000000000007030fefc61e250a0616c706861226f6e6522",
    "f44e64e75f3948e9f73f8dfa94721c4ce8cbb4f265c4790c702b2d41cfbf2753":
      "4143444b0100000004000000000000000000a656cfcfee380500000000000000daa69e2786dca4df626574612274776f22",
  ]

  @Test("metadata is read back at once and across a reopen; an entry without it has none")
  func roundTrip() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let expiry = CacheInstant(secondsSince1970: 4_102_444_800)
    do {
      let layer = try await DiskLayer<String, String>(directory: fixture.directory)
      try await layer.insert(CacheEntry("page", expiresAt: expiry, metadata: Self.metadata), for: "a")
      try await layer.insert(CacheEntry("plain"), for: "b")
      let read = try #require(try await layer.entry(for: "a"))
      #expect(read.value == "page" && read.expiresAt == expiry && read.metadata == Self.metadata)
      try await layer.close()
    }
    let reopened = try await DiskLayer<String, String>(directory: fixture.directory)
    #expect(try await reopened.entry(for: "a")?.metadata == Self.metadata)
    #expect(try await reopened.entry(for: "b")?.metadata == EntryMetadata())
    // Version 1 without metadata (byte for byte what earlier versions wrote), 2 with.
    let plain = try Data(contentsOf: fixture.file(for: "b"))
    let tagged = try Data(contentsOf: fixture.file(for: "a"))
    try #require(plain.count > 16 && tagged.count > 16)
    #expect(Array(plain[4..<6]) == [1, 0] && Array(plain[12..<16]) == [0, 0, 0, 0])
    #expect(Array(tagged[4..<6]) == [2, 0] && tagged[12] > 0)
    #expect(await reopened.statistics.totalBytes == fixture.bytesOnDisk)
  }

  @Test("files written before metadata existed are read without loss, and sit beside new ones")
  func readsVersion1Files() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    try FileManager.default.createDirectory(at: fixture.directory, withIntermediateDirectories: true)
    for (name, hex) in Self.version1Files {
      try Data(hexadecimal: hex).write(to: fixture.directory.appendingPathComponent(name))
    }
    let layer = try await DiskLayer<String, String>(directory: fixture.directory)
    let alpha = try #require(try await layer.entry(for: "alpha"))
    #expect(alpha.value == "one" && alpha.expiresAt == nil && alpha.metadata.isEmpty)
    let beta = try #require(try await layer.entry(for: "beta"))
    #expect(beta.value == "two" && beta.expiresAt == CacheInstant(secondsSince1970: 4_102_444_800))
    #expect(beta.metadata.isEmpty)
    try await layer.insert(CacheEntry("three", expiresAt: nil, metadata: Self.metadata), for: "gamma")
    let statistics = await layer.statistics
    #expect(statistics.damagedEntries == 0 && statistics.count == 3)
    #expect(Set(await layer.keys) == ["alpha", "beta", "gamma"])
  }

  @Test("metadata over a limit is refused with a typed error naming the key; the previous entry stays")
  func refusesMetadataOverLimits() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await DiskLayer<String, String>(directory: fixture.directory)
    try await layer.insert(CacheEntry("before"), for: "k")
    let error = await #expect(throws: PersistenceError.self) {
      try await layer.insert(
        CacheEntry("after", expiresAt: nil, metadata: EntryMetadata(entityTag: String(repeating: "e", count: 5_000))),
        for: "k")
    }
    #expect(error?.code == .encodingFailed)
    #expect(error?.message.contains("\"k\"") == true)
    #expect(error?.underlying as? EntryMetadataError == .entityTagTooLong(bytes: 5_000, limit: 4_096))
    #expect(try await layer.value(for: "k") == "before")
  }

  @Test("a file whose metadata does not decode (checksum intact) is a miss, deleted and counted")
  func undecodableMetadataIsDamage() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    do {
      let layer = try await DiskLayer<String, String>(directory: fixture.directory)
      try await layer.insert(CacheEntry("v", expiresAt: nil, metadata: EntryMetadata(tags: ["t"])), for: "k")
      try await layer.insert(CacheEntry("w"), for: "other")
      try await layer.close()
    }
    var file = try Data(contentsOf: fixture.file(for: "k"))
    try #require(file.count > 42)
    // The metadata's format version (right after the key, "k"), from the future.
    file[41] = 99
    Self.resum(&file)
    try file.write(to: fixture.file(for: "k"))
    let layer = try await DiskLayer<String, String>(directory: fixture.directory)
    #expect(try await layer.entry(for: "k") == nil)
    #expect(await layer.statistics.damagedEntries == 1)
    #expect(!FileManager.default.fileExists(atPath: fixture.file(for: "k").path))
    #expect(try await layer.value(for: "other") == "w")
  }

  @Test("a header whose version and metadata length disagree is damage")
  func inconsistentHeaders() throws {
    let key = Array("k".utf8)
    let metadata = try EntryMetadata(tags: ["t"]).encoded()
    let payload: [UInt8] = [1, 2]
    var header = key.withUnsafeBytes { key in
      metadata.withUnsafeBytes { metadata in
        payload.withUnsafeBytes { DiskEntryFormat.header(key: key, metadata: metadata, payload: $0, expiresAt: 5) }
      }
    }
    func parse(_ bytes: [UInt8]) -> DiskEntryFormat.Damage? {
      bytes.withUnsafeBytes { bytes in
        do throws(DiskEntryFormat.Damage) {
          _ = try DiskEntryFormat.parseHeader(bytes)
          return nil
        } catch { return error }
      }
    }
    #expect(parse(header) == nil)
    header[4] = 1  // Version 1 with a metadata length.
    #expect(parse(header) == .unknownFields)
    header[4] = 2
    header.replaceSubrange(12..<16, with: [0, 0, 0, 0])  // Version 2 without one.
    #expect(parse(header) == .unknownFields)
    header.replaceSubrange(12..<16, with: [0, 0, 1, 0])  // Past the longest metadata.
    #expect(parse(header) == .unknownFields)
  }

  /// Recomputes a file's checksum after a change.
  static func resum(_ file: inout Data) {
    let bytes = [UInt8](file)
    let keyEnd = 40 + (Int(bytes[8]) | Int(bytes[9]) << 8)
    let metadataEnd = keyEnd + (Int(bytes[12]) | Int(bytes[13]) << 8)
    let sum = bytes.withUnsafeBytes { raw in
      DiskEntryFormat.checksum(
        fields: UnsafeRawBufferPointer(rebasing: raw[..<DiskEntryFormat.checksumOffset]),
        key: UnsafeRawBufferPointer(rebasing: raw[40..<keyEnd]),
        metadata: UnsafeRawBufferPointer(rebasing: raw[keyEnd..<metadataEnd]),
        payload: UnsafeRawBufferPointer(rebasing: raw[metadataEnd...]))
    }
    withUnsafeBytes(of: sum.littleEndian) { file.replaceSubrange(32..<40, with: $0) }
  }
}
