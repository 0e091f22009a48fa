import Testing

@testable import AsyncCacheRedis

@Suite("The single-flight scripts' replies, read once into types")
struct SingleFlightScriptsTests {
  typealias ClaimReply = SingleFlightScripts.ClaimReply

  static func bulk(_ text: String) -> RESPValue { .bulkString(Array(text.utf8)) }

  @Test("each answer of the claim script reads as what it means")
  func claimReplies() {
    let value = Self.bulk("stored bytes")
    #expect(ClaimReply(.array([.integer(1), value])) == .value(value))
    #expect(ClaimReply(.array([.integer(2), Self.bulk("41")])) == .granted(token: 41))
    #expect(ClaimReply(.array([.integer(2), .integer(41)])) == .granted(token: 41))
    #expect(
      ClaimReply(.array([.integer(3), Self.bulk("41 0123456789abcdef"), .integer(2_500)]))
        == .held(holder: 41, leaseLeft: 2_500))
    #expect(ClaimReply(.array([.integer(4)])) == .abandoned)
  }

  @Test(
    "a claim reply of another shape is no answer",
    arguments: [
      RESPValue.integer(1), .array(nil), .array([]), .array([.integer(1)]), .array([.integer(2), bulk("x")]),
      .array([.integer(2), .integer(-1)]), .array([.integer(3), bulk("41"), bulk("2500")]),
      .array([.integer(3), bulk("41")]), .array([.integer(5), bulk("41")]), .array([bulk("2"), bulk("41")]),
      .error("NOSCRIPT No matching script"),
    ])
  func otherClaimReplies(reply: RESPValue) {
    #expect(ClaimReply(reply) == nil)
  }

  @Test("the fill and renew scripts answer 1 or 0, and nothing else reads")
  func fillAndRenewReplies() {
    #expect(SingleFlightScripts.FillReply(.integer(1)) == .stored)
    #expect(SingleFlightScripts.FillReply(.integer(0)) == .refused)
    #expect(SingleFlightScripts.RenewReply(.integer(1)) == .renewed)
    #expect(SingleFlightScripts.RenewReply(.integer(0)) == .lost)
    for reply in [RESPValue.integer(2), .bulkString(Array("1".utf8)), .null, .error("ERR")] {
      #expect(SingleFlightScripts.FillReply(reply) == nil)
      #expect(SingleFlightScripts.RenewReply(reply) == nil)
    }
  }
}
