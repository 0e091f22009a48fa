import AsyncCache
import Testing

@testable import AsyncCacheRedis

/// The bytes of `text`, where the tests write the protocol as it is sent.
private func wire(_ text: String) -> [UInt8] { Array(text.utf8) }

/// Every value `bytes` holds, read by a parser fed `pieces` of it in turn (nil between values
/// that are not complete yet); throws the parser's error.
private func parse(_ pieces: [[UInt8]], limits: RESPParser.Limits = .init()) throws -> [RESPValue] {
  var parser = RESPParser(limits: limits)
  var values: [RESPValue] = []
  for piece in pieces {
    parser.append(contentsOf: piece)
    while let value = try parser.next() { values.append(value) }
  }
  return values
}

private func parse(_ text: String, limits: RESPParser.Limits = .init()) throws -> [RESPValue] {
  try parse([wire(text)], limits: limits)
}

/// The problem `text` is reported with, and its offset.
private func problem(_ text: String, limits: RESPParser.Limits = .init()) -> (RESPProtocolError.Problem, Int)? {
  do {
    _ = try parse(text, limits: limits)
    return nil
  } catch let error as RESPProtocolError {
    return (error.problem, error.offset)
  } catch {
    Issue.record("an error that is not RESPProtocolError: \(error)")
    return nil
  }
}

