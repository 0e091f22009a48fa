/// What an origin knows about a value besides the value itself: the validators it gave it, the
/// tags it files it under, and when it produced it.
///
/// An entry carries its metadata through every layer it is copied to, back-fills included, and
/// the persistent layers store it with the value: a ``CacheEntry`` read back from SQLite or from
/// files has the metadata it was written with. An entry without metadata (``isEmpty``) costs
/// nothing to store or to hit, and reads back exactly as before metadata existed.
///
/// ```swift
/// let entry = CacheEntry(
///   Data("page".utf8),
///   expiresAt: WallClock().now.advanced(by: .seconds(300)),
///   metadata: EntryMetadata(entityTag: #""v42""#, tags: ["tenant:7", "catalogue"]))
/// ```
///
/// Limits, checked when a layer stores the entry (``validate()``): at most
/// ``maximumTagCount`` tags of 1 to ``maximumTagLength`` bytes of UTF-8 each, and an entity
/// tag of at most ``maximumEntityTagLength`` bytes.
public struct EntryMetadata: Hashable, Sendable, CustomStringConvertible {
  /// The origin's opaque validator for this version of the value: an HTTP entity tag as the
  /// server sent it (quotes and any `W/` prefix included), or any string that changes when the
  /// value does. `nil` when the origin gave none.
  public var entityTag: String?

  /// When the origin says the value last changed (HTTP `Last-Modified`); `nil` when it did not
  /// say.
  public var lastModified: CacheInstant?

  /// When the origin produced this value, as whoever made the entry says (an origin's
  /// ``EntryFetcher``, a write with metadata); `nil` when unknown, as for an entry written
  /// before metadata existed.
  public var producedAt: CacheInstant?

  /// The tags the entry is filed under: names a group of entries can be invalidated by,
  /// such as a tenant or a catalogue.
  public var tags: Set<String>

  /// The longest the entry may be served stale while it is refreshed, once it turned stale:
  /// the cache's ``LoadingCache/Configuration-swift.struct/staleWhileRevalidate`` narrowed to
  /// this, never widened. `.zero` for not at all (HTTP's `must-revalidate` and `no-cache`);
  /// `nil`, the default, for the cache's rule alone. See <doc:FreshnessAndStatistics#Revalidation>.
  public var staleWhileRevalidateLimit: Duration?

  /// The longest the entry may be served stale when a load fails, once it turned stale: the
  /// cache's ``LoadingCache/Configuration-swift.struct/staleIfError`` narrowed to this, never
  /// widened. `.zero` for not at all; `nil`, the default, for the cache's rule alone.
  public var staleIfErrorLimit: Duration?

  /// The most tags an entry may carry.
  public static let maximumTagCount = 64
  /// The longest tag, in bytes of UTF-8.
  public static let maximumTagLength = 255
  /// The longest entity tag, in bytes of UTF-8.
  public static let maximumEntityTagLength = 4_096

  /// Metadata; every part defaults to none.
  public init(
    entityTag: String? = nil,
    lastModified: CacheInstant? = nil,
    producedAt: CacheInstant? = nil,
    tags: Set<String> = [],
    staleWhileRevalidateLimit: Duration? = nil,
    staleIfErrorLimit: Duration? = nil
  ) {
    self.entityTag = entityTag
    self.lastModified = lastModified
    self.producedAt = producedAt
    self.tags = tags
    self.staleWhileRevalidateLimit = staleWhileRevalidateLimit
    self.staleIfErrorLimit = staleIfErrorLimit
  }

  /// Whether there is no metadata at all: no validator, no tag, no production time, no limit.
  @inlinable
  public var isEmpty: Bool {
    entityTag == nil && lastModified == nil && producedAt == nil && tags.isEmpty && staleWhileRevalidateLimit == nil
      && staleIfErrorLimit == nil
  }

  /// Whether the entry may not be served stale at all (both limits zero) and has validators to
  /// be revalidated with. An origin's value with such metadata and a lifetime of zero (HTTP's
  /// `no-cache`) is kept for the cache's grace only to be revalidated: never served without
  /// asking the origin first. With a lifetime, it is served while fresh, as any entry.
  @inlinable
  public var isRevalidatedOnly: Bool {
    staleWhileRevalidateLimit == .zero && staleIfErrorLimit == .zero && hasValidators
  }

