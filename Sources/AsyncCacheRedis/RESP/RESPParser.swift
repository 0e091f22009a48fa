/// Reads the values of a Redis protocol stream (RESP2 and RESP3) from its bytes as they
/// arrive, in any pieces.
///
/// ``append(_:)`` what the socket read, then call ``next()`` until it returns `nil` (the rest
/// of a value has not arrived yet). A value split anywhere, even inside a CRLF, is returned once
/// all of it is here. Bulk payloads are binary: they may contain CR and LF.
///
/// Bytes that are not the protocol, or that exceed ``Limits``, throw a
/// ``RESPProtocolError`` naming the problem and its offset in the stream; after one, every
/// call throws it again, since the start of the next value is unknown. Limits bound what a
/// hostile or broken server can make the client hold: a line, a bulk payload, the elements
/// of an aggregate, and the nesting depth (so parsing never recurses without bound). Memory
/// for an aggregate is reserved only as its elements could fit in the bytes received.
///
/// Not thread-safe: owned by one connection. A value is parsed again from its start when more
/// of it arrives, but a call returns at once while fewer bytes are buffered than the value is
/// known to need (a large bulk payload is not rescanned for each piece of it).
struct RESPParser {
  /// The largest values the parser accepts.
  struct Limits: Hashable, Sendable {
    /// The longest bulk payload, in bytes. Default 512 MiB, Redis's own `proto-max-bulk-len`.
    var maximumBulkLength = 512 * 1024 * 1024
    /// The most elements in one aggregate (a map counts its keys and values). Default 2^24.
    var maximumElementCount = 1 << 24
    /// The longest line (a header, a simple string or an error), in bytes. Default 64 KiB.
    var maximumLineLength = 64 * 1024
    /// The deepest nesting of aggregates. Default 64.
    var maximumDepth = 64
  }

  let limits: Limits
  private var buffer: [UInt8] = []
  /// Where the next value starts in ``buffer``.
  private var readIndex = 0
  /// Bytes of the stream dropped from the front of ``buffer``: offsets in errors count them.
  private var discarded = 0
  /// How many bytes ``buffer`` must hold before the value at ``readIndex`` can be complete.
  private var bytesNeeded = 0
  /// The error that ended the stream.
  private var failure: RESPProtocolError?

  init(limits: Limits = Limits()) {
    self.limits = limits
  }

  /// The bytes received and not yet returned as values.
  var bufferedByteCount: Int { buffer.count - readIndex }

  /// Adds bytes read from the stream.
  mutating func append(_ bytes: UnsafeRawBufferPointer) {
    buffer.append(contentsOf: bytes)
  }

  /// Adds bytes read from the stream.
  mutating func append(contentsOf bytes: some Sequence<UInt8>) {
    buffer.append(contentsOf: bytes)
  }

  /// Reads the values in `bytes`, the next piece of the stream, and passes each to `body` (which
  /// returns `false` to stop: the rest is then dropped). The same values as ``append(_:)`` and
  /// ``next()`` until `nil`, but when nothing is buffered, the values that `bytes` holds whole are
  /// read from it in place: only the start of an incomplete one is copied, to wait for the rest.
  ///
  /// - Returns: `false` when `body` stopped.
  /// - Throws: See ``next()``.
  mutating func consume(
    _ bytes: UnsafeRawBufferPointer, _ body: (RESPValue) -> Bool
  ) throws(RESPProtocolError) -> Bool {
    guard failure == nil, buffer.count == readIndex, buffer.isEmpty else {
      append(bytes)
      while let value = try next() {
        guard body(value) else { return false }
      }
      return true
    }
    let input = bytes.assumingMemoryBound(to: UInt8.self)
    var index = 0
    while index < input.count {
      var reader = RESPReader(bytes: input, limits: limits, streamOffset: discarded)
      let parsed: RESPReader.Parsed
      do {
        parsed = try reader.value(at: index, depth: 0)
      } catch {
        failure = error
        throw error
      }
      switch parsed {
      case .complete(let value, let end):
        index = end
        guard body(value) else { return false }
      case .incomplete(let needed):
        buffer.append(contentsOf: UnsafeBufferPointer(rebasing: input[index...]))
        discarded += index
        bytesNeeded = needed - index
        return true
      }
    }
    discarded += index
    return true
  }

