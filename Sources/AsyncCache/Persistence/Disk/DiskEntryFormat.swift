/// The layout of a ``DiskLayer`` file: a fixed header, the encoded key, the entry's metadata if
/// it has any, then the value's bytes.
///
/// ```
/// offset size field
///      0    4 magic "ACDK"
///      4    2 format version: 1 without metadata, 2 with
///      6    2 flags (0; any other value is refused)
///      8    4 key length in bytes (the key's UTF-8)
///     12    4 version 2: the metadata's length in bytes (1 to 65,535); version 1: 0
///     16    8 expiry: nanoseconds since 1970 (Int64.max: never)
///     24    8 payload length in bytes
///     32    8 checksum: XXH64 of bytes 0..<32, then of the key seeded with that digest, then
///             (version 2) of the metadata seeded with that digest, then of the payload
///             seeded with the last digest
///     40      key bytes, then (version 2) the metadata (`EntryMetadata`'s stored form), then
///             payload bytes
/// ```
///
/// An entry without metadata is written as version 1, byte for byte what libraries before
/// metadata wrote and read; both versions are read.
///
/// Integers are little-endian. The checksum covers every header field, the key, the metadata
/// and the payload, so a torn or flipped byte anywhere makes the file unreadable rather than
/// wrong. The full key is stored so that two keys whose file names collide never read each
/// other's bytes.
enum DiskEntryFormat {
  /// "ACDK" read as a little-endian integer.
  static let magic: UInt32 = 0x4B44_4341
  /// The version of a file without metadata.
  static let version: UInt16 = 1
  /// The version of a file with metadata. Files of any other version are discarded.
  static let metadataVersion: UInt16 = 2
  /// The longest metadata a file holds; ``EntryMetadata``'s own limits keep it far below.
  static let maximumMetadataLength = Int(UInt16.max)
  /// The length of the header, before the key.
  static let headerSize = 40
  /// The expiry of an entry that never expires.
  static let neverExpires = Int64.max
  /// Where the checksummed header fields end (and the checksum starts).
  static let checksumOffset = 32

  /// The fields of a header that passed ``parseHeader(_:)``.
  struct Header: Equatable {
    var keyLength: Int
    /// 0 for a file without metadata.
    var metadataLength: Int
    var expiresAt: Int64
    var payloadLength: Int
    var checksum: UInt64

    /// The length of the whole file this header describes.
    var fileSize: Int { DiskEntryFormat.headerSize + keyLength + metadataLength + payloadLength }
    /// Where the metadata starts (and the key ends).
    var metadataOffset: Int { DiskEntryFormat.headerSize + keyLength }
    /// Where the payload starts.
    var payloadOffset: Int { metadataOffset + metadataLength }
  }

  /// Why a file is unreadable.
  enum Damage: Error, Equatable {
    /// Shorter than a header.
    case truncatedHeader
    /// Not a file of this format.
    case badMagic
    /// Written by another version of the format.
    case unknownVersion(UInt16)
    /// Flags or reserved fields this version does not know.
    case unknownFields
    /// The file's length differs from what its header declares.
    case lengthMismatch(expected: Int, actual: Int)
    /// The checksum does not match the contents.
    case checksumMismatch
    /// The stored key is not valid UTF-8, or the file's name is not the hash of its key.
    case misplacedKey
    /// The value's bytes do not decode.
    case undecodableValue
    /// The metadata's bytes do not decode (written by a newer library, or damaged before the
    /// checksum was computed).
    case undecodableMetadata(EntryMetadataError)
  }

  /// The header for an entry, checksum included; `metadata` is empty for an entry without.
  static func header(
    key: UnsafeRawBufferPointer, metadata: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, expiresAt: Int64
  ) -> [UInt8] {
    precondition(metadata.count <= maximumMetadataLength, "the metadata does not fit a file")
    var header = [UInt8](repeating: 0, count: headerSize)
    header.withUnsafeMutableBytes { bytes in
      bytes.storeBytes(of: magic.littleEndian, toByteOffset: 0, as: UInt32.self)
      bytes.storeBytes(
        of: (metadata.isEmpty ? version : metadataVersion).littleEndian, toByteOffset: 4, as: UInt16.self)
      bytes.storeBytes(of: UInt32(key.count).littleEndian, toByteOffset: 8, as: UInt32.self)
      bytes.storeBytes(of: UInt32(metadata.count).littleEndian, toByteOffset: 12, as: UInt32.self)
      bytes.storeBytes(of: expiresAt.littleEndian, toByteOffset: 16, as: Int64.self)
      bytes.storeBytes(of: UInt64(payload.count).littleEndian, toByteOffset: 24, as: UInt64.self)
      let sum = checksum(
        fields: UnsafeRawBufferPointer(rebasing: bytes[..<checksumOffset]), key: key, metadata: metadata,
        payload: payload)
      bytes.storeBytes(of: sum.littleEndian, toByteOffset: checksumOffset, as: UInt64.self)
    }
    return header
  }

