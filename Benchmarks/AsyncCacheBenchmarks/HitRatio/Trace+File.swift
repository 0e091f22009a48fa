import Foundation

extension Trace {
  /// Reads a block-I/O trace in the `.lis` format of the ARC paper's traces: one request per
  /// line, `start count ignored requestNumber` in decimal, each request one access to every block
  /// of `start ..< start + count`.
  ///
  /// Block numbers are renumbered densely, in order of first access, so that the trace's keys
  /// are `0..<keySpace` like those of the generated traces. The file is read whole as bytes and
  /// parsed in one pass: no `String` per line (P3 has 239k lines and 3.9M accesses).
  ///
  /// - Parameters:
  ///   - path: The file to read.
  ///   - name: The trace's name in the report.
  ///   - summary: What the trace is, for the reader; the counts of accesses and blocks are added.
  /// - Throws: ``TraceFileError`` naming the file, and for a malformed line its number.
  static func read(contentsOf path: String, name: String, summary: String) throws(TraceFileError) -> Trace {
    guard let data = FileManager.default.contents(atPath: path) else {
      throw TraceFileError(path: path, line: nil, problem: "cannot be read")
    }
    return try parse(data, path: path, name: name, summary: summary)
  }

  /// Parses the bytes of a `.lis` file; ``read(contentsOf:name:summary:)`` without the reading.
  ///
  /// - Parameter path: The file the bytes came from, for errors.
  static func parse(
    _ data: some DataProtocol & ContiguousBytes, path: String, name: String, summary: String
  ) throws(TraceFileError) -> Trace {
    var parser = LisParser(path: path)
    let parsed = data.withUnsafeBytes { bytes in
      Result { () throws(TraceFileError) in try parser.parse(bytes) }
    }
    try parsed.get()
    return Trace(
      name: name,
      summary:
        "\(summary); \(abbreviated(parser.keys.count)) accesses to \(abbreviated(parser.keyOfBlock.count)) blocks",
      keys: parser.keys,
      keySpace: parser.keyOfBlock.count
    )
  }
}

/// A trace file that cannot be read, or a line of it that is not `start count ignored requestNumber`.
struct TraceFileError: Error, CustomStringConvertible {
  /// The file.
  var path: String
  /// The 1-based number of the malformed line; `nil` when the file as a whole is at fault.
  var line: Int?
  /// What is wrong, e.g. `has 3 fields, not 4`.
  var problem: String

  var description: String {
    if let line { "\(path), line \(line): \(problem)" } else { "\(path): \(problem)" }
  }
}

/// The state of one pass over a `.lis` file.
private struct LisParser {
  let path: String
  /// The accesses so far, as dense keys.
  var keys: [Int32] = []
  /// The dense key of every block seen so far.
  var keyOfBlock: [UInt64: Int32] = [:]

  init(path: String) {
    self.path = path
  }

  mutating func parse(_ bytes: UnsafeRawBufferPointer) throws(TraceFileError) {
    // About 19 bytes per line in OLTP and P3; one access per line at least.
    keys.reserveCapacity(bytes.count / 4)
    keyOfBlock.reserveCapacity(bytes.count / 16)
    var fields: (UInt64, UInt64) = (0, 0)
    var fieldCount = 0
    var inField = false
    var value: UInt64 = 0
    var line = 1
    for byte in bytes {
      switch byte {
      case UInt8(ascii: "0")...UInt8(ascii: "9"):
        let (shifted, overflow) = value.multipliedReportingOverflow(by: 10)
        let (sum, carry) = shifted.addingReportingOverflow(UInt64(byte &- UInt8(ascii: "0")))
        guard !overflow, !carry else { throw malformed(line, "has a number too large for 64 bits") }
        value = sum
        inField = true
      case UInt8(ascii: " "), UInt8(ascii: "\t"), UInt8(ascii: "\r"), UInt8(ascii: "\n"):
        if inField {
          switch fieldCount {
          case 0: fields.0 = value
          case 1: fields.1 = value
          default: break
          }
          fieldCount += 1
          inField = false
          value = 0
        }
        if byte == UInt8(ascii: "\n") {
          try endLine(line, fields: fields, fieldCount: fieldCount)
          fieldCount = 0
          line += 1
        }
      default:
        let shown = (0x21...0x7E).contains(byte) ? "'\(Character(Unicode.Scalar(byte)))'" : "byte \(byte)"
        throw malformed(line, "has \(shown), where only decimal numbers and spaces belong")
      }
    }
    // A last line without a newline.
    if inField {
      if fieldCount == 0 { fields.0 = value } else if fieldCount == 1 { fields.1 = value }
      fieldCount += 1
    }
    try endLine(line, fields: fields, fieldCount: fieldCount)
  }

  /// Appends the accesses of a complete line; a blank line has none.
  private mutating func endLine(_ line: Int, fields: (UInt64, UInt64), fieldCount: Int) throws(TraceFileError) {
    guard fieldCount != 0 else { return }
    guard fieldCount == 4 else {
      throw malformed(
        line, "has \(fieldCount) field\(fieldCount == 1 ? "" : "s"), not 4 (start count ignored requestNumber)")
    }
    let (start, count) = fields
    guard count <= UInt64(Int32.max) - UInt64(keys.count) else {
      throw malformed(line, "brings the trace past 2^31 accesses")
    }
    guard start <= UInt64.max - count else { throw malformed(line, "reads blocks past 2^64") }
    for block in start..<(start + count) {
      if let key = keyOfBlock[block] {
        keys.append(key)
      } else {
        let key = Int32(truncatingIfNeeded: keyOfBlock.count)
        keyOfBlock[block] = key
        keys.append(key)
      }
    }
  }

  private func malformed(_ line: Int, _ problem: String) -> TraceFileError {
    TraceFileError(path: path, line: line, problem: problem)
  }
}
