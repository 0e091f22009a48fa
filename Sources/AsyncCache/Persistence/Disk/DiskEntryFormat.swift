/// The layout of a ``DiskLayer`` file: a fixed header, the encoded key, then the value's bytes.
///
/// ```
/// offset size field
///      0    4 magic "ACDK"
///      4    2 format version (1)
///      6    2 flags (0; any other value is refused)
///      8    4 key length in bytes (the key's UTF-8)
///     12    4 reserved (0; any other value is refused)
///     16    8 expiry: nanoseconds since 1970 (Int64.max: never)
///     24    8 payload length in bytes
///     32    8 checksum: XXH64 of bytes 0..<32, then of the key seeded with that digest,
///             then of the payload seeded with that digest
///     40      key bytes, then payload bytes
/// ```
///
/// Integers are little-endian. The checksum covers every header field, the key and the payload,
/// so a torn or flipped byte anywhere makes the file unreadable rather than wrong. The full key
/// is stored so that two keys whose file names collide never read each other's bytes.
enum DiskEntryFormat {
  /// "ACDK" read as a little-endian integer.
  static let magic: UInt32 = 0x4B44_4341
  /// The version this code writes and reads; files of any other version are discarded.
  static let version: UInt16 = 1
  /// The length of the header, before the key.
  static let headerSize = 40
  /// The expiry of an entry that never expires.
  static let neverExpires = Int64.max
  /// Where the checksummed header fields end (and the checksum starts).
  static let checksumOffset = 32

  /// The fields of a header that passed ``parseHeader(_:)``.
  struct Header: Equatable {
    var keyLength: Int
    var expiresAt: Int64
    var payloadLength: Int
    var checksum: UInt64

    /// The length of the whole file this header describes.
    var fileSize: Int { DiskEntryFormat.headerSize + keyLength + payloadLength }
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
  }

  /// The header for an entry, checksum included.
  static func header(
    key: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer, expiresAt: Int64
  ) -> [UInt8] {
    var header = [UInt8](repeating: 0, count: headerSize)
    header.withUnsafeMutableBytes { bytes in
      bytes.storeBytes(of: magic.littleEndian, toByteOffset: 0, as: UInt32.self)
      bytes.storeBytes(of: version.littleEndian, toByteOffset: 4, as: UInt16.self)
      bytes.storeBytes(of: UInt32(key.count).littleEndian, toByteOffset: 8, as: UInt32.self)
      bytes.storeBytes(of: expiresAt.littleEndian, toByteOffset: 16, as: Int64.self)
      bytes.storeBytes(of: UInt64(payload.count).littleEndian, toByteOffset: 24, as: UInt64.self)
      let sum = checksum(fields: UnsafeRawBufferPointer(rebasing: bytes[..<checksumOffset]), key: key, payload: payload)
      bytes.storeBytes(of: sum.littleEndian, toByteOffset: checksumOffset, as: UInt64.self)
    }
    return header
  }

  /// The checksum of the header fields, the key and the payload.
  static func checksum(
    fields: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer
  ) -> UInt64 {
    XXH64.hash(payload, seed: XXH64.hash(key, seed: XXH64.hash(fields)))
  }

  /// Parses and checks the header at the start of `bytes`, without verifying the checksum.
  static func parseHeader(_ bytes: UnsafeRawBufferPointer) throws(Damage) -> Header {
    guard bytes.count >= headerSize else { throw .truncatedHeader }
    guard UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 0, as: UInt32.self)) == magic else {
      throw .badMagic
    }
    let fileVersion = UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: 4, as: UInt16.self))
    guard fileVersion == version else { throw .unknownVersion(fileVersion) }
    let flags = UInt16(littleEndian: bytes.loadUnaligned(fromByteOffset: 6, as: UInt16.self))
    let reserved = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 12, as: UInt32.self))
    guard flags == 0, reserved == 0 else { throw .unknownFields }
    let keyLength = UInt32(littleEndian: bytes.loadUnaligned(fromByteOffset: 8, as: UInt32.self))
    let payloadLength = UInt64(littleEndian: bytes.loadUnaligned(fromByteOffset: 24, as: UInt64.self))
    // Lengths past what a file can hold are damage, and must not overflow the size arithmetic
    // (`fileSize`), whether `Int` has 64 bits or 32 (watchOS devices).
    let limit = Swift.min(UInt64(Int32.max) * 1024, UInt64(Int.max))
    guard payloadLength <= limit, UInt64(headerSize) + UInt64(keyLength) + payloadLength <= limit else {
      throw .lengthMismatch(expected: .max, actual: bytes.count)
    }
    return Header(
      keyLength: Int(keyLength),
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
    let keyEnd = headerSize + header.keyLength
    let sum = checksum(
      fields: UnsafeRawBufferPointer(rebasing: file[..<checksumOffset]),
      key: UnsafeRawBufferPointer(rebasing: file[headerSize..<keyEnd]),
      payload: UnsafeRawBufferPointer(rebasing: file[keyEnd...]))
    guard sum == header.checksum else { throw .checksumMismatch }
    return header
  }
}