  /// The checksum of the header fields, the key, the metadata (empty for none) and the payload.
  static func checksum(
    fields: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer, metadata: UnsafeRawBufferPointer,
    payload: UnsafeRawBufferPointer
  ) -> UInt64 {
    let keyDigest = XXH64.hash(key, seed: XXH64.hash(fields))
    let seed = metadata.isEmpty ? keyDigest : XXH64.hash(metadata, seed: keyDigest)
    return XXH64.hash(payload, seed: seed)
  }

  /// Parses and checks the header at the start of `bytes`, without verifying the checksum.
  static func parseHeader(_ bytes: UnsafeRawBufferPointer) throws(Damage) -> Header {
    guard bytes.count >= headerSize else { throw .truncatedHeader }
    guard UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt32.self)) == magic else {
      throw .badMagic
    }
    let fileVersion = UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: 4, as: UInt16.self))
    guard fileVersion == version || fileVersion == metadataVersion else { throw .unknownVersion(fileVersion) }
    let flags = UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: 6, as: UInt16.self))
    let metadataLength = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 12, as: UInt32.self))
    guard flags == 0 else { throw .unknownFields }
    // Version 1's field at 12 is reserved, zero; version 2's holds a length of 1 or more.
    guard (fileVersion == version) == (metadataLength == 0), metadataLength <= maximumMetadataLength else {
      throw .unknownFields
    }
    let keyLength = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
    let payloadLength = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 24, as: UInt64.self))
    // Lengths past what a file can hold are damage, and must not overflow the size arithmetic
    // (`fileSize`), whether `Int` has 64 bits or 32 (watchOS devices).
    let limit = Swift.min(UInt64(Int32.max) * 1024, UInt64(Int.max))
    guard payloadLength <= limit,
      UInt64(headerSize) + UInt64(keyLength) + UInt64(metadataLength) + payloadLength <= limit
    else {
      throw .lengthMismatch(expected: .max, actual: bytes.count)
    }
    return Header(
      keyLength: Int(keyLength),
      metadataLength: Int(metadataLength),
      expiresAt: Int64(littleEndian: bytes.loadUnaligned(fromByteOffset: 16, as: Int64.self)),
      payloadLength: Int(payloadLength),
      checksum: UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: checksumOffset, as: UInt64.self))
    )
  }

  /// Checks a whole file: its header, its length and its checksum.
  static func verify(_ file: UnsafeRawBufferPointer) throws(Damage) -> Header {
    let header = try parseHeader(file)
    guard file.count == header.fileSize else {
      throw .lengthMismatch(expected: header.fileSize, actual: file.count)
    }
    let sum = checksum(
      fields: UnsafeRawBufferPointer(rebasing: file[..<checksumOffset]),
      key: UnsafeRawBufferPointer(rebasing: file[headerSize..<header.metadataOffset]),
      metadata: UnsafeRawBufferPointer(rebasing: file[header.metadataOffset..<header.payloadOffset]),
      payload: UnsafeRawBufferPointer(rebasing: file[header.payloadOffset...]))
    guard sum == header.checksum else { throw .checksumMismatch }
    return header
  }

  /// The metadata of a file that passed ``verify(_:)`` with `header`.
  static func metadata(of file: UnsafeRawBufferPointer, header: Header) throws(Damage) -> EntryMetadata {
    do {
      return try EntryMetadata(
        decoding: UnsafeRawBufferPointer(rebasing: file[header.metadataOffset..<header.payloadOffset]))
    } catch {
      throw .undecodableMetadata(error)
    }
  }
}
