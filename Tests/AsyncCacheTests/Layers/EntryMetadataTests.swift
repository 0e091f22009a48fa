import Testing

@testable import AsyncCache

@Suite("EntryMetadata", .timeLimit(.minutes(3)))
struct EntryMetadataTests {
  static let full = EntryMetadata(
    entityTag: #""abc""#,
    lastModified: CacheInstant(secondsSince1970: 1_700_000_000),
    producedAt: CacheInstant(nanosecondsSince1970: -5),
    tags: ["b", "a", "ü", "tenant:7"],
    staleWhileRevalidateLimit: .seconds(30),
    staleIfErrorLimit: .zero)

  /// Decodes `bytes`.
  static func decode(_ bytes: [UInt8]) throws(EntryMetadataError) -> EntryMetadata {
    let result = bytes.withUnsafeBytes { bytes in
      Result { () throws(EntryMetadataError) in try EntryMetadata(decoding: bytes) }
    }
    return try result.get()
  }

  @Test("every combination of parts round-trips through the stored form")
  func roundTrips() throws {
    let parts = Self.full
    for mask in 0..<64 {
      let metadata = EntryMetadata(
        entityTag: mask & 1 != 0 ? parts.entityTag : nil,
        lastModified: mask & 2 != 0 ? parts.lastModified : nil,
        producedAt: mask & 4 != 0 ? parts.producedAt : nil,
        tags: mask & 8 != 0 ? parts.tags : [],
        staleWhileRevalidateLimit: mask & 16 != 0 ? parts.staleWhileRevalidateLimit : nil,
        staleIfErrorLimit: mask & 32 != 0 ? parts.staleIfErrorLimit : nil)
      let bytes = try metadata.encoded()
      #expect(bytes.isEmpty == (mask == 0))
      #expect(try Self.decode(bytes) == metadata)
    }
  }

  @Test("equal metadata has equal bytes, whatever order its set of tags iterates in")
  func canonicalBytes() throws {
    var reference: [UInt8]?
    var generator = SeededGenerator(seed: 38)
    for _ in 0..<20 {
      // A new set each time: its iteration order follows the per-process seed and its storage.
      var tags = Set<String>(minimumCapacity: Int.random(in: 4...64, using: &generator))
      for tag in ["zeta", "alpha", "mu", "beta"].shuffled(using: &generator) { tags.insert(tag) }
      let bytes = try EntryMetadata(tags: tags).encoded()
      if let reference { #expect(bytes == reference) } else { reference = bytes }
    }
  }

  @Test("limits are checked with errors that name what was over")
  func limits() {
    let tooMany = Set((0...EntryMetadata.maximumTagCount).map { "t\($0)" })
    #expect(throws: EntryMetadataError.tooManyTags(count: 65, limit: 64)) {
      try EntryMetadata(tags: tooMany).validate()
    }
    #expect(throws: EntryMetadataError.emptyTag) { try EntryMetadata(tags: ["ok", ""]).encoded() }
    let long = String(repeating: "x", count: 256)
    #expect(throws: EntryMetadataError.tagTooLong(tag: String(repeating: "x", count: 40), bytes: 256, limit: 255)) {
      try EntryMetadata(tags: [long]).validate()
    }
    #expect(throws: EntryMetadataError.entityTagTooLong(bytes: 4_097, limit: 4_096)) {
      try EntryMetadata(entityTag: String(repeating: "e", count: 4_097)).encoded()
    }
    #expect(throws: Never.self) {
      try EntryMetadata(
        entityTag: String(repeating: "e", count: 4_096),
        tags: Set((0..<64).map { String(repeating: "\($0 % 10)", count: 200) + "\($0)" })
      ).validate()
    }
    let description = EntryMetadataError.tooManyTags(count: 65, limit: 64).description
    #expect(description.contains("65") && description.contains("64"))
  }

  @Test("malformed stored forms are refused with the field named, never misread")
  func malformed() throws {
    let valid = try EntryMetadata(entityTag: "e", tags: ["a", "b"]).encoded()
    #expect(throws: EntryMetadataError.unknownVersion(2)) { try Self.decode([2, 0]) }
    #expect(throws: EntryMetadataError.truncated(field: "field bits")) { try Self.decode([1]) }
    #expect(throws: EntryMetadataError.unknownFields(0x40)) { try Self.decode([1, 0x41]) }
    #expect(throws: EntryMetadataError.truncated(field: "stale-while-revalidate limit")) {
      try Self.decode([1, 0x10, 0])
    }
    #expect(throws: EntryMetadataError.invalidField("stale-if-error limit")) {
      try Self.decode([1, 0x20] + [0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF])
    }
    #expect(throws: EntryMetadataError.truncated(field: "entity tag")) { try Self.decode([1, 1, 5, 0, 0x41]) }
    #expect(throws: EntryMetadataError.invalidField("entity tag")) { try Self.decode([1, 1, 1, 0, 0xFF]) }
    #expect(throws: EntryMetadataError.truncated(field: "last-modified instant")) { try Self.decode([1, 2, 0, 0]) }
    #expect(throws: EntryMetadataError.invalidField("tag count")) { try Self.decode([1, 8, 0]) }
    #expect(throws: EntryMetadataError.invalidField("tags")) { try Self.decode([1, 8, 1, 0]) }
    #expect(throws: EntryMetadataError.invalidField("tag order")) { try Self.decode([1, 8, 2, 1, 0x62, 1, 0x61]) }
    #expect(throws: EntryMetadataError.invalidField("tag order")) { try Self.decode([1, 8, 2, 1, 0x61, 1, 0x61]) }
    #expect(throws: EntryMetadataError.trailingBytes(1)) { try Self.decode(valid + [0]) }
    #expect(try Self.decode([]) == EntryMetadata())
    // Every truncation of a valid form is refused.
    for end in 1..<valid.count {
      #expect(throws: EntryMetadataError.self) { try Self.decode(Array(valid[..<end])) }
    }
  }

  @Test("arbitrary bytes decode or throw, and what decodes re-encodes to the same bytes")
  func arbitraryBytes() throws {
    var generator = SeededGenerator(seed: 0x38)
    let seeds = try [EntryMetadata(tags: ["a"]).encoded(), Self.full.encoded()]
    for round in 0..<20_000 {
      var bytes = seeds[round % 2]
      for _ in 0..<Int.random(in: 1...3, using: &generator) {
        let index = Int.random(in: 0..<bytes.count, using: &generator)
        switch Int.random(in: 0..<3, using: &generator) {
        case 0: bytes[index] = UInt8.random(in: 0...255, using: &generator)
        case 1: bytes.remove(at: index)
        default: bytes.insert(UInt8.random(in: 0...255, using: &generator), at: index)
        }
        if bytes.isEmpty { break }
      }
      if let decoded = try? Self.decode(bytes) {
        #expect(try decoded.encoded() == bytes)
      }
    }
  }

  @Test("an entry made without metadata has none, and copies keep it")
  func entries() {
    let plain = CacheEntry(1)
    #expect(plain.metadata.isEmpty)
    #expect(!plain.metadata.hasValidators)
    let entry = CacheEntry(1, expiresAt: CacheInstant(secondsSince1970: 10), metadata: Self.full)
    #expect(entry.expiring(noLaterThan: CacheInstant(secondsSince1970: 5)).metadata == Self.full)
    #expect(entry.metadata.hasValidators)
    #expect(entry != CacheEntry(1, expiresAt: CacheInstant(secondsSince1970: 10)))
    #expect("\(Self.full)".contains("tenant:7"))
  }
}
