import Foundation

extension Trace {
  /// Reads a trace of the LIRS suite: text, one decimal key per line, every line one access.
  ///
  /// A line `*` is a checkpoint marker and is skipped, as are empty lines; surrounding spaces and a
  /// carriage return (`loop.trace` has CRLF endings) are trimmed. Keys are renumbered densely, in
  /// order of first access, like those of the `.lis` traces.
  ///
  /// - Parameters:
  ///   - path: The file to read.
  ///   - name: The trace's name in the report.
  ///   - summary: What the trace is, for the reader; the counts of accesses and keys are added.
  /// - Throws: ``TraceFileError`` naming the file, and for a malformed line its number.
  static func readLIRS(contentsOf path: String, name: String, summary: String) throws(TraceFileError) -> Trace {
    guard let data = FileManager.default.contents(atPath: path) else {
      throw TraceFileError(path: path, line: nil, problem: "cannot be read")
    }
    return try parseLIRS(data, path: path, name: name, summary: summary)
  }

  /// Parses the bytes of a LIRS trace; ``readLIRS(contentsOf:name:summary:)`` without the reading.
  ///
  /// - Parameter path: The file the bytes came from, for errors.
  static func parseLIRS(
    _ data: some DataProtocol & ContiguousBytes, path: String, name: String, summary: String
  ) throws(TraceFileError) -> Trace {
    var parser = LIRSParser(path: path)
    let parsed = data.withUnsafeBytes { bytes in
      Result { () throws(TraceFileError) in try parser.parse(bytes) }
    }
    try parsed.get()
    return Trace(
      name: name,
      summary: "\(summary); \(abbreviated(parser.keys.count)) accesses to \(abbreviated(parser.keyOf.count)) keys",
      keys: parser.keys,
      keySpace: parser.keyOf.count
    )
  }
}

/// The state of one pass over a LIRS trace.
private struct LIRSParser {
  let path: String
  /// The accesses so far, as dense keys.
  var keys: [Int32] = []
  /// The dense key of every key seen so far.
  var keyOf: [UInt64: Int32] = [:]

  init(path: String) {
    self.path = path
  }

  /// What a line holds so far.
  private enum Line {
    case empty
    case number(UInt64)
    case marker
  }

  mutating func parse(_ bytes: UnsafeRawBufferPointer) throws(TraceFileError) {
    keys.reserveCapacity(bytes.count / 4)
    var line = Line.empty
    // Spaces after the content: anything but more spaces is malformed then.
    var ended = false
    var number = 1
    for byte in bytes {
      switch byte {
      case UInt8(ascii: "\n"):
        try endLine(line, number)
        line = .empty
        ended = false
        number += 1
      case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r"):
        if case .empty = line {} else { ended = true }
      case UInt8(ascii: "0")...UInt8(ascii: "9"):
        let digit = UInt64(byte &- UInt8(ascii: "0"))
        switch line {
        case .empty where !ended:
          line = .number(digit)
        case .number(let value) where !ended:
          let (shifted, overflow) = value.multipliedReportingOverflow(by: 10)
          let (sum, carry) = shifted.addingReportingOverflow(digit)
          guard !overflow, !carry else { throw malformed(number, "has a number too large for 64 bits") }
          line = .number(sum)
        default:
          throw malformed(number, "has more than one key")
        }
      case UInt8(ascii: "*"):
        guard case .empty = line else { throw malformed(number, "has '*' after a key") }
        line = .marker
        ended = true
      default:
        let shown = (0x21...0x7E).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : "byte \(byte)"
        throw malformed(number, "has \(shown), where only one decimal key (or '*') belongs")
      }
    }
    // A last line without a newline.
    try endLine(line, number)
  }

  /// Appends the access of a complete line; an empty line and a marker have none.
  private mutating func endLine(_ line: Line, _ number: Int) throws(TraceFileError) {
    guard case .number(let key) = line else { return }
    guard keys.count < Int(Int32.max) else { throw malformed(number, "brings the trace past 2^31 accesses") }
    if let dense = keyOf[key] {
      keys.append(dense)
    } else {
      let dense = Int32(truncatingIfNeeded: keyOf.count)
      keyOf[key] = dense
      keys.append(dense)
    }
  }

  private func malformed(_ line: Int, _ problem: String) -> TraceFileError {
    TraceFileError(path: path, line: line, problem: problem)
  }
}
