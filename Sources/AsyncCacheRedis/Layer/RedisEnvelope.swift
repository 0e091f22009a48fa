import AsyncCache

/// The bytes a ``RedisLayer`` stores under a key: a small header, then the encoded value.
///
/// ```
/// byte 0     0xAC (a magic byte)
/// byte 1     1 (the format's version)
/// byte 2     flags: bit 0 set when an expiry follows, bit 1 when a version follows, bit 2
///            when metadata follows
/// 8 bytes    the expiry, nanoseconds since 1970, big-endian (only with bit 0)
/// 8 bytes    the version: the fencing token of the load that stored it, big-endian (only with
///            bit 1, written by a load under single flight)
/// 2+n bytes  the entry's metadata: its length (1 to 65,535), big-endian, then its stored form
///            (`EntryMetadata`'s; only with bit 2)
/// then       the value's bytes
/// ```
///
/// An entry without metadata has the bytes it had before metadata existed. A library that
/// predates metadata reads an entry with metadata as malformed (a miss it reports), never as
/// a wrong value.
///
/// Redis expires the key by itself (`PX`); the header keeps the exact instant so that an entry
/// read back carries its expiry up the chain, as every layer's entries do. The single-flight
/// scripts read the expiry at bytes 3-10 (see `RedisLayer`'s claim script).
enum RedisEnvelope {
  static let magic: UInt8 = 0xAC
  static let version: UInt8 = 1
  static let hasExpiry: UInt8 = 1
  static let hasVersion: UInt8 = 2
  static let hasMetadata: UInt8 = 4

  /// The most bytes the header adds besides the metadata's own (which count with the value
  /// against ``RedisLayer/Configuration-swift.struct/maximumValueSize``): magic, version,
  /// flags, expiry, version field and the metadata's length.
  static let maximumHeaderSize = 21

  /// The envelope of `payload`; `metadata` is the entry's stored metadata, empty for none (at
  /// most 65,535 bytes, which `EntryMetadata`'s limits keep it far below).
  static func encode(
    payload: some Collection<UInt8>, expiresAt: Int64?, version loadVersion: UInt64? = nil, metadata: [UInt8] = []
  ) -> [UInt8] {
    precondition(metadata.count <= Int(UInt16.max), "the metadata does not fit an envelope")
    var bytes: [UInt8] = []
    bytes.reserveCapacity(maximumHeaderSize + (metadata.isEmpty ? 0 : 2 + metadata.count) + payload.count)
    bytes.append(magic)
    bytes.append(version)
    bytes.append(
      (expiresAt == nil ? 0 : hasExpiry) | (loadVersion == nil ? 0 : hasVersion) | (metadata.isEmpty ? 0 : hasMetadata))
    if let expiresAt {
      withUnsafeBytes(of: expiresAt.bigEndian) { bytes.append(contentsOf: $0) }
    }
    if let loadVersion {
      withUnsafeBytes(of: loadVersion.bigEndian) { bytes.append(contentsOf: $0) }
    }
    if !metadata.isEmpty {
      bytes.append(UInt8(truncatingIfNeeded: metadata.count >> 8))
      bytes.append(UInt8(truncatingIfNeeded: metadata.count))
      bytes.append(contentsOf: metadata)
    }
    bytes.append(contentsOf: payload)
    return bytes
  }

  /// The expiry, the version, the metadata and the range of the value's bytes in `bytes`.
  static func decode(
    _ bytes: [UInt8]
  ) throws(Malformed) -> (expiresAt: Int64?, version: UInt64?, metadata: EntryMetadata, payload: Range<Int>) {
    guard bytes.count >= 3 else { throw Malformed("\(bytes.count) bytes, shorter than the header") }
    guard bytes[0] == magic else {
      throw Malformed("the first byte is 0x\(String(bytes[0], radix: 16)), not 0xac: not written by a RedisLayer")
    }
    guard bytes[1] == version else { throw Malformed("format version \(bytes[1]) is not one this library reads") }
    let flags = bytes[2]
    guard flags & ~(hasExpiry | hasVersion | hasMetadata) == 0 else {
      throw Malformed("unknown flags 0x\(String(flags, radix: 16))")
    }
    var index = 3
    func field(_ name: String) throws(Malformed) -> UInt64 {
      guard bytes.count >= index + 8 else {
        throw Malformed("\(bytes.count) bytes, shorter than the header with \(name)")
      }
      defer { index += 8 }
      var value: UInt64 = 0
      for byte in bytes[index..<index + 8] { value = value << 8 | UInt64(byte) }
      return value
    }
    let expiresAt = flags & hasExpiry != 0 ? Int64(bitPattern: try field("an expiry")) : nil
    let loadVersion = flags & hasVersion != 0 ? try field("a version") : nil
    var metadata = EntryMetadata()
    if flags & hasMetadata != 0 {
      guard bytes.count >= index + 2 else {
        throw Malformed("\(bytes.count) bytes, shorter than the metadata's length")
      }
      let length = Int(bytes[index]) << 8 | Int(bytes[index + 1])
      index += 2
      guard length > 0, bytes.count >= index + length else {
        throw Malformed("\(bytes.count) bytes, shorter than the header with \(length) bytes of metadata")
      }
      let decoded = bytes[index..<index + length].withUnsafeBytes { stored in
        Result { () throws(EntryMetadataError) in try EntryMetadata(decoding: stored) }
      }
      switch decoded {
      case .success(let stored): metadata = stored
      case .failure(let error): throw Malformed("the metadata does not decode: \(error)")
      }
      index += length
    }
    return (expiresAt, loadVersion, metadata, index..<bytes.count)
  }

  struct Malformed: Error {
    var reason: String
    init(_ reason: String) { self.reason = reason }
  }
}