@Suite("RESPParser") struct RESPParserTests {
  @Test func everyRESP2TypeIsRead() throws {
    #expect(
      try parse(
        "+OK\r\n-ERR wrong\r\n:42\r\n:-7\r\n$5\r\nhello\r\n$0\r\n\r\n$-1\r\n*2\r\n:1\r\n$1\r\na\r\n*0\r\n*-1\r\n")
        == [
          .simpleString("OK"), .error("ERR wrong"), .integer(42), .integer(-7), .bulkString(wire("hello")),
          .bulkString([]), .bulkString(nil), .array([.integer(1), .bulkString(wire("a"))]), .array([]), .array(nil),
        ])
  }

  @Test func everyRESP3TypeIsRead() throws {
    let values = try parse(
      "_\r\n#t\r\n#f\r\n,3.5\r\n,-inf\r\n(-12345678901234567890\r\n!9\r\nERR nope!\r\n=8\r\ntxt:a\r\nb\r\n"
        + "%1\r\n+k\r\n:1\r\n~2\r\n:1\r\n:2\r\n>2\r\n+invalidate\r\n*1\r\n$1\r\nk\r\n|1\r\n+ttl\r\n:3\r\n:9\r\n")
    #expect(
      values == [
        .null, .boolean(true), .boolean(false), .double(3.5), .double(-.infinity), .bigNumber("-12345678901234567890"),
        .bulkError(wire("ERR nope!")), .verbatimString(format: "txt", text: wire("a\r\nb")),
        .map([RESPPair(key: .simpleString("k"), value: .integer(1))]), .set([.integer(1), .integer(2)]),
        .push([.simpleString("invalidate"), .array([.bulkString(wire("k"))])]),
        .integer(9),  // the attribute before it is dropped
      ])
    #expect(values.filter(\.isError).count == 1)
    guard case .double(let nan)? = try parse(",nan\r\n").first else {
      Issue.record("nan is a double")
      return
    }
    #expect(nan.isNaN)
  }

  @Test func integersAtTheEdgesOfInt64AreExact() throws {
    #expect(
      try parse(":9223372036854775807\r\n:-9223372036854775808\r\n:+5\r\n") == [
        .integer(.max), .integer(.min), .integer(5),
      ])
    #expect(problem(":9223372036854775808\r\n")?.0 == .invalidInteger("9223372036854775808"))
    #expect(problem(":-9223372036854775809\r\n")?.0 == .invalidInteger("-9223372036854775809"))
  }

  @Test func bulkPayloadsMayHoldCRLFAndAnyByte() throws {
    let payload: [UInt8] = [13, 10, 13, 10, 0, 255, 36, 42, 13]
    let bytes = wire("$\(payload.count)\r\n") + payload + wire("\r\n")
    #expect(try parse([bytes]) == [.bulkString(payload)])
    #expect(try parse("$4\r\n\r\n\r\n\r\n") == [.bulkString([13, 10, 13, 10])])
  }

  static let stream = wire(
    "*3\r\n$3\r\nfoo\r\n$-1\r\n%1\r\n+a\r\n*2\r\n:1\r\n$4\r\nb\r\nc\r\n+OK\r\n-MOVED 3999 127.0.0.1:6381\r\n"
      + ">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n,1.25\r\n")

  @Test func aStreamSplitAtEveryByteGivesTheSameValues() throws {
    let whole = try parse([Self.stream])
    #expect(whole.count == 5)
    // Two pieces, split at every position (inside CRLFs, lengths and payloads).
    for split in 0...Self.stream.count {
      let pieces = [Array(Self.stream[..<split]), Array(Self.stream[split...])]
      #expect(try parse(pieces) == whole, "split at \(split)")
    }
    // One byte at a time: no value comes out before its last byte.
    var parser = RESPParser()
    var values: [RESPValue] = []
    for byte in Self.stream {
      parser.append(contentsOf: [byte])
      while let value = try parser.next() { values.append(value) }
    }
    #expect(values == whole)
    #expect(parser.bufferedByteCount == 0)
  }

  @Test func aValueIsReturnedOnlyOnceAllOfItHasArrived() throws {
    var parser = RESPParser()
    parser.append(contentsOf: wire("$10\r\n01234"))
    #expect(try parser.next() == nil)
    parser.append(contentsOf: wire("56789\r"))
    #expect(try parser.next() == nil, "the terminator's LF is missing")
    parser.append(contentsOf: wire("\n:1"))
    #expect(try parser.next() == .bulkString(wire("0123456789")))
    #expect(try parser.next() == nil)
    #expect(parser.bufferedByteCount == 2)
  }

  @Test func aLargeLengthIsWaitedForWithoutReservingIt() throws {
    // 100 MB announced, a few bytes sent: not an error (it is within the limit), and no value.
    var parser = RESPParser()
    parser.append(contentsOf: wire("$100000000\r\nabc"))
    #expect(try parser.next() == nil)
    parser.append(contentsOf: wire("defg"))
    #expect(try parser.next() == nil, "returns at once: far fewer bytes than the payload needs")
    #expect(parser.bufferedByteCount == 19)
    // 16M elements announced (the limit is 2^24), one sent.
    var aggregate = RESPParser()
    aggregate.append(contentsOf: wire("*16000000\r\n:1\r\n"))
    #expect(try aggregate.next() == nil)
  }

  @Test(arguments: [
    ("$999999999999\r\n", RESPProtocolError.Problem.bulkTooLong(999_999_999_999, limit: 512 * 1024 * 1024), 0),
    ("*99999999999\r\n", .tooManyElements(99_999_999_999, limit: 1 << 24), 0),
    ("%9223372036854775807\r\n", .tooManyElements(.max, limit: 1 << 24), 0),
    ("$-2\r\n", .invalidLength(-2), 0),
    ("*-5\r\n", .invalidLength(-5), 0),
    ("~-1\r\n", .invalidLength(-1), 0),
    ("!-1\r\n", .invalidLength(-1), 0),
    (":1\r\n?what\r\n", .unknownType(UInt8(ascii: "?")), 4),
    ("\r\n", .unknownType(13), 0),
    (":12a\r\n", .invalidInteger("12a"), 0),
    (":\r\n", .invalidInteger(""), 0),
    ("$\r\n", .invalidInteger(""), 0),
    ("$ 3\r\nabc\r\n", .invalidInteger(" 3"), 0),
    ("+OK\rX", .missingLineFeed, 3),
    ("+O\nK\r\n", .bareLineFeed, 2),
    ("$3\r\nabcX\r\n", .missingTerminator, 7),
    ("#x\r\n", .invalidBoolean("x"), 0),
    (",abc\r\n", .invalidDouble("abc"), 0),
    (",\r\n", .invalidDouble(""), 0),
    ("_x\r\n", .invalidNull("x"), 0),
    ("(12a\r\n", .invalidBigNumber("12a"), 0),
    ("=3\r\ntxt\r\n", .invalidVerbatimString, 0),
  ])
  func malformedInputIsATypedErrorNamingTheProblemAndWhere(
    text: String, expected: RESPProtocolError.Problem, offset: Int
  ) {
    let found = problem(text)
    #expect(found?.0 == expected)
    #expect(found?.1 == offset)
  }

  @Test func invalidUTF8InASimpleStringIsInvalidText() {
    #expect(throws: RESPProtocolError(problem: .invalidText, offset: 0)) { try parse([[43, 0xC3, 0x28, 13, 10]]) }
  }

  @Test func nestingIsBoundedWithoutRecursingFurther() {
    let deep = String(repeating: "*1\r\n", count: 100) + ":1\r\n"
    #expect(problem(deep)?.0 == .nestingTooDeep(limit: 64))
    #expect(problem(deep)?.1 == 64 * 4, "the first aggregate past the limit")
    let attributes = String(repeating: "|0\r\n", count: 100) + ":1\r\n"
    #expect(problem(attributes)?.0 == .nestingTooDeep(limit: 64), "a run of attributes is bounded too")
    #expect((try? parse(String(repeating: "*1\r\n", count: 63) + ":1\r\n"))?.count == 1)
  }

  @Test func aLineWithoutItsEndIsRefusedOnceOverTheLimit() throws {
    var limits = RESPParser.Limits()
    limits.maximumLineLength = 100
    var parser = RESPParser(limits: limits)
    parser.append(contentsOf: wire("+" + String(repeating: "a", count: 100)))
    #expect(try parser.next() == nil, "100 bytes is the limit, and the end may still come")
    parser.append(contentsOf: wire("a"))
    #expect(throws: RESPProtocolError(problem: .lineTooLong(limit: 100), offset: 0)) { try parser.next() }
    #expect(problem("+" + String(repeating: "a", count: 100) + "\r\n", limits: limits) == nil)
  }

  @Test func afterAnErrorEveryCallThrowsItAgain() throws {
    var parser = RESPParser()
    parser.append(contentsOf: wire(":1\r\n?\r\n:2\r\n"))
    #expect(try parser.next() == .integer(1))
    let expected = RESPProtocolError(problem: .unknownType(UInt8(ascii: "?")), offset: 4)
    #expect(throws: expected) { try parser.next() }
    parser.append(contentsOf: wire(":3\r\n"))
    #expect(throws: expected) { try parser.next() }
    #expect(expected.description == "Redis protocol error at byte 4: unknown type byte 0x3F")
  }

  @Test func offsetsCountTheBytesOfEarlierValues() throws {
    var parser = RESPParser()
    for _ in 0..<3 {
      parser.append(contentsOf: wire("+hello\r\n"))
      #expect(try parser.next() == .simpleString("hello"))
    }
    parser.append(contentsOf: wire("+a\nb\r\n"))
    #expect(throws: RESPProtocolError(problem: .bareLineFeed, offset: 26)) { try parser.next() }
  }

  @Test func manyPipelinedRepliesKeepTheBufferSmall() throws {
    var parser = RESPParser()
    let reply = wire("$100\r\n" + String(repeating: "x", count: 100) + "\r\n")
    var count = 0
    for _ in 0..<1_000 {
      // Two and a half replies per read: the buffer always holds half a reply afterwards.
      parser.append(contentsOf: reply + reply + reply[..<50])
      parser.append(contentsOf: reply[50...] + reply + reply[..<50])
      parser.append(contentsOf: reply[50...])
      while try parser.next() != nil { count += 1 }
      #expect(parser.bufferedByteCount == 0)
    }
    #expect(count == 5_000)
  }

  /// Random streams, in random pieces: every call ends with a value, `nil` or a
  /// RESPProtocolError, and a stream ends in a bounded number of calls. The streams are built
  /// from whole frames, pieces of frames, the protocol's own characters and arbitrary bytes,
  /// so that they reach every outcome.
  @Test func randomBytesNeverCrashOrHang() throws {
    var random = SplitMix64(seed: 0x5EED)
    let frames = [
      "+OK\r\n", ":-12\r\n", "$3\r\na\rb\r\n", "$-1\r\n", "*2\r\n:1\r\n_\r\n", "%1\r\n#t\r\n,1.5\r\n", ">1\r\n(7\r\n",
      "|1\r\n+a\r\n:1\r\n", "=5\r\ntxt:x\r\n", "!1\r\nE\r\n", "~0\r\n", "*1\r\n",
    ].map(wire)
    let alphabet = wire("+-:$*_#,(!=%~>|\r\n0123456789-ab ")
    var outcomes = (values: 0, errors: 0, incomplete: 0)
    for _ in 0..<20_000 {
      var bytes: [UInt8] = []
      for _ in 0..<Int.random(in: 0...6, using: &random) {
        let frame = frames.randomElement(using: &random)!
        switch Int.random(in: 0..<10, using: &random) {
        case 0..<6: bytes += frame
        case 6: bytes += frame.prefix(Int.random(in: 0...frame.count, using: &random))
        case 7, 8: bytes.append(alphabet.randomElement(using: &random)!)
        default: bytes.append(UInt8.random(in: 0...255, using: &random))
        }
      }
      var parser = RESPParser()
      var index = 0
      var values = 0
      var failed = false
      while index < bytes.count, !failed {
        let piece = Int.random(in: 1...8, using: &random)
        parser.append(contentsOf: bytes[index..<Swift.min(index + piece, bytes.count)])
        index += piece
        do {
          while try parser.next() != nil {
            values += 1
            #expect(values * 3 <= bytes.count, "each value takes three bytes at least")
          }
        } catch {
          failed = true
        }
      }
      outcomes.values += values
      if failed {
        outcomes.errors += 1
      } else if parser.bufferedByteCount > 0 {
        outcomes.incomplete += 1
      }
    }
    // The generator reaches all three outcomes, so the test sees what it claims to.
    #expect(outcomes.values > 10_000)
    #expect(outcomes.errors > 1_000)
    #expect(outcomes.incomplete > 1_000)
  }
}