  /// The next complete value, or `nil` until more bytes arrive.
  ///
  /// - Throws: ``RESPProtocolError`` for bytes that are not the protocol or exceed a limit,
  ///   and from then on at every call.
  mutating func next() throws(RESPProtocolError) -> RESPValue? {
    if let failure { throw failure }
    guard buffer.count > readIndex, buffer.count >= bytesNeeded else { return nil }
    let parsed: RESPReader.Parsed
    do {
      parsed = try buffer.withUnsafeBufferPointer { bytes throws(RESPProtocolError) in
        var reader = RESPReader(bytes: bytes, limits: limits, streamOffset: discarded)
        return try reader.value(at: readIndex, depth: 0)
      }
    } catch {
      failure = error
      throw error
    }
    switch parsed {
    case .incomplete(let needed):
      bytesNeeded = needed
      return nil
    case .complete(let value, let end):
      readIndex = end
      bytesNeeded = 0
      compact()
      return value
    }
  }

  /// Drops consumed bytes: all of them when the buffer is used up, or the front half when
  /// most of it was read, so that a stream of replies does not grow the buffer.
  private mutating func compact() {
    if readIndex == buffer.count {
      discarded += readIndex
      buffer.removeAll(keepingCapacity: true)
      readIndex = 0
    } else if readIndex >= 4096, readIndex * 2 >= buffer.count {
      discarded += readIndex
      buffer.removeSubrange(0..<readIndex)
      readIndex = 0
    }
  }
}

/// One pass of ``RESPParser`` over its buffer.
private struct RESPReader {
  /// A value read, or how many bytes the buffer must hold before it can be.
  enum Parsed {
    case complete(RESPValue, end: Int)
    case incomplete(needed: Int)
  }

  let bytes: UnsafeBufferPointer<UInt8>
  let limits: RESPParser.Limits
  /// The stream offset of `bytes[0]`.
  let streamOffset: Int

  /// Whether a value may start with `byte`.
  static func isType(_ byte: UInt8) -> Bool {
    switch byte {
    case UInt8(ascii: "+"), UInt8(ascii: "-"), UInt8(ascii: ":"), UInt8(ascii: "$"), UInt8(ascii: "*"),
      UInt8(ascii: "_"), UInt8(ascii: "#"), UInt8(ascii: ","), UInt8(ascii: "("), UInt8(ascii: "!"),
      UInt8(ascii: "="), UInt8(ascii: "%"), UInt8(ascii: "~"), UInt8(ascii: ">"), UInt8(ascii: "|"):
      true
    default: false
    }
  }

  static var carriageReturn: UInt8 { 13 }
  static var lineFeed: UInt8 { 10 }

  func failure(_ problem: RESPProtocolError.Problem, at index: Int) -> RESPProtocolError {
    RESPProtocolError(problem: problem, offset: streamOffset + index)
  }

  /// The line of the value at `valueStart`, after its type byte: the index of its CR and the
  /// index after its LF, or `nil` when its end has not arrived.
  func line(of valueStart: Int) throws(RESPProtocolError) -> (end: Int, next: Int)? {
    let start = valueStart + 1
    var index = start
    let limit = Swift.min(bytes.count, start + limits.maximumLineLength + 1)
    while index < limit {
      let byte = bytes[index]
      if byte == Self.carriageReturn {
        guard index + 1 < bytes.count else { return nil }
        guard bytes[index + 1] == Self.lineFeed else { throw failure(.missingLineFeed, at: index) }
        return (index, index + 2)
      }
      if byte == Self.lineFeed { throw failure(.bareLineFeed, at: index) }
      index += 1
    }
    if index - start > limits.maximumLineLength {
      throw failure(.lineTooLong(limit: limits.maximumLineLength), at: valueStart)
    }
    return nil
  }

