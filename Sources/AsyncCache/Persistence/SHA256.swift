/// SHA-256 (FIPS 180-4): the hash that names a ``DiskLayer``'s files.
///
/// Written here because the package has no dependencies and CryptoKit does not exist on Linux.
/// A file name must not let two keys meet by accident, so a 256-bit cryptographic hash is used
/// rather than a fast 64-bit one; a key of typical length costs two compressions (well under a
/// microsecond in release builds), which is small next to opening a file.
package enum SHA256 {
  /// A 256-bit digest, held as four big-endian 64-bit words (so that it hashes and compares fast
  /// as a dictionary key).
  package struct Digest: Hashable, Sendable, CustomStringConvertible {
    package var word0: UInt64
    package var word1: UInt64
    package var word2: UInt64
    package var word3: UInt64

    /// A digest from its four big-endian 64-bit words.
    package init(_ word0: UInt64, _ word1: UInt64, _ word2: UInt64, _ word3: UInt64) {
      self.word0 = word0
      self.word1 = word1
      self.word2 = word2
      self.word3 = word3
    }

    /// The digest of 64 lowercase hexadecimal digits, or `nil` for any other string.
    package init?(hexString: some StringProtocol) {
      var words: [UInt64] = []
      words.reserveCapacity(4)
      var word: UInt64 = 0
      var digits = 0
      for byte in hexString.utf8 {
        let nibble: UInt8
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): nibble = byte &- UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): nibble = byte &- UInt8(ascii: "a") &+ 10
        default: return nil
        }
        guard digits < 64 else { return nil }
        word = word << 4 | UInt64(nibble)
        digits += 1
        if digits % 16 == 0 {
          words.append(word)
          word = 0
        }
      }
      guard digits == 64 else { return nil }
      self.init(words[0], words[1], words[2], words[3])
    }

    /// The 32 bytes of the digest, in order.
    package var bytes: [UInt8] {
      [word0, word1, word2, word3].flatMap { word in (0..<8).map { UInt8(truncatingIfNeeded: word >> (56 - 8 * $0)) } }
    }

    /// The digest as 64 lowercase hexadecimal digits.
    package var hexString: String {
      String(unsafeUninitializedCapacity: 64) { buffer in
        writeHex(into: buffer, at: 0)
        return 64
      }
    }

    /// Writes the 64 lowercase hexadecimal digits into `buffer` from `offset` on (no
    /// allocation: a file's path is built with them on every read).
    package func writeHex(into buffer: UnsafeMutableBufferPointer<UInt8>, at offset: Int) {
      precondition(offset >= 0 && buffer.count - offset >= 64, "room for 64 digits")
      func write(_ word: UInt64, at start: Int) {
        for digit in 0..<16 {
          let nibble = UInt8(truncatingIfNeeded: word >> UInt64(60 - 4 * digit)) & 0xF
          buffer[start + digit] = nibble < 10 ? UInt8(ascii: "0") + nibble : UInt8(ascii: "a") + nibble - 10
        }
      }
      write(word0, at: offset)
      write(word1, at: offset + 16)
      write(word2, at: offset + 32)
      write(word3, at: offset + 48)
    }

    package var description: String { hexString }
  }

  /// The SHA-256 digest of `bytes`.
  package static func hash(_ bytes: UnsafeRawBufferPointer) -> Digest {
    var state = initialState
    let count = bytes.count
    var offset = 0
    roundConstants.withUnsafeBufferPointer { constants in
      withUnsafeTemporaryAllocation(of: UInt32.self, capacity: 64) { schedule in
        if let base = bytes.baseAddress {
          while count - offset >= 64 {
            compress(&state, UnsafeRawBufferPointer(start: base + offset, count: 64), schedule, constants)
            offset += 64
          }
        }
        // The tail: the remaining bytes, a 1 bit, zeros, and the length in bits (big-endian) in
        // the last 8 bytes of one or two blocks.
        withUnsafeTemporaryAllocation(byteCount: 128, alignment: 8) { tail in
          let remaining = count - offset
          tail.initializeMemory(as: UInt8.self, repeating: 0)
          if remaining > 0 {
            tail.baseAddress!.copyMemory(from: bytes.baseAddress! + offset, byteCount: remaining)
          }
          tail[remaining] = 0x80
          let blocks = remaining + 9 <= 64 ? 1 : 2
          let bitCount = UInt64(count) &* 8
          for index in 0..<8 {
            tail[blocks * 64 - 1 - index] = UInt8(truncatingIfNeeded: bitCount >> (8 * UInt64(index)))
          }
          for block in 0..<blocks {
            let start = tail.baseAddress! + block * 64
            compress(&state, UnsafeRawBufferPointer(start: start, count: 64), schedule, constants)
          }
        }
      }
    }
    return Digest(
      UInt64(state.0) << 32 | UInt64(state.1), UInt64(state.2) << 32 | UInt64(state.3),
      UInt64(state.4) << 32 | UInt64(state.5), UInt64(state.6) << 32 | UInt64(state.7))
  }

  /// The SHA-256 digest of a byte sequence.
  package static func hash(_ bytes: some Sequence<UInt8>) -> Digest {
    if let digest = bytes.withContiguousStorageIfAvailable({ hash(UnsafeRawBufferPointer($0)) }) {
      return digest
    }
    return Array(bytes).withUnsafeBytes { hash($0) }
  }

  private typealias State = (UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32)

  private static let initialState: State = (
    0x6A09_E667, 0xBB67_AE85, 0x3C6E_F372, 0xA54F_F53A, 0x510E_527F, 0x9B05_688C, 0x1F83_D9AB, 0x5BE0_CD19
  )

  private static let roundConstants: [UInt32] = [
    0x428A_2F98, 0x7137_4491, 0xB5C0_FBCF, 0xE9B5_DBA5, 0x3956_C25B, 0x59F1_11F1, 0x923F_82A4, 0xAB1C_5ED5,
    0xD807_AA98, 0x1283_5B01, 0x2431_85BE, 0x550C_7DC3, 0x72BE_5D74, 0x80DE_B1FE, 0x9BDC_06A7, 0xC19B_F174,
    0xE49B_69C1, 0xEFBE_4786, 0x0FC1_9DC6, 0x240C_A1CC, 0x2DE9_2C6F, 0x4A74_84AA, 0x5CB0_A9DC, 0x76F9_88DA,
    0x983E_5152, 0xA831_C66D, 0xB003_27C8, 0xBF59_7FC7, 0xC6E0_0BF3, 0xD5A7_9147, 0x06CA_6351, 0x1429_2967,
    0x27B7_0A85, 0x2E1B_2138, 0x4D2C_6DFC, 0x5338_0D13, 0x650A_7354, 0x766A_0ABB, 0x81C2_C92E, 0x9272_2C85,
    0xA2BF_E8A1, 0xA81A_664B, 0xC24B_8B70, 0xC76C_51A3, 0xD192_E819, 0xD699_0624, 0xF40E_3585, 0x106A_A070,
    0x19A4_C116, 0x1E37_6C08, 0x2748_774C, 0x34B0_BCB5, 0x391C_0CB3, 0x4ED8_AA4A, 0x5B9C_CA4F, 0x682E_6FF3,
    0x748F_82EE, 0x78A5_636F, 0x84C8_7814, 0x8CC7_0208, 0x90BE_FFFA, 0xA450_6CEB, 0xBEF9_A3F7, 0xC671_78F2,
  ]

  @inline(__always)
  private static func rotate(_ value: UInt32, _ bits: UInt32) -> UInt32 {
    (value >> bits) | (value << (32 - bits))
  }

  /// Mixes one 64-byte block into `state`.
  private static func compress(
    _ state: inout State,
    _ block: UnsafeRawBufferPointer,
    _ schedule: UnsafeMutableBufferPointer<UInt32>,
    _ constants: UnsafeBufferPointer<UInt32>
  ) {
    for index in 0..<16 {
      schedule[index] = UInt32(bigEndian: block.loadUnaligned(fromByteOffset: index * 4, as: UInt32.self))
    }
    for index in 16..<64 {
      let early = schedule[index - 15]
      let late = schedule[index - 2]
      let sigma0 = rotate(early, 7) ^ rotate(early, 18) ^ (early >> 3)
      let sigma1 = rotate(late, 17) ^ rotate(late, 19) ^ (late >> 10)
      schedule[index] = schedule[index - 16] &+ sigma0 &+ schedule[index - 7] &+ sigma1
    }
    var (a, b, c, d, e, f, g, h) = state
    for index in 0..<64 {
      let sum1 = rotate(e, 6) ^ rotate(e, 11) ^ rotate(e, 25)
      let choice = (e & f) ^ (~e & g)
      let temporary1 = h &+ sum1 &+ choice &+ constants[index] &+ schedule[index]
      let sum0 = rotate(a, 2) ^ rotate(a, 13) ^ rotate(a, 22)
      let majority = (a & b) ^ (a & c) ^ (b & c)
      let temporary2 = sum0 &+ majority
      h = g
      g = f
      f = e
      e = d &+ temporary1
      d = c
      c = b
      b = a
      a = temporary1 &+ temporary2
    }
    state.0 &+= a
    state.1 &+= b
    state.2 &+= c
    state.3 &+= d
    state.4 &+= e
    state.5 &+= f
    state.6 &+= g
    state.7 &+= h
  }
}