  /// Whether an origin can tell from this metadata that the value did not change (an entity
  /// tag or a last-modified instant).
  @inlinable
  public var hasValidators: Bool {
    entityTag != nil || lastModified != nil
  }

  /// Throws unless every part is within the limits (``maximumTagCount``, ``maximumTagLength``,
  /// ``maximumEntityTagLength``) and no tag is empty.
  public func validate() throws(EntryMetadataError) {
    if let entityTag, entityTag.utf8.count > Self.maximumEntityTagLength {
      throw .entityTagTooLong(bytes: entityTag.utf8.count, limit: Self.maximumEntityTagLength)
    }
    guard tags.count <= Self.maximumTagCount else {
      throw .tooManyTags(count: tags.count, limit: Self.maximumTagCount)
    }
    for tag in tags { try Self.validate(tag: tag) }
    if let limit = staleWhileRevalidateLimit, limit < .zero { throw .negativeLimit("stale-while-revalidate limit") }
    if let limit = staleIfErrorLimit, limit < .zero { throw .negativeLimit("stale-if-error limit") }
  }

  /// Throws unless `tag` could be one of an entry's tags: 1 to ``maximumTagLength`` bytes.
  package static func validate(tag: String) throws(EntryMetadataError) {
    guard !tag.isEmpty else { throw .emptyTag }
    guard tag.utf8.count <= maximumTagLength else {
      throw .tagTooLong(tag: String(tag.prefix(40)), bytes: tag.utf8.count, limit: maximumTagLength)
    }
  }

  public var description: String {
    var parts: [String] = []
    if let entityTag { parts.append("entityTag: \(entityTag.debugDescription)") }
    if let lastModified { parts.append("lastModified: \(lastModified)") }
    if let producedAt { parts.append("producedAt: \(producedAt)") }
    if !tags.isEmpty { parts.append("tags: \(tags.sorted())") }
    if let staleWhileRevalidateLimit { parts.append("staleWhileRevalidateLimit: \(staleWhileRevalidateLimit)") }
    if let staleIfErrorLimit { parts.append("staleIfErrorLimit: \(staleIfErrorLimit)") }
    return "EntryMetadata(\(parts.joined(separator: ", ")))"
  }
}

/// Why an entry's metadata was refused, or why stored metadata could not be read back.
public enum EntryMetadataError: Error, Equatable, Sendable, CustomStringConvertible {
  /// More tags than ``EntryMetadata/maximumTagCount``.
  case tooManyTags(count: Int, limit: Int)
  /// A tag longer than ``EntryMetadata/maximumTagLength`` bytes (`tag` is its first 40
  /// characters).
  case tagTooLong(tag: String, bytes: Int, limit: Int)
  /// An empty string among the tags.
  case emptyTag
  /// An entity tag longer than ``EntryMetadata/maximumEntityTagLength`` bytes.
  case entityTagTooLong(bytes: Int, limit: Int)
  /// Stored metadata ends before the field named.
  case truncated(field: String)
  /// Stored metadata of a format version this library does not know (written by a newer one).
  case unknownVersion(UInt8)
  /// Stored metadata with fields this library does not know (the bits named).
  case unknownFields(UInt8)
  /// Stored metadata whose field named is not valid UTF-8, or out of its limits.
  case invalidField(String)
  /// Stored metadata followed by bytes that belong to no field.
  case trailingBytes(Int)
  /// A limit of stale serving (the field named) below zero.
  case negativeLimit(String)

