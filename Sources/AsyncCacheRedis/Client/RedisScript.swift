/// A Lua script run on the server, atomically: sent as `EVALSHA <sha1>` and, when the server
/// does not know it yet (`NOSCRIPT`: a new or restarted server, or `SCRIPT FLUSH`), as `EVAL`
/// with its text, which also loads it.
struct RedisScript: Sendable {
  let source: String
  /// The script's SHA-1, in lowercase hexadecimal: what `EVALSHA` names it by.
  let sha1: [UInt8]

  init(_ source: String) {
    self.source = source
    self.sha1 = Array(SHA1.hexDigest(of: Array(source.utf8)).utf8)
  }

  /// Appends `EVALSHA <sha1> <keys.count> keys… arguments…` to `writer`.
  func appendEvalSHA(keys: [[UInt8]], arguments: [[UInt8]], to writer: inout RESPCommandWriter) {
    writer.beginCommand(argumentCount: 3 + keys.count + arguments.count)
    writer.argument("EVALSHA")
    writer.argument(sha1)
    writer.argument(String(keys.count).utf8)
    for key in keys { writer.argument(key) }
    for argument in arguments { writer.argument(argument) }
  }

  /// Appends `EVAL <source> <keys.count> keys… arguments…` to `writer`.
  func appendEval(keys: [[UInt8]], arguments: [[UInt8]], to writer: inout RESPCommandWriter) {
    writer.beginCommand(argumentCount: 3 + keys.count + arguments.count)
    writer.argument("EVAL")
    writer.argument(source.utf8)
    writer.argument(String(keys.count).utf8)
    for key in keys { writer.argument(key) }
    for argument in arguments { writer.argument(argument) }
  }
}

/// SHA-1 (FIPS 180-4), for the names of scripts only: not for anything that needs a secure hash.
enum SHA1 {
  static func hexDigest(of message: [UInt8]) -> String {
    var h: (UInt32, UInt32, UInt32, UInt32, UInt32) = (0x6745_2301, 0xEFCD_AB89, 0x98BA_DCFE, 0x1032_5476, 0xC3D2_E1F0)
    var padded = message
    padded.append(0x80)
    while padded.count % 64 != 56 { padded.append(0) }
    let bitLength = UInt64(message.count) &* 8
    for shift in stride(from: 56, through: 0, by: -8) { padded.append(UInt8(truncatingIfNeeded: bitLength >> shift)) }
    var w = [UInt32](repeating: 0, count: 80)
    for chunk in stride(from: 0, to: padded.count, by: 64) {
      for i in 0..<16 {
        let j = chunk + i * 4
        w[i] =
          UInt32(padded[j]) << 24 | UInt32(padded[j + 1]) << 16 | UInt32(padded[j + 2]) << 8 | UInt32(padded[j + 3])
      }
      for i in 16..<80 {
        let x = w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]
        w[i] = x << 1 | x >> 31
      }
      var (a, b, c, d, e) = h
      for i in 0..<80 {
        let (f, k): (UInt32, UInt32) =
          switch i {
          case 0..<20: ((b & c) | (~b & d), 0x5A82_7999)
          case 20..<40: (b ^ c ^ d, 0x6ED9_EBA1)
          case 40..<60: ((b & c) | (b & d) | (c & d), 0x8F1B_BCDC)
          default: (b ^ c ^ d, 0xCA62_C1D6)
          }
        let temp = (a << 5 | a >> 27) &+ f &+ e &+ k &+ w[i]
        e = d
        d = c
        c = b << 30 | b >> 2
        b = a
        a = temp
      }
      h = (h.0 &+ a, h.1 &+ b, h.2 &+ c, h.3 &+ d, h.4 &+ e)
    }
    let digits = Array("0123456789abcdef".utf8)
    var hex: [UInt8] = []
    for word in [h.0, h.1, h.2, h.3, h.4] {
      for shift in stride(from: 28, through: 0, by: -4) { hex.append(digits[Int(word >> UInt32(shift) & 0xF)]) }
    }
    return String(decoding: hex, as: UTF8.self)
  }
}

extension ClusterSlot {
  /// A short hash tag (letters and digits) for every slot: `{tag}` puts a key in that slot.
  static let tags: [String] = {
    var tags = [String?](repeating: nil, count: count)
    var missing = count
    let alphabet = Array("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ".utf8)
    var number = 0
    while missing > 0 {
      var digits: [UInt8] = []
      var rest = number
      repeat {
        digits.append(alphabet[rest % alphabet.count])
        rest /= alphabet.count
      } while rest > 0
      let slot = Int(of(digits))
      if tags[slot] == nil {
        tags[slot] = String(decoding: digits, as: UTF8.self)
        missing -= 1
      }
      number += 1
    }
    return tags.map { $0! }
  }()
}
