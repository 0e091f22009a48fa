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
    var writer = RESPCommandWriter(buffer: buffer, reservingCapacity: encodedCount)
    buffer = []  // The writer's copy is then the only one, and grows in place.
    writer.append(self)
    buffer = writer.bytes
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

  static func appendHeader(_ type: UInt8, _ count: Int, to buffer: inout [UInt8]) {
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

/// Commands written straight into their wire form, for the paths that send many keys: no array
/// per argument, one buffer for the lot.
struct RESPCommandWriter {
  /// The commands written so far.
  private(set) var bytes: [UInt8]
  /// How many commands were begun.
  private(set) var commandCount = 0

  init(buffer: [UInt8] = [], reservingCapacity capacity: Int = 0) {
    bytes = buffer
    bytes.reserveCapacity(bytes.count + capacity)
  }

  /// A writer holding `commands`, in order.
  init(_ commands: [RESPCommand]) {
    self.init(reservingCapacity: commands.reduce(0) { $0 + $1.encodedCount })
    for command in commands { append(command) }
  }

  /// Appends a whole command.
  mutating func append(_ command: RESPCommand) {
    beginCommand(argumentCount: command.arguments.count)
    for argument in command.arguments { self.argument(argument) }
  }

  /// Appends the commands of `other`.
  mutating func append(contentsOf other: RESPCommandWriter) {
    bytes.append(contentsOf: other.bytes)
    commandCount += other.commandCount
  }

  /// Starts a command of `argumentCount` arguments, its name included.
  mutating func beginCommand(argumentCount: Int) {
    RESPCommand.appendHeader(UInt8(ascii: "*"), argumentCount, to: &bytes)
    commandCount += 1
  }

  /// Appends one argument.
  mutating func argument(_ argument: some Collection<UInt8>) {
    RESPCommand.appendHeader(UInt8(ascii: "$"), argument.count, to: &bytes)
    bytes.append(contentsOf: argument)
    bytes.append(13)
    bytes.append(10)
  }

  /// Appends one argument made of `prefix` and the UTF-8 of `text`.
  mutating func argument(_ prefix: [UInt8], _ text: String) {
    var text = text
    text.withUTF8 { utf8 in
      RESPCommand.appendHeader(UInt8(ascii: "$"), prefix.count + utf8.count, to: &bytes)
      bytes.append(contentsOf: prefix)
      bytes.append(contentsOf: utf8)
    }
    bytes.append(13)
    bytes.append(10)
  }

  /// Appends one argument, the UTF-8 of a word such as a command's name.
  mutating func argument(_ word: StaticString) {
    word.withUTF8Buffer { argument($0) }
  }
}