  public var description: String {
    switch self {
    case .tooManyTags(let count, let limit):
      "an entry carries \(count) tags, more than the \(limit) allowed"
    case .tagTooLong(let tag, let bytes, let limit):
      "the tag \(tag.debugDescription)… is \(bytes) bytes of UTF-8, longer than the \(limit) allowed"
    case .emptyTag:
      "an entry's tags include the empty string"
    case .entityTagTooLong(let bytes, let limit):
      "the entity tag is \(bytes) bytes of UTF-8, longer than the \(limit) allowed"
    case .truncated(let field):
      "the stored metadata ends inside its \(field)"
    case .unknownVersion(let version):
      "the stored metadata has format version \(version), which this library does not read"
    case .unknownFields(let bits):
      "the stored metadata has fields this library does not know (bits 0x\(String(bits, radix: 16)))"
    case .invalidField(let field):
      "the stored metadata's \(field) is not valid"
    case .trailingBytes(let count):
      "the stored metadata is followed by \(count) bytes that belong to no field"
    case .negativeLimit(let field):
      "the \(field) is below zero"
    }
  }
}

// MARK: - Stored form

/// The bytes persistent layers store for an entry's metadata (none at all for empty metadata).
///
/// ```
/// size   field
///    1   format version (1)
///    1   fields present: 0x01 entity tag, 0x02 last-modified, 0x04 produced-at, 0x08 tags,
///        0x10 stale-while-revalidate limit, 0x20 stale-if-error limit (any other bit is
///        refused)
///        then, in this order, each field present:
///  2+n   entity tag: length (little-endian), then its UTF-8
///    8   last-modified: nanoseconds since 1970, little-endian
///    8   produced-at: nanoseconds since 1970, little-endian
/// 1+...  tags: count (1 to 64), then each as its length (1 to 255) and its UTF-8, in
///        ascending order of their bytes (so that the same strings give the same bytes,
///        whatever order the set iterates in; two spellings Swift's `==` takes as equal, as
///        canonically equivalent Unicode is, stay two)
///    8   stale-while-revalidate limit: nanoseconds (0 or more), little-endian
///    8   stale-if-error limit: nanoseconds (0 or more), little-endian
/// ```
///
/// The layers' own checksums cover these bytes; this format only needs to be unambiguous and
/// to refuse what it does not know.
extension EntryMetadata {
  static let formatVersion: UInt8 = 1
  private static let entityTagBit: UInt8 = 0x01
  private static let lastModifiedBit: UInt8 = 0x02
  private static let producedAtBit: UInt8 = 0x04
  private static let tagsBit: UInt8 = 0x08
  private static let staleWhileRevalidateBit: UInt8 = 0x10
  private static let staleIfErrorBit: UInt8 = 0x20
  private static let knownBits: UInt8 = 0x3F

  /// The stored form: empty for empty metadata. Validates first (``validate()``).
  package func encoded() throws(EntryMetadataError) -> [UInt8] {
    guard !isEmpty else { return [] }
    try validate()
    var fields: UInt8 = 0
    var body: [UInt8] = []
    if let entityTag {
      fields |= Self.entityTagBit
      let length = UInt16(entityTag.utf8.count)
      body.append(UInt8(truncatingIfNeeded: length))
      body.append(UInt8(truncatingIfNeeded: length >> 8))
      body.append(contentsOf: entityTag.utf8)
    }
    if let lastModified {
      fields |= Self.lastModifiedBit
      Self.append(lastModified.nanosecondsSince1970, to: &body)
    }
    if let producedAt {
      fields |= Self.producedAtBit
      Self.append(producedAt.nanosecondsSince1970, to: &body)
    }
    if !tags.isEmpty {
      fields |= Self.tagsBit
      let sorted = tags.map { Array($0.utf8) }.sorted { $0.lexicographicallyPrecedes($1) }
      body.append(UInt8(sorted.count))
      for tag in sorted {
        body.append(UInt8(tag.count))
        body.append(contentsOf: tag)
      }
    }
    if let staleWhileRevalidateLimit {
      fields |= Self.staleWhileRevalidateBit
      Self.append(staleWhileRevalidateLimit.saturatingNanoseconds, to: &body)
    }
    if let staleIfErrorLimit {
      fields |= Self.staleIfErrorBit
      Self.append(staleIfErrorLimit.saturatingNanoseconds, to: &body)
    }
    return [Self.formatVersion, fields] + body
  }