/// What a parser made of a stream fed in pieces: its values, its error, the bytes it kept.
private struct Outcome: Equatable {
  var values: [RESPValue] = []
  var error: RESPProtocolError?
  var buffered = 0
}

extension RESPParserTests {
  /// `consume`, which reads whole values in place, against `append` and `next`, on random
  /// streams in random pieces: the same values, the same error at the same offset, and without
  /// one, the same bytes kept for later.
  @Test func consumingInPlaceGivesWhatAppendingGives() throws {
    var random = SplitMix64(seed: 0xC0FFEE)
    let frames = [
      "+OK\r\n", ":-12\r\n", "$3\r\na\rb\r\n", "$-1\r\n", "*2\r\n:1\r\n_\r\n", "%1\r\n#t\r\n,1.5\r\n",
      "*3\r\n$2\r\nab\r\n$-1\r\n$5\r\nhello\r\n", "?x\r\n", "$2\r\nabc\r\n",
    ].map(wire)
    var sawError = false
    var sawKept = false
    for _ in 0..<5_000 {
      var bytes: [UInt8] = []
      for _ in 0..<Int.random(in: 1...8, using: &random) {
        let frame = frames.randomElement(using: &random)!
        bytes += Int.random(in: 0..<8, using: &random) == 0 ? Array(frame.prefix(frame.count / 2)) : frame
      }
      var cuts = [0, bytes.count]
      for _ in 0..<Int.random(in: 0...4, using: &random) {
        cuts.append(Int.random(in: 0...bytes.count, using: &random))
      }
      cuts.sort()
      let pieces = zip(cuts, cuts.dropFirst()).map { Array(bytes[$0..<$1]) }
      var appending = RESPParser()
      var expected = Outcome()
      var consuming = RESPParser()
      var actual = Outcome()
      for piece in pieces where expected.error == nil {
        appending.append(contentsOf: piece)
        do throws(RESPProtocolError) {
          while let value = try appending.next() { expected.values.append(value) }
        } catch {
          expected.error = error
        }
        do {
          _ = try piece.withUnsafeBytes { bytes in
            try consuming.consume(bytes) { value in
              actual.values.append(value)
              return true
            }
          }
        } catch let error as RESPProtocolError {
          actual.error = error
        }
      }
      // After an error the parser is done with: what it kept does not matter.
      if expected.error == nil {
        expected.buffered = appending.bufferedByteCount
        actual.buffered = consuming.bufferedByteCount
      }
      #expect(actual == expected, "\(pieces)")
      sawError = sawError || expected.error != nil
      sawKept = sawKept || expected.buffered > 0
    }
    #expect(sawError && sawKept, "the streams reach errors and incomplete values")
  }

