import Foundation
import Testing

@testable import AsyncCache

/// What `JSONEncoder` writes for `value` with the options of ``CacheKeyEncoding/json``.
private func encoded(_ value: some Encodable) throws -> String {
  let encoder = JSONEncoder()
  encoder.outputFormatting = [.sortedKeys, .withoutEscapingSlashes]
  return String(decoding: try encoder.encode(value), as: UTF8.self)
}

/// `text` with its strings in NFC and its members sorted again: what the suite tests.
private func canonical(_ value: some Encodable) throws -> String {
  CanonicalJSON.normalized(try encoded(value))
}

/// The bytes of `text`: `String`'s `==` calls canonically equivalent spellings equal, and these
/// tests are about the spelling.
private func utf8(_ text: String) -> [UInt8] { Array(text.utf8) }

/// Whether `text` parses as JSON.
private func isJSON(_ text: String) -> Bool {
  (try? JSONSerialization.jsonObject(with: Data(text.utf8), options: [.fragmentsAllowed])) != nil
}

/// A value with strings at every level of nesting, and numbers, booleans and nulls beside them.
private struct Record: Codable, Equatable {
  var name: String
  var tags: [String: [String: Int]]
  var list: [[String: String]]
  var numbers: [String: Double]
  var flags: [Bool?]
}

@Suite("CanonicalJSON", .timeLimit(.minutes(3)))
struct CanonicalJSONTests {
  @Test("text already in NFC is returned as it is, even with members out of order")
  func nfcTextUnchanged() throws {
    let text = #"{"b":1,"a":[2,"é"],"c":{"z":null,"y":true}}"#
    #expect(utf8(CanonicalJSON.normalized(text)) == utf8(text))
    let written = try encoded(["é": 1, "f": 2])
    #expect(utf8(CanonicalJSON.normalized(written)) == utf8(written))
  }

  @Test("a decomposed string comes out in NFC, as JSONEncoder writes the composed one")
  func stringsInNFC() throws {
    let decomposed = try encoded(["cafe\u{301}"])
    let composed = try encoded(["caf\u{E9}"])
    #expect(utf8(decomposed) != utf8(composed), "the encoder keeps the spelling it is given")
    #expect(utf8(CanonicalJSON.normalized(decomposed)) == utf8(composed))
  }

  @Test("members are sorted again by their normalized names, in the order JSONEncoder gives them")
  func membersSortedAgain() throws {
    let decomposed = ["e\u{301}": 1, "f": 2]
    let composed = ["\u{E9}": 1, "f": 2]
    #expect(decomposed == composed)
    #expect(try utf8(encoded(decomposed)) != utf8(encoded(composed)), "the encoder sorts them differently")
    #expect(try utf8(canonical(decomposed)) == utf8(encoded(composed)))
  }

  @Test(
    "names of every kind sort as JSONEncoder sorts the composed names",
    arguments: [
      ["B", "a", "e\u{301}", "Z", "_"],
      ["10", "9", "1", "a\u{30A}", "100"],
      ["ä", "a\u{308}b", "aa", "A", "ab"],
      ["😀", "\u{F000}", "n\u{303}", "~", " "],
      ["\u{1}", "\t", "a\"b", "a\\b", "a/b", "o\u{308}"],
    ])
  func sortOrder(names: [String]) throws {
    let decomposed = Dictionary(names.enumerated().map { ($1, $0) }, uniquingKeysWith: { first, _ in first })
    let composed = Dictionary(
      names.enumerated().map { ($1.precomposedStringWithCanonicalMapping, $0) }, uniquingKeysWith: { first, _ in first }
    )
    try #require(decomposed == composed)
    #expect(try utf8(canonical(decomposed)) == utf8(encoded(composed)))
  }

  @Test("nested objects and arrays are normalized and sorted at every level; numbers and literals are kept")
  func nested() throws {
    func record(_ e: String, _ a: String) -> Record {
      Record(
        name: "caf\(e)",
        tags: ["\(e)t\(e)": ["n\(a)": 1, "b": 2], "z": ["\(a)": -3]],
        list: [["\(e)": "\(a)", "a": "x"], [:]],
        numbers: ["\(e)": -0.0, "big": 1e300, "tenth": 0.1, "min": Double(Int32.min), "\(a)": 1.5],
        flags: [true, nil, false]
      )
    }
    let decomposed = record("e\u{301}", "A\u{30A}")
    let composed = record("\u{E9}", "\u{C5}")
    #expect(decomposed == composed)
    let text = try canonical(decomposed)
    #expect(try utf8(text) == utf8(encoded(composed)))
    #expect(text.contains("null"), "\(text)")
    #expect(try JSONDecoder().decode(Record.self, from: Data(text.utf8)) == composed)
  }