  /// Reads the stored form; empty bytes are empty metadata.
  package init(decoding bytes: UnsafeRawBufferPointer) throws(EntryMetadataError) {
    self.init()
    guard !bytes.isEmpty else { return }
    var reader = Reader(bytes: bytes)
    let version = try reader.byte("format version")
    guard version == Self.formatVersion else { throw .unknownVersion(version) }
    let fields = try reader.byte("field bits")
    guard fields & ~Self.knownBits == 0 else { throw .unknownFields(fields & ~Self.knownBits) }
    if fields & Self.entityTagBit != 0 {
      let low = try reader.byte("entity tag")
      let high = try reader.byte("entity tag")
      let length = Int(low) | Int(high) << 8
      guard length <= Self.maximumEntityTagLength else { throw .invalidField("entity tag") }
      entityTag = try reader.string(length, "entity tag")
    }
    if fields & Self.lastModifiedBit != 0 {
      lastModified = CacheInstant(nanosecondsSince1970: try reader.int64("last-modified instant"))
    }
    if fields & Self.producedAtBit != 0 {
      producedAt = CacheInstant(nanosecondsSince1970: try reader.int64("produced-at instant"))
    }
    if fields & Self.tagsBit != 0 {
      let count = Int(try reader.byte("tags"))
      guard (1...Self.maximumTagCount).contains(count) else { throw .invalidField("tag count") }
      var previous: UnsafeRawBufferPointer?
      for _ in 0..<count {
        let length = Int(try reader.byte("tags"))
        guard length > 0 else { throw .invalidField("tags") }
        let raw = try reader.bytes(length, "tags")
        // Strictly ascending: the one order the encoder writes, so no tag appears twice.
        if let previous, !previous.lexicographicallyPrecedes(raw) { throw .invalidField("tag order") }
        previous = raw
        guard let tag = Self.string(validating: raw) else { throw .invalidField("tags") }
        guard tags.insert(tag).inserted else { throw .invalidField("tags") }
      }
    }
    if fields & Self.staleWhileRevalidateBit != 0 {
      staleWhileRevalidateLimit = try reader.limit("stale-while-revalidate limit")
    }
    if fields & Self.staleIfErrorBit != 0 { staleIfErrorLimit = try reader.limit("stale-if-error limit") }
    guard reader.remaining == 0 else { throw .trailingBytes(reader.remaining) }
  }

  /// `bytes` as a string, or `nil` unless they are valid UTF-8 (decoding would replace what is
  /// not, so the string's own UTF-8 then differs). Portable to every platform the package
  /// supports, unlike `String(validating:as:)`.
  private static func string(validating bytes: UnsafeRawBufferPointer) -> String? {
    let string = String(decoding: bytes, as: UTF8.self)
    return string.utf8.elementsEqual(bytes) ? string : nil
  }

  private static func append(_ value: Int64, to bytes: inout [UInt8]) {
    withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
  }

  /// Reads fields front to back, throwing ``EntryMetadataError/truncated(field:)`` past the end.
  private struct Reader {
    let bytes: UnsafeRawBufferPointer
    var offset = 0

    var remaining: Int { bytes.count - offset }

    mutating func bytes(_ count: Int, _ field: String) throws(EntryMetadataError) -> UnsafeRawBufferPointer {
      guard count <= remaining else { throw .truncated(field: field) }
      defer { offset += count }
      return UnsafeRawBufferPointer(rebasing: bytes[offset..<offset + count])
    }

    mutating func byte(_ field: String) throws(EntryMetadataError) -> UInt8 {
      try bytes(1, field)[0]
    }

    mutating func int64(_ field: String) throws(EntryMetadataError) -> Int64 {
      Int64(littleEndian: try bytes(8, field).loadUnaligned(as: Int64.self))
    }

    /// A limit of stale serving: nanoseconds, 0 or more.
    mutating func limit(_ field: String) throws(EntryMetadataError) -> Duration {
      let nanoseconds = try int64(field)
      guard nanoseconds >= 0 else { throw .invalidField(field) }
      return .nanoseconds(nanoseconds)
    }

    mutating func string(_ count: Int, _ field: String) throws(EntryMetadataError) -> String {
      guard let string = EntryMetadata.string(validating: try bytes(count, field)) else {
        throw .invalidField(field)
      }
      return string
    }
  }
}
