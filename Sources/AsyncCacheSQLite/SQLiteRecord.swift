import AsyncCache
import Foundation

/// The bytes of a value row: a 24-byte header, then the encoded value.
///
/// ```
/// offset  size  field
///      0     4  magic "ACSQ"
///      4     1  format version (1)
///      5     3  reserved, zero
///      8     8  payload length, little-endian
///     16     8  XXH64 checksum, little-endian, of the payload, seeded with the digest of
///               the key's bytes, itself seeded with the expiry (nanoseconds since 1970, or
///               Int64.min for none)
/// ```
///
/// SQLite's integrity checks cover its pages, not what a blob contains. The header catches a
/// row torn or damaged by anything else, and because the checksum covers the key and the
/// expiry columns too, a row whose columns were mixed up is caught as well.
enum SQLiteRecord {
  static let magic: (UInt8, UInt8, UInt8, UInt8) = (0x41, 0x43, 0x53, 0x51)
  static let formatVersion: UInt8 = 1
  static let headerSize = 24

  /// Why a row was rejected.
  enum Damage: Equatable, Sendable {
    case tooShort
    case badMagic
    case unknownVersion(UInt8)
    case lengthMismatch
    case checksumMismatch
  }

  /// The checksum of a row's contents.
  static func checksum(key: UnsafeRawBufferPointer, expiresAt: Int64?, payload: UnsafeRawBufferPointer) -> UInt64 {
    let keyDigest = XXH64.hash(key, seed: UInt64(bitPattern: expiresAt ?? .min))
    return XXH64.hash(payload, seed: keyDigest)
  }

  /// The blob stored for `payload`.
  static func encode(key: [UInt8], expiresAt: Int64?, payload: Data) -> Data {
    key.withUnsafeBytes { encode(key: $0, expiresAt: expiresAt, payload: payload) }
  }

  /// The blob stored for `payload` under the key whose bytes are `key`.
  static func encode(key: UnsafeRawBufferPointer, expiresAt: Int64?, payload: Data) -> Data {
    var blob = Data(count: headerSize + payload.count)
    blob.withUnsafeMutableBytes { encode(into: $0, key: key, expiresAt: expiresAt, payload: payload) }
    return blob
  }

  /// Writes the header of a row whose encoded value has `count` bytes and checksum `digest`
  /// (see ``checksum(key:expiresAt:payload:)``) into the first ``headerSize`` bytes of `buffer`.
  static func writeHeader(into buffer: UnsafeMutableRawBufferPointer, count: Int, digest: UInt64) {
    precondition(buffer.count >= headerSize, "the buffer does not fit the header")
    buffer.storeBytes(of: magic.0, toByteOffset: 0, as: UInt8.self)
    buffer.storeBytes(of: magic.1, toByteOffset: 1, as: UInt8.self)
    buffer.storeBytes(of: magic.2, toByteOffset: 2, as: UInt8.self)
    buffer.storeBytes(of: magic.3, toByteOffset: 3, as: UInt8.self)
    buffer.storeBytes(of: formatVersion, toByteOffset: 4, as: UInt8.self)
    // Reserved, zero.
    buffer.storeBytes(of: 0, toByteOffset: 5, as: UInt8.self)
    buffer.storeBytes(of: 0, toByteOffset: 6, as: UInt16.self)
    buffer.storeBytes(of: UInt64(count).littleEndian, toByteOffset: 8, as: UInt64.self)
    buffer.storeBytes(of: digest.littleEndian, toByteOffset: 16, as: UInt64.self)
  }

  /// Writes the blob for `payload` into `buffer`, which holds exactly `headerSize +
  /// payload.count` bytes.
  private static func encode(
    into buffer: UnsafeMutableRawBufferPointer, key: UnsafeRawBufferPointer, expiresAt: Int64?, payload: Data
  ) {
    precondition(buffer.count == headerSize + payload.count, "the buffer does not fit the record")
    let payloadArea = UnsafeMutableRawBufferPointer(rebasing: buffer[headerSize...])
    payload.withUnsafeBytes { payloadArea.copyMemory(from: $0) }
    let digest = checksum(key: key, expiresAt: expiresAt, payload: UnsafeRawBufferPointer(payloadArea))
    writeHeader(into: buffer, count: payload.count, digest: digest)
  }

  /// The payload of a stored blob, or why the blob is damaged.
  static func payload(
    of blob: UnsafeRawBufferPointer, key: UnsafeRawBufferPointer, expiresAt: Int64?
  ) -> Result<UnsafeRawBufferPointer, DamageError> {
    guard blob.count >= headerSize else { return .failure(DamageError(.tooShort)) }
    guard blob[0] == magic.0, blob[1] == magic.1, blob[2] == magic.2, blob[3] == magic.3 else {
      return .failure(DamageError(.badMagic))
    }
    guard blob[4] == formatVersion else { return .failure(DamageError(.unknownVersion(blob[4]))) }
    let length = UInt64(littleEndian: blob.loadUnaligned(fromByteOffset: 8, as: UInt64.self))
    guard length == UInt64(blob.count - headerSize) else { return .failure(DamageError(.lengthMismatch)) }
    let stored = UInt64(littleEndian: blob.loadUnaligned(fromByteOffset: 16, as: UInt64.self))
    let payload = UnsafeRawBufferPointer(rebasing: blob[headerSize...])
    guard checksum(key: key, expiresAt: expiresAt, payload: payload) == stored else {
      return .failure(DamageError(.checksumMismatch))
    }
    return .success(payload)
  }

  struct DamageError: Error {
    let damage: Damage
    init(_ damage: Damage) { self.damage = damage }
  }
}
