/// The stored form of a layer's tag invalidations (``TagInvalidations``): what the file and
/// `UserDefaults` layers keep, so that the entries an invalidation killed stay dead after a
/// restart. Canonical (tags in ascending order of their bytes) and checksummed:
///
/// ```
/// size   field
///    4   "ACTI"
///    1   format version (1)
///    4   number of tags (little-endian)
///        then, for each tag, in ascending order of its bytes:
///    1   its length in bytes (1 to 255)
///    n   its UTF-8
///    8   its invalidation instant: nanoseconds since 1970, little-endian
///    8   XXH64 of everything before
/// ```
package enum TagInvalidationRecord {
  /// Why stored invalidations could not be read back.
  package enum Damage: Error, Equatable, CustomStringConvertible {
    /// Shorter than its fields say, or longer.
    case wrongLength
    /// Not the record's magic bytes.
    case notARecord
    /// A format version this library does not know.
    case unknownVersion(UInt8)
    /// The checksum does not match the bytes.
    case checksumMismatch
    /// A tag that is empty, not valid UTF-8, or out of order.
    case badTag

    package var description: String {
      switch self {
      case .wrongLength: "the record's length does not match its fields"
      case .notARecord: "not a tag invalidation record"
      case .unknownVersion(let version): "unknown format version \(version)"
      case .checksumMismatch: "the checksum does not match"
      case .badTag: "a tag is empty, not UTF-8, or out of order"
      }
    }
  }

  static let magic: [UInt8] = Array("ACTI".utf8)

  /// The bytes of `invalidations`.
  package static func encode(_ invalidations: [String: CacheInstant]) -> [UInt8] {
    var bytes = magic
    bytes.append(1)
    append(UInt32(invalidations.keys.count { (1...255).contains($0.utf8.count) }), to: &bytes)
    let sorted = invalidations.map { (Array($0.key.utf8), $0.value) }.sorted { $0.0.lexicographicallyPrecedes($1.0) }
    // Callers validate their tags (`EntryMetadata.validate(tag:)`); one that could be no entry's
    // is left out rather than written in a form that would not read back.
    for (tag, instant) in sorted where (1...255).contains(tag.count) {
      bytes.append(UInt8(tag.count))
      bytes.append(contentsOf: tag)
      append(UInt64(bitPattern: instant.nanosecondsSince1970), to: &bytes)
    }
    append(XXH64.hash(bytes), to: &bytes)
    return bytes
  }

  /// The invalidations `bytes` hold.
  package static func decode(_ bytes: some Collection<UInt8>) throws(Damage) -> [String: CacheInstant] {
    let bytes = Array(bytes)
    guard bytes.count >= 4 + 1 + 4 + 8 else { throw .wrongLength }
    guard Array(bytes[0..<4]) == magic else { throw .notARecord }
    guard bytes[4] == 1 else { throw .unknownVersion(bytes[4]) }
    let body = bytes.count - 8
    guard XXH64.hash(bytes[..<body]) == load(UInt64.self, bytes, at: body) else { throw .checksumMismatch }
    let count = Int(load(UInt32.self, bytes, at: 5))
    var offset = 9
    var invalidations: [String: CacheInstant] = [:]
    var previous: [UInt8]?
    for _ in 0..<count {
      guard offset < body else { throw .wrongLength }
      let length = Int(bytes[offset])
      offset += 1
      guard length > 0 else { throw .badTag }
      guard offset + length + 8 <= body else { throw .wrongLength }
      let tagBytes = Array(bytes[offset..<offset + length])
      guard let tag = String(validating: tagBytes, as: UTF8.self) else { throw .badTag }
      if let previous, !previous.lexicographicallyPrecedes(tagBytes) { throw .badTag }
      previous = tagBytes
      offset += length
      invalidations[tag] = CacheInstant(nanosecondsSince1970: Int64(bitPattern: load(UInt64.self, bytes, at: offset)))
      offset += 8
    }
    guard offset == body else { throw .wrongLength }
    return invalidations
  }

  private static func append<Integer: FixedWidthInteger>(_ value: Integer, to bytes: inout [UInt8]) {
    withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
  }

  private static func load<Integer: FixedWidthInteger>(_: Integer.Type, _ bytes: [UInt8], at offset: Int) -> Integer {
    var value = Integer.zero
    for index in 0..<(Integer.bitWidth / 8) {
      value |= Integer(bytes[offset + index]) << (8 * index)
    }
    return value
  }
}