  func text(_ range: Range<Int>) -> String {
    String(decoding: UnsafeBufferPointer(rebasing: bytes[range]), as: UTF8.self)
  }

  /// The decimal integer in `range` (an optional sign, then at least one digit), on the line
  /// of the value at `valueStart`.
  func integer(_ range: Range<Int>, of valueStart: Int) throws(RESPProtocolError) -> Int64 {
    var index = range.lowerBound
    var negative = false
    if index < range.upperBound, bytes[index] == UInt8(ascii: "-") || bytes[index] == UInt8(ascii: "+") {
      negative = bytes[index] == UInt8(ascii: "-")
      index += 1
    }
    guard index < range.upperBound else { throw failure(.invalidInteger(text(range)), at: valueStart) }
    var value: Int64 = 0
    while index < range.upperBound {
      let digit = Int64(bytes[index]) - Int64(UInt8(ascii: "0"))
      guard digit >= 0, digit <= 9 else { throw failure(.invalidInteger(text(range)), at: valueStart) }
      // Accumulated negatively, so that Int64.min fits.
      let (shifted, overflowMultiplying) = value.multipliedReportingOverflow(by: 10)
      let (next, overflowSubtracting) = shifted.subtractingReportingOverflow(digit)
      guard !overflowMultiplying, !overflowSubtracting else {
        throw failure(.invalidInteger(text(range)), at: valueStart)
      }
      value = next
      index += 1
    }
    if negative { return value }
    guard value != .min else { throw failure(.invalidInteger(text(range)), at: valueStart) }
    return -value
  }

