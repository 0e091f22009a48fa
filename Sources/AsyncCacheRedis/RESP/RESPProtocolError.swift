/// Bytes from a server that are not the Redis protocol, or that exceed a limit: what was
/// wrong, and where.
///
/// The stream cannot be read past it (the next frame's start is unknown), so the connection
/// that produced it must be closed, never reused.
struct RESPProtocolError: Error, Hashable, Sendable, CustomStringConvertible {
  /// What was wrong.
  enum Problem: Hashable, Sendable {
    /// A value starts with a byte that is no RESP type.
    case unknownType(UInt8)
    /// A carriage return is followed by something other than a line feed.
    case missingLineFeed
    /// A line feed without the carriage return before it.
    case bareLineFeed
    /// A line (a header, a simple string or an error) longer than the limit.
    case lineTooLong(limit: Int)
    /// A bulk payload is not followed by CRLF.
    case missingTerminator
    /// An integer, length or count that is not a decimal number in range.
    case invalidInteger(String)
    /// A length or count below -1, or -1 where no null exists.
    case invalidLength(Int64)
    /// A bulk length over the limit.
    case bulkTooLong(Int64, limit: Int)
    /// An aggregate count over the limit.
    case tooManyElements(Int64, limit: Int)
    /// Aggregates nested deeper than the limit.
    case nestingTooDeep(limit: Int)
    /// A RESP3 boolean other than `t` or `f`.
    case invalidBoolean(String)
    /// A RESP3 double that does not parse.
    case invalidDouble(String)
    /// A RESP3 null with something on its line.
    case invalidNull(String)
    /// A RESP3 big number that is not an optionally signed run of digits.
    case invalidBigNumber(String)
    /// A RESP3 verbatim string without its `xxx:` format prefix.
    case invalidVerbatimString
    /// A simple string or error that is not UTF-8.
    case invalidText
  }

  /// What was wrong.
  let problem: Problem
  /// The offset in the stream (bytes read before this parser's buffer included) where the
  /// offending value or line starts.
  let offset: Int

  var description: String {
    let what =
      switch problem {
      case .unknownType(let byte): "unknown type byte 0x\(String(byte, radix: 16, uppercase: true))"
      case .missingLineFeed: "a carriage return not followed by a line feed"
      case .bareLineFeed: "a line feed without a carriage return"
      case .lineTooLong(let limit): "a line longer than \(limit) bytes"
      case .missingTerminator: "a bulk payload not followed by CRLF"
      case .invalidInteger(let text): "an invalid integer \"\(text)\""
      case .invalidLength(let length): "an invalid length \(length)"
      case .bulkTooLong(let length, let limit): "a bulk length of \(length) bytes, over the limit of \(limit)"
      case .tooManyElements(let count, let limit): "an aggregate of \(count) elements, over the limit of \(limit)"
      case .nestingTooDeep(let limit): "aggregates nested more than \(limit) deep"
      case .invalidBoolean(let text): "an invalid boolean \"\(text)\""
      case .invalidDouble(let text): "an invalid double \"\(text)\""
      case .invalidNull(let text): "a null with \"\(text)\" on its line"
      case .invalidBigNumber(let text): "an invalid big number \"\(text)\""
      case .invalidVerbatimString: "a verbatim string without its format prefix"
      case .invalidText: "a simple string or error that is not UTF-8"
      }
    return "Redis protocol error at byte \(offset): \(what)"
  }
}
