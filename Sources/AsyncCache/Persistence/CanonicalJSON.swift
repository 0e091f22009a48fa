/// The JSON text that `JSONEncoder` (with `.sortedKeys`) writes for a value, in the form it
/// would have had if every string in the value had been in Unicode Normalization Form C: how
/// ``CacheKeyEncoding/json`` makes keys that Swift calls equal encode to the same bytes.
///
/// Normalizing the text is not enough on its own. `JSONEncoder` sorts an object's members by
/// their names as it finds them, and two names spelt differently sort differently: the members
/// of `["e\u{301}": 1, "f": 2]` come out in another order than those of `["\u{E9}": 1, "f": 2]`,
/// although the two dictionaries are equal. So when normalizing changes the text, each object's
/// members are sorted again by their normalized names, the way `JSONEncoder` sorts (Swift's `<`
/// on the names: the order of their Unicode scalars). Text already in NFC is returned as it is,
/// as `JSONEncoder` wrote it.
enum CanonicalJSON {
  /// `text` (JSON written by `JSONEncoder` with `.sortedKeys`) with every string in NFC and
  /// every object's members in the order of their normalized names. O(n) when `text` is in NFC
  /// already; otherwise one parse of it, and a sort of each object's members.
  static func normalized(_ text: String) -> String {
    // Not JSON (no JSONEncoder output is): the normalized text as it is.
    guard let normalized = normalizingStrings(text) else { return text.nfcNormalized }
    // Unchanged, it is what JSONEncoder wrote for strings in NFC: sorted as it sorts.
    guard normalized.utf8.count != text.utf8.count || !normalized.utf8.elementsEqual(text.utf8) else { return text }
    var parser = Parser(bytes: Array(normalized.utf8))
    // Not JSON this parser reads (no JSONEncoder output is): the normalized text as it is.
    guard let value = parser.value(), parser.isAtEnd else { return normalized }
    var output: [UInt8] = []
    output.reserveCapacity(normalized.utf8.count)
    value.write(to: &output)
    return String(decoding: output, as: UTF8.self)
  }

  /// `text` with the characters of its strings in NFC, each run between two escapes normalized
  /// on its own: the text as `JSONEncoder` would have written the strings' NFC forms.
  ///
  /// Normalizing the whole text would be wrong: an escape's letter is a character of the text,
  /// and would compose with a combining mark that follows it (`\n` and U+0303 would become `\ñ`,
  /// which is not JSON). The characters `JSONEncoder` escapes (quote, backslash, slash, the
  /// controls) are starters that compose with nothing, so each run normalizes as it would in
  /// the string's value. Outside strings, JSON has only ASCII, which is in NFC: `nil` for text
  /// with other characters there, which is not JSON.
  private static func normalizingStrings(_ text: String) -> String? {
    // ASCII is in NFC, and most keys are ASCII.
    guard text.utf8.contains(where: { $0 >= 0x80 }) else { return text }
    let bytes = Array(text.utf8)
    var output: [UInt8] = []
    output.reserveCapacity(bytes.count)
    var index = 0
    var isInString = false
    var runStart: Int?
    func endRun(at end: Int) {
      guard let start = runStart else { return }
      output += String(decoding: bytes[start..<end], as: UTF8.self).nfcNormalized.utf8
      runStart = nil
    }
    while index < bytes.count {
      let byte = bytes[index]
      guard isInString else {
        guard byte < 0x80 else { return nil }
        output.append(byte)
        isInString = byte == UInt8(ascii: "\"")
        index += 1
        continue
      }
      switch byte {
      case UInt8(ascii: "\""):
        endRun(at: index)
        output.append(byte)
        isInString = false
        index += 1
      case UInt8(ascii: "\\"):
        // `\X`, or `\uXXXX`: copied as it is.
        endRun(at: index)
        let length = index + 1 < bytes.count && bytes[index + 1] == UInt8(ascii: "u") ? 6 : 2
        let end = min(index + length, bytes.count)
        output += bytes[index..<end]
        index = end
      default:
        // UTF-8 continuation bytes are never a quote or a backslash.
        if runStart == nil { runStart = index }
        index += 1
      }
    }
    endRun(at: bytes.count)
    return String(decoding: output, as: UTF8.self)
  }

  /// A JSON value, holding the bytes of its tokens as they were written.
  private indirect enum Node {
    /// A string, number, `true`, `false` or `null`: its bytes.
    case token(ArraySlice<UInt8>)
    case array([Node])
    /// Members with their names decoded (to sort by) and as written.
    case object([(name: String, token: ArraySlice<UInt8>, value: Node)])

    func write(to output: inout [UInt8]) {
      switch self {
      case .token(let bytes):
        output += bytes
      case .array(let elements):
        output.append(UInt8(ascii: "["))
        for (index, element) in elements.enumerated() {
          if index > 0 { output.append(UInt8(ascii: ",")) }
          element.write(to: &output)
        }
        output.append(UInt8(ascii: "]"))
      case .object(let members):
        output.append(UInt8(ascii: "{"))
        for (index, member) in members.sorted(by: { $0.name < $1.name }).enumerated() {
          if index > 0 { output.append(UInt8(ascii: ",")) }
          output += member.token
          output.append(UInt8(ascii: ":"))
          member.value.write(to: &output)
        }
        output.append(UInt8(ascii: "}"))
      }
    }
  }

