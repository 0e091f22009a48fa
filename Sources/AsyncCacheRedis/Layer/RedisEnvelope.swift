/// The bytes a ``RedisLayer`` stores under a key: a small header, then the encoded value.
///
/// ```
/// byte 0     0xAC (a magic byte)
/// byte 1     1 (the format's version)
/// byte 2     flags: bit 0 set when an expiry follows
/// bytes 3-10 the expiry, nanoseconds since 1970, big-endian (only with bit 0)
/// then       the value's bytes
/// ```
///
/// Redis expires the key by itself (`PX`); the header keeps the exact instant so that an entry
/// read back carries its expiry up the chain, as every layer's entries do.
enum RedisEnvelope {
  static let magic: UInt8 = 0xAC
  static let version: UInt8 = 1
  static let hasExpiry: UInt8 = 1

  /// The most bytes the header adds.
  static let maximumHeaderSize = 11

  static func encode(payload: some Collection<UInt8>, expiresAt: Int64?) -> [UInt8] {
    var bytes: [UInt8] = []
    bytes.reserveCapacity(maximumHeaderSize + payload.count)
    bytes.append(magic)
    bytes.append(version)
    if let expiresAt {
      bytes.append(hasExpiry)
      withUnsafeBytes(of: expiresAt.bigEndian) { bytes.append(contentsOf: $0) }
    } else {
      bytes.append(0)
    }
    bytes.append(contentsOf: payload)
    return bytes
  }

  /// The expiry and the range of the value's bytes in `bytes`.
  static func decode(_ bytes: [UInt8]) throws(Malformed) -> (expiresAt: Int64?, payload: Range<Int>) {
    guard bytes.count >= 3 else { throw Malformed("\(bytes.count) bytes, shorter than the header") }
    guard bytes[0] == magic else {
      throw Malformed("the first byte is 0x\(String(bytes[0], radix: 16)), not 0xac: not written by a RedisLayer")
    }
    guard bytes[1] == version else { throw Malformed("format version \(bytes[1]) is not one this library reads") }
    let flags = bytes[2]
    guard flags & ~hasExpiry == 0 else { throw Malformed("unknown flags 0x\(String(flags, radix: 16))") }
    guard flags & hasExpiry != 0 else { return (nil, 3..<bytes.count) }
    guard bytes.count >= 11 else { throw Malformed("\(bytes.count) bytes, shorter than the header with an expiry") }
    var expiresAt: Int64 = 0
    for byte in bytes[3..<11] { expiresAt = expiresAt << 8 | Int64(byte) }
    return (expiresAt, 11..<bytes.count)
  }

  struct Malformed: Error {
    var reason: String
    init(_ reason: String) { self.reason = reason }
  }
}
