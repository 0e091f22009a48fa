import Foundation
import Testing

@testable import AsyncCache

@Suite("XXH64")
struct XXH64Tests {
  /// Digests computed by the reference implementation (Python's `xxhash` package).
  @Test(
    "matches the reference implementation",
    arguments: [
      (Array(""), UInt64(0), UInt64(0xEF46_DB37_51D8_E999)),
      (Array("a"), 0, 0xD24E_C4F1_A98C_6E5B),
      (Array("abc"), 0, 0x44BC_2CF5_AD77_0999),
      (Array("abc"), 12345, 0x0170_0E64_F6F2_3509),
      (Array("0123456789abcdef0123456789abcdef0"), 0, 0xE876_84F0_8D6D_0816),
      (Array("0123456789abcdef0123456789abcdef0"), 12345, 0x29EE_AEEC_2D16_19D4),
    ] as [([Character], UInt64, UInt64)])
  func reference(input: [Character], seed: UInt64, expected: UInt64) {
    #expect(XXH64.hash(Array(String(input).utf8), seed: seed) == expected)
  }

  @Test("hashes every stripe, word and tail byte of a long input")
  func longInput() {
    let bytes = (0..<3).flatMap { _ in (0...255).map(UInt8.init) } + Array("xyz".utf8)
    #expect(XXH64.hash(bytes) == 0xE921_A1B4_5BD7_79F8)
    #expect(XXH64.hash(bytes, seed: 12345) == 0x6B1B_5D67_1FB9_3B43)
  }

  @Test("a flipped bit anywhere changes the digest", arguments: [0, 7, 31, 32, 500, 770])
  func flippedBit(index: Int) {
    var bytes = (0..<771).map { UInt8(truncatingIfNeeded: $0 &* 31) }
    let digest = XXH64.hash(bytes)
    bytes[index] ^= 0x10
    #expect(XXH64.hash(bytes) != digest)
  }
}
