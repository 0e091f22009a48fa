package import AsyncCache
package import Foundation

/// Keys and namespaces that break naive key handling: strings Swift calls equal whose bytes
/// differ (Unicode normalisation), separators, glob characters, NUL, combining marks at the
/// start, empty and very long strings. Seeded, so that a failing run can be replayed.
package struct HostileKeys {
  /// The generator keys are drawn from; tests may draw from it too (to shuffle, say).
  package var random: SplitMix64

  package init(seed: UInt64) {
    random = SplitMix64(seed: seed)
  }

  /// Pieces that keys are made of. Each entry whose second form differs holds two spellings
  /// that Swift calls equal (precomposed and decomposed), which must be one key everywhere.
  package static let pieces: [(String, String)] = [
    ("caf\u{E9}", "cafe\u{301}"),
    ("\u{C5}ngstr\u{F6}m", "A\u{30A}ngstro\u{308}m"),
    ("\u{1E69}", "s\u{323}\u{307}"),  // the marks in canonical order
    ("\u{1E69}", "s\u{307}\u{323}"),  // the same character, marks in the other order
    ("\u{AC00}", "\u{1100}\u{1161}"),  // Hangul syllable and its jamo
    ("\u{212B}", "\u{C5}"),  // ANGSTROM SIGN and LATIN CAPITAL A WITH RING
    ("\u{301}x", "\u{301}x"),  // a combining mark first
    ("a;b", "a\u{37E}b"),  // GREEK QUESTION MARK is canonically a semicolon
    // Compositions new in Unicode 16 (Tulu-Tigalari, Gurung Khema, Kirat Rai), which tables
    // older than the standard library's leave apart.
    ("\u{11383}", "\u{11382}\u{113C9}"), ("\u{16121}", "\u{1611E}\u{1611E}"), ("\u{16D68}", "\u{16D67}\u{16D67}"),
    (":", ":"), (".", "."), ("/", "/"), ("\\", "\\"), ("_", "_"), ("a:b", "a:b"),
    ("*", "*"), ("?", "?"), ("[", "["), ("]", "]"), ("{", "{"), ("}", "}"), ("{x}", "{x}"),
    ("\0", "\0"), ("a\0b", "a\0b"), ("", ""), (" ", " "), ("\n", "\n"),
    ("..", ".."), ("../", "../"), ("%2e", "%2e"),
    ("👩‍👩‍👧", "👩‍👩‍👧"), ("\u{FEFF}", "\u{FEFF}"), ("\u{202E}rtl", "\u{202E}rtl"),
    ("k", "k"), ("K", "K"), ("0", "0"),
  ]

  /// A key of one to four pieces, each in either spelling, sometimes very long.
  package mutating func key() -> String {
    if Int.random(in: 0..<40, using: &random) == 0 {
      return String(repeating: piece(), count: Int.random(in: 1_000...3_000, using: &random)) + "\(random.next())"
    }
    return (0..<Int.random(in: 1...4, using: &random)).map { _ in piece() }.joined()
  }

  /// `count` keys, with both spellings of some.
  package mutating func keys(_ count: Int) -> [String] {
    (0..<count).map { _ in key() }
  }

  private mutating func piece() -> String {
    let (precomposed, decomposed) = Self.pieces[Int.random(in: 0..<Self.pieces.count, using: &random)]
    return Bool.random(using: &random) ? precomposed : decomposed
  }

  /// Namespaces that extend each other (`a`, `a:b`, `a.b`), hold separators, escapes and glob
  /// characters, or are spelt two ways (and are then one namespace).
  package static let namespaces: [String] = [
    "a", "a:b", "a.b", "a\\", "a\\:b", "a*", "a?", "a[b]", "a{b}", "ab", "a b", "caf\u{E9}", "a/b", "a_b",
  ]

  /// Pairs of namespaces that Swift calls equal, spelt differently.
  package static let equalNamespaces: [(String, String)] = [
    ("caf\u{E9}", "cafe\u{301}"), ("\u{11383}", "\u{11382}\u{113C9}"),
  ]
}

/// What a layer must hold after a sequence of writes, by Swift's `==` on keys: the rule every
/// layer follows (see "Key identity" in `CacheKeyEncoding`).
package struct KeyIdentityModel: Sendable {
  /// The value of each key, as a Swift dictionary keeps them.
  package private(set) var values: [String: Data] = [:]

  package init() {}

  /// Inserts a value for each of `keys` into `layer` and the model, in order (so the last
  /// spelling of a key wins), then removes every fifth key.
  package mutating func write(_ keys: [String], to layer: any AsyncCacheLayer<String, Data>, tag: String) async throws {
    for (index, key) in keys.enumerated() {
      let value = Data("\(tag)#\(index)".utf8)
      try await layer.insert(CacheEntry(value), for: key)
      values[key] = value
    }
    for key in keys.enumerated().filter({ $0.offset % 5 == 4 }).map(\.element) {
      try await layer.removeValue(for: key)
      values[key] = nil
    }
  }

  /// The keys of `probes` whose value in `layer` differs from the model's, each described with
  /// what the layer and the model hold.
  package func mismatches(in layer: any AsyncCacheLayer<String, Data>, probing probes: [String]) async throws
    -> [String]
  {
    var found: [String] = []
    for key in probes {
      let stored = try await layer.entry(for: key)?.value
      if stored != values[key] {
        found.append(
          "\(key.prefix(40).debugDescription) (\(Array(key.utf8.prefix(16)))): layer "
            + "\(stored.map { String(decoding: $0, as: UTF8.self) } ?? "nil"), model "
            + "\(values[key].map { String(decoding: $0, as: UTF8.self) } ?? "nil")")
      }
    }
    return found
  }

  /// The model's keys.
  package var keys: Set<String> { Set(values.keys) }
}
