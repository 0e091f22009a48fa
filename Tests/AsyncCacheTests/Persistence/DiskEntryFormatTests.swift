import Testing

@testable import AsyncCache

@Suite("DiskEntryFormat")
struct DiskEntryFormatTests {
  /// A header for `key` and `payload`, with its key and payload lengths replaced.
  func header(keyLength: UInt32, payloadLength: UInt64) -> [UInt8] {
    let key: [UInt8] = Array("key".utf8)
    let payload: [UInt8] = [1, 2, 3]
    var bytes = key.withUnsafeBytes { key in
      payload.withUnsafeBytes {
        DiskEntryFormat.header(
          key: key, metadata: UnsafeRawBufferPointer(start: nil, count: 0), payload: $0, expiresAt: .max)
      }
    }
    withUnsafeBytes(of: keyLength.littleEndian) { bytes.replaceSubrange(8..<12, with: $0) }
    withUnsafeBytes(of: payloadLength.littleEndian) { bytes.replaceSubrange(24..<32, with: $0) }
    return bytes
  }

  func parse(_ bytes: [UInt8]) -> Result<DiskEntryFormat.Header, DiskEntryFormat.Damage> {
    bytes.withUnsafeBytes { bytes in
      Result { () throws(DiskEntryFormat.Damage) in try DiskEntryFormat.parseHeader(bytes) }
    }
  }

  @Test("lengths a file can hold parse")
  func plausibleLengths() throws {
    let parsed = try parse(header(keyLength: 3, payloadLength: 3)).get()
    #expect(parsed.keyLength == 3 && parsed.payloadLength == 3)
    #expect(parsed.fileSize == DiskEntryFormat.headerSize + 6)
  }

  /// Where `Int` has 32 bits (watchOS devices) converting such lengths, or adding them up for
  /// the file's size, would trap: they are damage before any of that.
  @Test(
    "lengths whose sum no file can hold are damage, never an overflow",
    arguments: [
      (keyLength: UInt32.max, payloadLength: UInt64(Int32.max) * 1024),
      (keyLength: 3, payloadLength: UInt64(Int32.max) * 1024 + 1),
      (keyLength: 3, payloadLength: UInt64.max),
      (keyLength: UInt32.max, payloadLength: UInt64.max - 40),
    ] as [(keyLength: UInt32, payloadLength: UInt64)])
  func impossibleLengths(keyLength: UInt32, payloadLength: UInt64) {
    #expect(throws: DiskEntryFormat.Damage.lengthMismatch(expected: .max, actual: DiskEntryFormat.headerSize)) {
      try parse(header(keyLength: keyLength, payloadLength: payloadLength)).get()
    }
  }
}