  /// Reads the value that starts at `start`, nested `depth` aggregates deep.
  mutating func value(at start: Int, depth: Int) throws(RESPProtocolError) -> Parsed {
    guard start < bytes.count else { return .incomplete(needed: start + 1) }
    let type = bytes[start]
    guard Self.isType(type) else { throw failure(.unknownType(type), at: start) }
    // A line not ended yet needs at least one byte more than is here.
    guard let (end, next) = try line(of: start) else { return .incomplete(needed: bytes.count + 1) }
    let content = (start + 1)..<end
    switch type {
    case UInt8(ascii: "+"), UInt8(ascii: "-"):
      guard let text = String(validating: UnsafeBufferPointer(rebasing: bytes[content]), as: UTF8.self) else {
        throw failure(.invalidText, at: start)
      }
      return .complete(type == UInt8(ascii: "+") ? .simpleString(text) : .error(text), end: next)
    case UInt8(ascii: ":"):
      return .complete(.integer(try integer(content, of: start)), end: next)
    case UInt8(ascii: "$"), UInt8(ascii: "!"), UInt8(ascii: "="):
      let length = try integer(content, of: start)
      if length == -1, type == UInt8(ascii: "$") { return .complete(.bulkString(nil), end: next) }
      guard length >= 0 else { throw failure(.invalidLength(length), at: start) }
      guard length <= limits.maximumBulkLength else {
        throw failure(.bulkTooLong(length, limit: limits.maximumBulkLength), at: start)
      }
      let payloadEnd = next + Int(length)
      guard payloadEnd + 2 <= bytes.count else { return .incomplete(needed: payloadEnd + 2) }
      guard bytes[payloadEnd] == Self.carriageReturn, bytes[payloadEnd + 1] == Self.lineFeed else {
        throw failure(.missingTerminator, at: payloadEnd)
      }
      let payload = Array(bytes[next..<payloadEnd])
      switch type {
      case UInt8(ascii: "$"):
        return .complete(.bulkString(payload), end: payloadEnd + 2)
      case UInt8(ascii: "!"):
        return .complete(.bulkError(payload), end: payloadEnd + 2)
      default:
        guard payload.count >= 4, payload[3] == UInt8(ascii: ":") else {
          throw failure(.invalidVerbatimString, at: start)
        }
        let format = String(decoding: payload[0..<3], as: UTF8.self)
        return .complete(.verbatimString(format: format, text: Array(payload[4...])), end: payloadEnd + 2)
      }
    case UInt8(ascii: "*"), UInt8(ascii: "~"), UInt8(ascii: ">"), UInt8(ascii: "%"), UInt8(ascii: "|"):
      return try aggregate(type, start: start, content: content, next: next, depth: depth)
    case UInt8(ascii: "_"):
      guard content.isEmpty else { throw failure(.invalidNull(text(content)), at: start) }
      return .complete(.null, end: next)
    case UInt8(ascii: "#"):
      switch text(content) {
      case "t": return .complete(.boolean(true), end: next)
      case "f": return .complete(.boolean(false), end: next)
      case let other: throw failure(.invalidBoolean(other), at: start)
      }
    case UInt8(ascii: ","):
      let line = text(content)
      guard let double = Double(line), !line.isEmpty, line.first != " " else {
        throw failure(.invalidDouble(line), at: start)
      }
      return .complete(.double(double), end: next)
    case UInt8(ascii: "("):
      let line = text(content)
      let digits = line.first == "-" || line.first == "+" ? line.dropFirst() : Substring(line)
      guard !digits.isEmpty, digits.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) else {
        throw failure(.invalidBigNumber(line), at: start)
      }
      return .complete(.bigNumber(line), end: next)
    default:
      throw failure(.unknownType(type), at: start)
    }
  }

  /// Reads an aggregate whose header (`type`, the count in `content`) ends before `next`.
  mutating func aggregate(
    _ type: UInt8, start: Int, content: Range<Int>, next: Int, depth: Int
  ) throws(RESPProtocolError) -> Parsed {
    let count = try integer(content, of: start)
    if count == -1, type == UInt8(ascii: "*") { return .complete(.array(nil), end: next) }
    guard count >= 0 else { throw failure(.invalidLength(count), at: start) }
    let isPaired = type == UInt8(ascii: "%") || type == UInt8(ascii: "|")
    let (elementCount, overflow) = count.multipliedReportingOverflow(by: isPaired ? 2 : 1)
    guard !overflow, elementCount <= limits.maximumElementCount else {
      throw failure(.tooManyElements(count, limit: limits.maximumElementCount), at: start)
    }
    guard depth < limits.maximumDepth else { throw failure(.nestingTooDeep(limit: limits.maximumDepth), at: start) }
    // Each element takes 3 bytes at least ("_\r\n"): no more is reserved than could be here.
    var elements: [RESPValue] = []
    elements.reserveCapacity(Swift.min(Int(elementCount), (bytes.count - next) / 3))
    var index = next
    for _ in 0..<Int(elementCount) {
      switch try value(at: index, depth: depth + 1) {
      case .incomplete(let needed):
        return .incomplete(needed: needed)
      case .complete(let element, let end):
        elements.append(element)
        index = end
      }
    }
    switch type {
    case UInt8(ascii: "*"):
      return .complete(.array(elements), end: index)
    case UInt8(ascii: "~"):
      return .complete(.set(elements), end: index)
    case UInt8(ascii: ">"):
      return .complete(.push(elements), end: index)
    case UInt8(ascii: "%"):
      return .complete(.map(Self.pairs(elements)), end: index)
    default:
      // An attribute annotates the value after it, which is what is returned. One level
      // deeper, so that a run of attributes is bounded too.
      return try value(at: index, depth: depth + 1)
    }
  }

  static func pairs(_ elements: [RESPValue]) -> [RESPPair] {
    stride(from: 0, to: elements.count, by: 2).map { RESPPair(key: elements[$0], value: elements[$0 + 1]) }
  }
}
