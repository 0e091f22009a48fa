import AsyncCache
import Foundation

/// The bytes of a value row: a 24-byte header, the entry's metadata if it has any, then the
/// encoded value.
///
/// ```
/// offset  size  field
///      0     4  magic "ACSQ"
///      4     1  format version: 1 without metadata, 2 with
///      5     1  reserved, zero
///      6     2  version 2: the metadata's length, little-endian (1 or more); version 1: zero
///      8     8  payload length (the encoded value's), little-endian
///     16     8  XXH64 checksum, little-endian, of the payload, seeded with the digest of the
///               metadata (version 2 only), seeded with the digest of the key's bytes, itself
///               seeded with the expiry (nanoseconds since 1970, or Int64.min for none)
///     24        version 2: the metadata (`EntryMetadata`'s stored form); then the payload
/// ```
///
/// An entry without metadata is written as version 1, byte for byte what libraries before
/// metadata wrote and read; both versions are read.
///
/// SQLite's integrity checks cover its pages, not what a blob contains. The header catches a
/// row torn or damaged by anything else, and because the checksum covers the key and the
/// expiry columns too, a row whose columns were mixed up is caught as well.
enum SQLiteRecord {
  static let magic: (UInt8, UInt8, UInt8, UInt8) = (0x41, 0x43, 0x53, 0x51)
  /// The version of a row without metadata.
  static let formatVersion: UInt8 = 1
  /// The version of a row with metadata.
  static let metadataFormatVersion: UInt8 = 2
  static let headerSize = 24
  /// The longest metadata a row holds (its length field has 16 bits); `EntryMetadata`'s own
  /// limits keep it far below.
  static let maximumMetadataLength = Int(UInt16.max)

  /// Why a row was rejected.
  enum Damage: Equatable, Sendable {
    case tooShort
    case badMagic
    case unknownVersion(UInt8)
    case lengthMismatch
    case checksumMismatch
    /// A reserved byte is not zero, or the metadata length disagrees with the version.
    case inconsistentHeader
    case undecodableMetadata(EntryMetadataError)
  }

  /// The checksum of a row's contents; `metadata` is empty for a row without metadata.
  static func checksum(
    key: UnsafeRawBufferPointer, expiresAt: Int64?, metadata: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer
  ) -> UInt64 {
    let keyDigest = XXH64.hash(key, seed: UInt64(bitPattern: expiresAt ?? .min))
    let seed = metadata.isEmpty ? keyDigest : XXH64.hash(metadata, seed: keyDigest)
    return XXH64.hash(payload, seed: seed)
  }

  /// The blob stored for `payload` with `metadata` (empty for none).
  static func encode(key: [UInt8], expiresAt: Int64?, metadata: [UInt8], payload: Data) -> Data {
    var blob = Data(count: headerSize + metadata.count + payload.count)
    blob.withUnsafeMutableBytes { buffer in
      key.withUnsafeBytes { key in
        metadata.withUnsafeBytes { metadata in
          payload.withUnsafeBytes { payload in
            let digest = checksum(key: key, expiresAt: expiresAt, metadata: metadata, payload: payload)
            write(into: buffer, metadata: metadata, payload: payload, digest: digest)
          }
        }
      }
    }
    return blob
  }

  /// Writes the row for `payload` and `metadata` (empty for none), whose checksum is `digest`
  /// (see ``checksum(key:expiresAt:metadata:payload:)``), into `buffer`, which holds exactly
  /// ``headerSize`` plus both lengths.
  static func write(
    into buffer: UnsafeMutableRawBufferPointer, metadata: UnsafeRawBufferPointer, payload: UnsafeRawBufferPointer,
    digest: UInt64
  ) {
    precondition(buffer.count == headerSize + metadata.count + payload.count, "the buffer does not fit the record")
    precondition(metadata.count <= maximumMetadataLength, "the metadata does not fit a record")
    buffer.storeBytes(of: magic.0, toByteOffset: 0, as: UInt8.self)
    buffer.storeBytes(of: magic.1, toByteOffset: 1, as: UInt8.self)
    buffer.storeBytes(of: magic.2, toByteOffset: 2, as: UInt8.self)
    buffer.storeBytes(of: magic.3, toByteOffset: 3, as: UInt8.self)
    buffer.storeBytes(
      of: metadata.isEmpty ? formatVersion : metadataFormatVersion, toByteOffset: 4, as: UInt8.self)
    // Reserved, zero.
    buffer.storeBytes(of: 0, toByteOffset: 5, as: UInt8.self)
    buffer.storeBytes(of: UInt16(metadata.count).littleEndian, toByteOffset: 6, as: UInt16.self)
    buffer.storeBytes(of: UInt64(payload.count).littleEndian, toByteOffset: 8, as: UInt64.self)
    buffer.storeBytes(of: digest.littleEndian, toByteOffset: 16, as: UInt64.self)
    let metadataEnd = headerSize + metadata.count
    UnsafeMutableRawBufferPointer(rebasing: buffer[headerSize..<metadataEnd]).copyMemory(from: metadata)
    UnsafeMutableRawBufferPointer(rebasing: buffer[metadataEnd...]).copyMemory(from: payload)
  }

  /// The metadata and the payload of a stored blob, or why the blob is damaged. The metadata
  /// of a version-1 row is empty.
  static func contents(
    of blob: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer, expiresAt: Int64?
  ) -> Result<(metadata: EntryMetadata, payload: UnsafeRawBufferPointer), DamageError> {
    guard blob.count >= headerSize else { return .failure(DamageError(.tooShort)) }
    guard blob[0] == magic.0, blob[1] == magic.1, blob[2] == magic.2, blob[3] == magic.3 else {
      return .failure(DamageError(.badMagic))
    }
    let version = blob[4]
    let metadataLength = Int(UInt16(littleEndian: blob.loadUnaligned(fromByteOffset: 6, as: UInt16.self)))
    guard version == formatVersion || version == metadataFormatVersion else {
      return .failure(DamageError(.unknownVersion(version)))
    }
    guard blob[5] == 0, (version == formatVersion) == (metadataLength == 0) else {
      return .failure(DamageError(.inconsistentHeader))
    }
    let length = UInt64(littleEndian: blob.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
    guard headerSize + metadataLength <= blob.count,
      length == UInt64(blob.count - headerSize - metadataLength)
    else { return .failure(DamageError(.lengthMismatch)) }
    let stored = UInt64(littleEndian: blob.loadUnaligned(fromByteOffset: 16, as: UInt64.self))
    let metadataBytes = UnsafeRawBufferPointer(rebasing: blob[headerSize..<headerSize + metadataLength])
    let payload = UnsafeRawBufferPointer(rebasing: blob[(headerSize + metadataLength)...])
    guard checksum(key: key, expiresAt: expiresAt, metadata: metadataBytes, payload: payload) == stored else {
      return .failure(DamageError(.checksumMismatch))
    }
    do {
      return .success((try EntryMetadata(decoding: metadataBytes), payload))
    } catch {
      return .failure(DamageError(.undecodableMetadata(error)))
    }
  }

  struct DamageError: Error {
    let damage: Damage
    init(_ damage: Damage) { self.damage = damage }
  }
}
