/// A command to a Redis server: its name and arguments, sent as an array of bulk strings
/// (the only form a server must accept), so that an argument may hold any byte.
struct RESPCommand: Hashable, Sendable {
  /// The name, then the arguments.
  var arguments: [[UInt8]]

  /// A command from its name and arguments as bytes.
  init(_ arguments: [[UInt8]]) {
    self.arguments = arguments
  }

  /// A command from words (`RESPCommand("GET", "user:42")`), each sent as its UTF-8 bytes.
  init(_ words: String...) {
    arguments = words.map { Array($0.utf8) }
  }

  /// The number of bytes ``encode(into:)`` appends.
  var encodedCount: Int {
    arguments.reduce(Self.headerCount(arguments.count)) { $0 + Self.headerCount($1.count) + $1.count + 2 }
  }

  /// Appends the command's bytes to `buffer`: `*<count>\r\n`, then `$<length>\r\n<bytes>\r\n`
  /// for each argument.
  func encode(into buffer: inout [UInt8]) {
    buffer.reserveCapacity(buffer.count + encodedCount)
    Self.appendHeader(UInt8(ascii: "*"), arguments.count, to: &buffer)
    for argument in arguments {
      Self.appendHeader(UInt8(ascii: "$"), argument.count, to: &buffer)
      buffer.append(contentsOf: argument)
      buffer.append(13)
      buffer.append(10)
    }
  }

  /// The command's bytes.
  var encoded: [UInt8] {
    var buffer: [UInt8] = []
    encode(into: &buffer)
    return buffer
  }

  /// The length of `<type><count>\r\n`.
  private static func headerCount(_ count: Int) -> Int {
    var digits = 1
    var rest = count / 10
    while rest > 0 {
      digits += 1
      rest /= 10
    }
    return digits + 3
  }

  private static func appendHeader(_ type: UInt8, _ count: Int, to buffer: inout [UInt8]) {
    buffer.append(type)
    // Digits of a non-negative count, most significant first, without a String.
    var divisor = 1
    while divisor <= count / 10 { divisor *= 10 }
    var rest = count
    while divisor > 0 {
      buffer.append(UInt8(ascii: "0") + UInt8(rest / divisor))
      rest %= divisor
      divisor /= 10
    }
    buffer.append(13)
    buffer.append(10)
  }
}
