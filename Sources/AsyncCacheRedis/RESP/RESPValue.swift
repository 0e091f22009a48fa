/// One value of the Redis serialization protocol: a reply, or an element of one.
///
/// Covers RESP2 (simple strings, errors, integers, bulk strings, arrays, and their nulls) and
/// the RESP3 types a client meets once it says `HELLO 3` (null, booleans, doubles, big numbers,
/// bulk errors, verbatim strings, maps, sets and pushes). RESP3 attributes are read and
/// dropped: they annotate the value that follows, which is what a reply is.
enum RESPValue: Hashable, Sendable {
  /// `+OK`: a short text without CR or LF.
  case simpleString(String)
  /// `-ERR ...`: an error reply, with its code and message (`MOVED 3999 127.0.0.1:6381`).
  case error(String)
  /// `:42`
  case integer(Int64)
  /// `$3\r\nabc`, binary-safe; `nil` for RESP2's null bulk string (`$-1`).
  case bulkString([UInt8]?)
  /// `*2 ...`; `nil` for RESP2's null array (`*-1`).
  case array([RESPValue]?)
  /// RESP3 `_`.
  case null
  /// RESP3 `#t` or `#f`.
  case boolean(Bool)
  /// RESP3 `,3.14` (also `inf`, `-inf` and `nan`).
  case double(Double)
  /// RESP3 `(3492890328409238509324850943850943825024385`: the digits, with their sign.
  case bigNumber(String)
  /// RESP3 `!21\r\nSYNTAX invalid syntax`: an error reply that may hold any byte.
  case bulkError([UInt8])
  /// RESP3 `=15\r\ntxt:Some string`: a string with a three-letter format (`txt`, `mkd`).
  case verbatimString(format: String, text: [UInt8])
  /// RESP3 `%2 ...`: key-value pairs, in the order sent.
  case map([RESPPair])
  /// RESP3 `~3 ...`
  case set([RESPValue])
  /// RESP3 `>3 ...`: an out-of-band message (pub/sub, client-side caching invalidation).
  case push([RESPValue])

  /// Whether this is an error reply (`-...` or `!...`).
  var isError: Bool {
    switch self {
    case .error, .bulkError: true
    default: false
    }
  }
}

/// A key and its value in a RESP3 map.
struct RESPPair: Hashable, Sendable {
  var key: RESPValue
  var value: RESPValue
}