  @Test func consumingStopsWhenTheReaderSaysSo() throws {
    var parser = RESPParser()
    var seen: [RESPValue] = []
    let finished = try wire(":1\r\n:2\r\n:3\r\n").withUnsafeBytes { bytes in
      try parser.consume(bytes) { value in
        seen.append(value)
        return seen.count < 2
      }
    }
    #expect(!finished)
    #expect(seen == [.integer(1), .integer(2)])
  }
}

@Suite("RESPCommand") struct RESPCommandTests {
  @Test func aCommandIsAnArrayOfBulkStrings() throws {
    let value: [UInt8] = [13, 10, 0, 255]
    let command = RESPCommand([wire("SET"), wire("user:1"), value, wire("PX"), wire("1500")])
    let expected = wire("*5\r\n$3\r\nSET\r\n$6\r\nuser:1\r\n$4\r\n") + value + wire("\r\n$2\r\nPX\r\n$4\r\n1500\r\n")
    #expect(command.encoded == expected)
    #expect(command.encodedCount == expected.count)
    #expect(
      try parse([command.encoded])
        == [
          .array([
            .bulkString(wire("SET")), .bulkString(wire("user:1")), .bulkString(value), .bulkString(wire("PX")),
            .bulkString(wire("1500")),
          ])
        ])
  }

  @Test(arguments: [0, 1, 9, 10, 11, 99, 100, 12_345])
  func lengthsOfEverySizeAreWrittenInDecimal(length: Int) throws {
    let command = RESPCommand([Array(repeating: UInt8(ascii: "z"), count: length)])
    let header = wire("*1\r\n$\(length)\r\n")
    #expect(Array(command.encoded.prefix(header.count)) == header)
    #expect(command.encodedCount == command.encoded.count)
    #expect(try parse([command.encoded]) == [.array([.bulkString(Array(repeating: UInt8(ascii: "z"), count: length))])])
    #expect(RESPCommand("PING").encoded == wire("*1\r\n$4\r\nPING\r\n"))
  }
}