  @Test("escaped names sort by what they decode to, surrogate pairs included")
  func escapedNames() {
    // Raw U+F000 sorts between é (U+E9) and 😀 (U+1F600, written as a surrogate pair): decoding
    // the pair as anything below U+F000 would put it second.
    let text = "{\"\\ud83d\\ude00\":1,\"\u{F000}\":2,\"e\u{301}\":3,\"\\\"q\":4}"
    #expect(
      utf8(CanonicalJSON.normalized(text)) == utf8("{\"\\\"q\":4,\"\u{E9}\":3,\"\u{F000}\":2,\"\\ud83d\\ude00\":1}"))
  }

  @Test("keys Swift calls equal, however their strings are spelt, encode to the same bytes", arguments: [1, 2, 3, 4])
  func equalInputsEqualBytes(seed: UInt64) throws {
    // Each letter with two spellings Swift calls equal; the second of ṩ's even orders its marks
    // differently.
    let letters: [(String, String)] = [
      ("\u{E9}", "e\u{301}"), ("\u{C5}", "A\u{30A}"), ("\u{F1}", "n\u{303}"), ("\u{1E69}", "s\u{307}\u{323}"),
      ("a", "a"), ("Z", "Z"), ("1", "1"), ("\"", "\""), ("\\", "\\"), ("\u{2028}", "\u{2028}"),
    ]
    var random = SplitMix64(seed: seed)
    for _ in 0..<50 {
      var first: [String: [String]] = [:]
      var second: [String: [String]] = [:]
      for _ in 0..<(random.next() % 5) {
        var (key1, key2, value1, value2) = ("", "", "", "")
        for _ in 0..<(1 + random.next() % 4) {
          let letter = letters[Int(random.next() % UInt64(letters.count))]
          key1 += random.next() % 2 == 0 ? letter.0 : letter.1
          key2 += random.next() % 2 == 0 ? letter.0 : letter.1
          let other = letters[Int(random.next() % UInt64(letters.count))]
          value1 += random.next() % 2 == 0 ? other.0 : other.1
          value2 += random.next() % 2 == 0 ? other.0 : other.1
        }
        first[key1, default: []].append(value1)
        second[key2, default: []].append(value2)
      }
      try #require(first == second, "seed \(seed)")
      let text = try canonical(first)
      #expect(utf8(text) == utf8(try canonical(second)), "seed \(seed): \(first)")
      let composed = Dictionary(
        first.map { ($0.precomposedStringWithCanonicalMapping, $1.map(\.precomposedStringWithCanonicalMapping)) },
        uniquingKeysWith: { first, _ in first })
      #expect(utf8(text) == utf8(try encoded(composed)), "seed \(seed): what JSONEncoder writes for the NFC spelling")
      #expect(isJSON(text), "seed \(seed): \(text)")
    }
  }

  @Test(
    "text that is not JSON comes back normalized, not dropped",
    arguments: ["{\"e\u{301}\":", "[\"e\u{301}\"]]", "e\u{301}"])
  func notJSON(text: String) {
    #expect(utf8(CanonicalJSON.normalized(text)) == utf8(text.precomposedStringWithCanonicalMapping))
  }

  @Test("nesting too deep to parse safely comes back normalized; nesting within the bound is sorted")
  func depth() {
    let deep = String(repeating: "[", count: 100_000) + "\"e\u{301}\"" + String(repeating: "]", count: 100_000)
    #expect(utf8(CanonicalJSON.normalized(deep)) == utf8(deep.precomposedStringWithCanonicalMapping))
    let nested = String(repeating: "[", count: 100) + "{\"e\u{301}\":1,\"f\":2}" + String(repeating: "]", count: 100)
    let sorted = String(repeating: "[", count: 100) + "{\"f\":2,\"\u{E9}\":1}" + String(repeating: "]", count: 100)
    #expect(utf8(CanonicalJSON.normalized(nested)) == utf8(sorted))
  }

  @Test("a key JSON cannot write (not a number) is a typed error naming the key")
  func unencodableKey() {
    #expect {
      try CacheKeyEncoding<[Double]>.json.encode([.nan])
    } throws: { error in
      (error as? PersistenceError)?.code == .encodingFailed
        && (error as? PersistenceError)?.message.contains("nan") == true
    }
  }

  @Test("a string with an escape letter followed by a combining mark stays JSON that decodes to the key")
  func escapeLetterAndCombiningMark() throws {
    // JSONEncoder writes a newline as `\n`; NFC composes that `n` with a combining tilde into
    // `ñ`, leaving `\ñ`: not JSON, and a key that cannot be read back.
    let key = ["a\n\u{303}"]
    let text = try canonical(key)
    let encoding = CacheKeyEncoding<[String]>.json
    let decoded = try? encoding.decode(try encoding.encode(key))
    #expect(isJSON(text), "\(text)")
    #expect(decoded == key, "the key read back from its stored form")
  }

  @Test(
    "escapes followed by combining marks: the key reads back, and keys Swift calls equal encode alike",
    arguments: [
      ("\n\u{303}", "\n\u{303}"), ("\t\u{307}", "\t\u{307}"), ("\r\u{301}", "\r\u{301}"),
      ("\u{8}\u{307}", "\u{8}\u{307}"), ("\u{C}\u{307}", "\u{C}\u{307}"), ("\u{B}\u{307}", "\u{B}\u{307}"),
      ("\\e\u{301}", "\\\u{E9}"), ("/e\u{301}/", "/\u{E9}/"), ("\"\u{323}\u{303}", "\"\u{303}\u{323}"),
    ])
  func escapesBeforeCombiningMarks(spelling: String, other: String) throws {
    #expect(spelling == other, "the two spellings are equal strings")
    let encoding = CacheKeyEncoding<[String: String]>.json
    let first = try encoding.encode([spelling: spelling])
    let second = try encoding.encode([other: other])
    #expect(utf8(first) == utf8(second))
    #expect(isJSON(first), "\(first)")
    #expect(try encoding.decode(first) == [spelling: spelling])
  }
}
