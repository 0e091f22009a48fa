import Foundation
import Testing

@testable import AsyncCache

@Suite("SHA256", .timeLimit(.minutes(3)))
struct SHA256Tests {
  /// The FIPS 180-2 appendix B examples and the empty message.
  @Test(
    "matches the FIPS test vectors",
    arguments: [
      ("", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"),
      ("abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"),
      (
        "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"
      ),
      (
        "abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrsmnopqrstnopqrstu",
        "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"
      ),
    ])
  func fipsVectors(message: String, expected: String) {
    #expect(SHA256.hash(Array(message.utf8)).hexString == expected)
  }

  @Test("hashes one million 'a's")
  func millionAs() {
    let message = [UInt8](repeating: UInt8(ascii: "a"), count: 1_000_000)
    #expect(SHA256.hash(message).hexString == "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0")
  }

  /// Lengths around the padding boundaries (55/56 bytes fit one final block or need two), with
  /// digests from Python's `hashlib` of bytes `(i * 7 + 3) & 0xff`.
  @Test(
    "pads every length around the block boundaries",
    arguments: [
      (55, "e7313d333c272e639f790978283f9eb392e843d0f29b7016828bb1daa4aac70b"),
      (56, "4324d65f3c103567f5589c710bc08f8523f929a9272e3af36fc968e52abc6c27"),
      (57, "35df609437dcfea3279283ab79fd554e2bf78f8f7ae2de532d8ee300b09e8f73"),
      (63, "81c80242132f230c3bd41b3e63bbcff16107339549214a99614ff26664625055"),
      (64, "39e3d7b6b5d075d37d053ad89b24b41bef4f3c29760c84447cab3f3be1882241"),
      (65, "aacca6ff74fdbb296d165a45cecfa04e5127bc008770fbbdd48006f2d2fae95e"),
      (119, "9ce7368e4daf32341631b492e80359dc9f594b48453cd0dd5bf0b19279cc177e"),
      (120, "7836b787757e95e58b3ca5aec90b1b004e8deba1e50e9675af9cabf1a13a04b5"),
      (127, "a8d23e75d936f303d248888d9b165ee543f4cbafcad3c9dd2a79bd84faa11d07"),
      (128, "d2742f1f4ac6bb7ca2b239ee18402ba8b3f9f8e652d2a72973c2b9ba11c08cf6"),
      (129, "307f8fc2c1622b92762e818d39a185d4d667ad49a4b07ceae1f4afa008a93ec4"),
    ])
  func boundaries(length: Int, expected: String) {
    let message = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ 3) }
    #expect(SHA256.hash(message).hexString == expected)
  }

  @Test("a digest round-trips through its hex string and bytes")
  func hexRoundTrip() throws {
    let digest = SHA256.hash(Array("abc".utf8))
    #expect(try #require(SHA256.Digest(hexString: digest.hexString)) == digest)
    #expect(digest.bytes.count == 32)
    let hex = digest.bytes.map { byte -> String in
      let digits = String(byte, radix: 16)
      return digits.count == 1 ? "0" + digits : digits
    }
    #expect(hex.joined() == digest.hexString)
  }

  @Test(
    "only 64 lowercase hex digits parse as a digest",
    arguments: [
      "", "abc", String(repeating: "a", count: 63), String(repeating: "a", count: 65),
      String(repeating: "A", count: 64), String(repeating: "g", count: 64), String(repeating: "a", count: 63) + "/",
      String(repeating: "a", count: 64) + ".tmp-0",
    ])
  func rejectsOtherNames(name: String) {
    #expect(SHA256.Digest(hexString: name) == nil)
  }
}