  /// Reads compact JSON (no whitespace between tokens, as `JSONEncoder` writes it without
  /// `.prettyPrinted`; whitespace is skipped all the same). Returns `nil` for anything else.
  private struct Parser {
    let bytes: [UInt8]
    var position = 0
    /// Nesting depth, bounded so that hostile text cannot exhaust the stack.
    var depth = 0

    init(bytes: [UInt8]) {
      self.bytes = bytes
    }

    var isAtEnd: Bool {
      mutating get {
        skipWhitespace()
        return position == bytes.count
      }
    }

    mutating func skipWhitespace() {
      while position < bytes.count, [0x20, 0x09, 0x0A, 0x0D].contains(bytes[position]) { position += 1 }
    }

    mutating func value() -> Node? {
      skipWhitespace()
      guard position < bytes.count, depth < 512 else { return nil }
      switch bytes[position] {
      case UInt8(ascii: "{"):
        depth += 1
        defer { depth -= 1 }
        return object()
      case UInt8(ascii: "["):
        depth += 1
        defer { depth -= 1 }
        return array()
      case UInt8(ascii: "\""):
        return string().map { .token($0.token) }
      default:
        // A number, `true`, `false` or `null`: up to the next delimiter.
        let start = position
        while position < bytes.count,
          ![UInt8(ascii: ","), UInt8(ascii: "]"), UInt8(ascii: "}"), 0x20, 0x09, 0x0A, 0x0D]
            .contains(bytes[position])
        {
          position += 1
        }
        return position > start ? .token(bytes[start..<position]) : nil
      }
    }

    mutating func array() -> Node? {
      position += 1  // [
      var elements: [Node] = []
      skipWhitespace()
      if position < bytes.count, bytes[position] == UInt8(ascii: "]") {
        position += 1
        return .array(elements)
      }
      while true {
        guard let element = value() else { return nil }
        elements.append(element)
        skipWhitespace()
        guard position < bytes.count else { return nil }
        position += 1
        switch bytes[position - 1] {
        case UInt8(ascii: ","): continue
        case UInt8(ascii: "]"): return .array(elements)
        default: return nil
        }
      }
    }

    mutating func object() -> Node? {
      position += 1  // {
      var members: [(name: String, token: ArraySlice<UInt8>, value: Node)] = []
      skipWhitespace()
      if position < bytes.count, bytes[position] == UInt8(ascii: "}") {
        position += 1
        return .object(members)
      }
      while true {
        skipWhitespace()
        guard position < bytes.count, bytes[position] == UInt8(ascii: "\""), let name = string() else { return nil }
        skipWhitespace()
        guard position < bytes.count, bytes[position] == UInt8(ascii: ":") else { return nil }
        position += 1
        guard let value = value() else { return nil }
        members.append((name.value, name.token, value))
        skipWhitespace()
        guard position < bytes.count else { return nil }
        position += 1
        switch bytes[position - 1] {
        case UInt8(ascii: ","): continue
        case UInt8(ascii: "}"): return .object(members)
        default: return nil
        }
      }
    }

    /// A string token at `position` (its opening quote): its decoded value and its bytes.
    mutating func string() -> (value: String, token: ArraySlice<UInt8>)? {
      let start = position
      position += 1
      var decoded: [UInt8] = []
      var pendingHighSurrogate: UInt32?
      while position < bytes.count {
        let byte = bytes[position]
        position += 1
        if byte == UInt8(ascii: "\"") {
          guard pendingHighSurrogate == nil else { return nil }
          return (String(decoding: decoded, as: UTF8.self), bytes[start..<position])
        }
        guard byte == UInt8(ascii: "\\") else {
          guard pendingHighSurrogate == nil else { return nil }
          decoded.append(byte)
          continue
        }
        guard position < bytes.count else { return nil }
        let escape = bytes[position]
        position += 1
        if escape != UInt8(ascii: "u") {
          guard pendingHighSurrogate == nil else { return nil }
          let character: UInt8? =
            switch escape {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): escape
            case UInt8(ascii: "b"): 0x08
            case UInt8(ascii: "f"): 0x0C
            case UInt8(ascii: "n"): 0x0A
            case UInt8(ascii: "r"): 0x0D
            case UInt8(ascii: "t"): 0x09
            default: nil
            }
          guard let character else { return nil }
          decoded.append(character)
          continue
        }
        guard position + 4 <= bytes.count,
          let unit = UInt32(String(decoding: bytes[position..<position + 4], as: UTF8.self), radix: 16)
        else { return nil }
        position += 4
        let scalarValue: UInt32
        if let high = pendingHighSurrogate {
          guard (0xDC00...0xDFFF).contains(unit) else { return nil }
          pendingHighSurrogate = nil
          scalarValue = 0x10000 + ((high - 0xD800) << 10) + (unit - 0xDC00)
        } else if (0xD800...0xDBFF).contains(unit) {
          pendingHighSurrogate = unit
          continue
        } else {
          scalarValue = unit
        }
        guard let scalar = Unicode.Scalar(scalarValue) else { return nil }
        decoded += Array(String(Character(scalar)).utf8)
      }
      return nil
    }
  }
}
