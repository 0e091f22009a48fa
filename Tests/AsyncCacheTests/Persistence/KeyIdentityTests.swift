import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

/// One rule for key identity (RELIABILITY.md row 17): keys are equal in every layer exactly when
/// Swift calls them equal, so a chain answers as any one of its layers does.
@Suite("Key identity")
struct KeyIdentityTests {
  @Test("encodings return NFC, so keys Swift calls equal encode to the same bytes")
  func encodingsNormalize() throws {
    for (precomposed, decomposed) in HostileKeys.pieces {
      let first = try CacheKeyEncoding<String>.string.encode(precomposed)
      let second = try CacheKeyEncoding<String>.string.encode(decomposed)
      #expect(Array(first.utf8) == Array(second.utf8), "\(precomposed.debugDescription)")
      #expect(first == precomposed)
    }
    #expect(Array(try CacheKeyEncoding<String>.string.encode("cafe\u{301}").utf8) == Array("caf\u{E9}".utf8))
    // Custom encodings are normalized too, and decode back to an equal key.
    let custom = CacheKeyEncoding<String>(encode: { "k/" + $0 }, decode: { String($0.dropFirst(2)) })
    let encoded = try custom.encode("A\u{30A}")
    #expect(Array(encoded.utf8) == Array("k/\u{C5}".utf8))
    #expect(try custom.decode(encoded) == "A\u{30A}")
    // JSON keys holding strings that Swift calls equal encode alike.
    struct Compound: Codable, Hashable, Sendable { var name: String }
    #expect(
      Array(try CacheKeyEncoding<Compound>.json.encode(Compound(name: "cafe\u{301}")).utf8)
        == Array(try CacheKeyEncoding<Compound>.json.encode(Compound(name: "caf\u{E9}")).utf8))
    // ASCII and Latin letters below U+0300 come back unchanged (the fast path).
    let latin = "Zo\u{EB} \u{C5}\u{17D}\u{2FF}~"
    #expect(Array(latin.nfcNormalized.utf8) == Array(latin.utf8))
  }

  @Test("normalization agrees with Swift's == on every character the standard library knows, Unicode 16 included")
  func normalizationAgreesWithEquality() throws {
    for (first, second) in HostileKeys.pieces {
      try #require(first == second)
      #expect(Array(first.nfcNormalized.utf8) == Array(second.nfcNormalized.utf8), "\(second.debugDescription)")
      #expect(first.nfcNormalized.isNFC && second.nfcNormalized.isNFC)
      #expect(first.nfcNormalized == first)
    }
    #expect(!"cafe\u{301}".isNFC)
    #expect("caf\u{E9}".isNFC)
  }

  /// A key holding a string-keyed dictionary (query parameters, say).
  struct Query: Codable, Hashable, Sendable {
    var path: String
    var parameters: [String: String]
  }

  @Test("JSON keys that Swift calls equal encode alike, also when a dictionary's names are spelt differently")
  func jsonKeysOfEqualDictionaries() async throws {
    let json = CacheKeyEncoding<Query>.json
    let pairs: [(Query, Query)] = [
      (
        Query(path: "/s", parameters: ["e\u{301}": "1", "f": "2"]),
        Query(path: "/s", parameters: ["\u{E9}": "1", "f": "2"])
      ),
      (
        Query(path: "/s", parameters: ["a\u{37E}": "x", "a:": "y", "a<": "z"]),
        Query(path: "/s", parameters: ["a;": "x", "a:": "y", "a<": "z"])
      ),
      (
        Query(path: "cafe\u{301}", parameters: ["\u{1611E}\u{1611E}": "\u{11382}\u{113C9}", "\u{16120}": "\n\"\\"]),
        Query(path: "caf\u{E9}", parameters: ["\u{16121}": "\u{11383}", "\u{16120}": "\n\"\\"])
      ),
    ]
    for (first, second) in pairs {
      try #require(first == second)
      let (one, other) = (try json.encode(first), try json.encode(second))
      #expect(Array(one.utf8) == Array(other.utf8), "\(one) vs \(other)")
      // What JSONEncoder writes for the NFC spelling, unchanged; and it decodes back.
      #expect(try json.decode(one) == first)
    }
    #expect(
      try json.encode(Query(path: "/s", parameters: ["b": "2", "a": "1"]))
        == #"{"parameters":{"a":"1","b":"2"},"path":"/s"}"#)
    // Through a layer: a removal under one spelling removes the other.
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await DiskLayer<Query, Data>(directory: fixture.directory, keyEncoding: .json, valueCoder: .data)
    try await layer.insert(CacheEntry(Data("stale".utf8)), for: pairs[0].0)
    try await layer.removeValue(for: pairs[0].1)
    #expect(try await layer.entry(for: pairs[0].0) == nil)
  }

  @Test("the disk layer keeps keys apart exactly as Swift does, across reopening", arguments: [1, 2, 3] as [UInt64])
  func diskLayer(seed: UInt64) async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    var generator = HostileKeys(seed: seed)
    let keys = generator.keys(150)
    var model = KeyIdentityModel()
    let layer = try await fixture.open()
    try await model.write(keys, to: layer, tag: "disk")
    #expect(try await model.mismatches(in: layer, probing: keys).isEmpty)
    let reopened = try await fixture.open()
    #expect(try await model.mismatches(in: reopened, probing: keys).isEmpty)
    #expect(Set(await reopened.keys) == model.keys)
    #expect(await reopened.statistics.damagedEntries == 0)
    #expect(fixture.names.count == model.keys.count)
  }

  @Test("a memory layer over a disk layer answers as the disk layer alone does", arguments: [4, 5] as [UInt64])
  func memoryOverDisk(seed: UInt64) async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    var generator = HostileKeys(seed: seed)
    let keys = generator.keys(120)
    var model = KeyIdentityModel()
    let chain = try CacheChain<String, Data>([MemoryLayer<String, Data>(), try await fixture.open()])
    try await model.write(keys, to: chain, tag: "chain")
    #expect(try await model.mismatches(in: chain, probing: keys).isEmpty)
    // Each layer alone, the disk one reopened: the same answers.
    #expect(try await model.mismatches(in: try await fixture.open(), probing: keys).isEmpty)
    try #require(chain.tiers.count == 2)
    #expect(try await model.mismatches(in: chain.tiers[0].layer, probing: keys).isEmpty)
  }
}

extension UserDefaultsLayerTests {
  @Test("keys Swift calls equal are one key, in any order of writes (the issue's case)")
  func equalKeysAreOneKey() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let layer = try UserDefaultsLayer<String, Data>(suiteName: suite.name)
    try await layer.insert(Data("a".utf8), for: "caf\u{E9}")
    try await layer.insert(Data("b".utf8), for: "cafe\u{301}")
    #expect(try await layer.value(for: "caf\u{E9}") == Data("b".utf8))
    #expect(try await layer.value(for: "cafe\u{301}") == Data("b".utf8))
    #expect(await layer.keys == ["caf\u{E9}"])
    #expect(await layer.statistics.damagedEntries == 0)
  }

  @Test("hostile keys keep their values, are listed and removed, and stay inside the namespace")
  func hostileKeys() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    var generator = HostileKeys(seed: 7)
    let keys = generator.keys(120)
    var model = KeyIdentityModel()
    let layer = try UserDefaultsLayer<String, Data>(suiteName: suite.name, configuration: .init(namespace: "a"))
    // A neighbour whose namespace extends this one's, holding the same keys.
    let neighbour = try UserDefaultsLayer<String, Data>(suiteName: suite.name, configuration: .init(namespace: "ab"))
    var neighbourModel = KeyIdentityModel()
    try await model.write(keys, to: layer, tag: "a")
    try await neighbourModel.write(keys.reversed(), to: neighbour, tag: "ab")
    #expect(try await model.mismatches(in: layer, probing: keys).isEmpty)
    #expect(Set(await layer.keys) == model.keys)
    try await neighbour.removeAll()
    let reopened = try UserDefaultsLayer<String, Data>(suiteName: suite.name, configuration: .init(namespace: "a"))
    #expect(try await model.mismatches(in: reopened, probing: keys).isEmpty)
    #expect(Set(await reopened.keys) == model.keys)
    #expect(await neighbour.keys.isEmpty)
    #expect(await reopened.statistics.damagedEntries == 0)
    try await reopened.removeAll()
    #expect(await reopened.keys.isEmpty)
    #expect(suite.defaults.persistentDomain(forName: suite.name)?.keys.contains { $0.hasPrefix("asynccache.") } != true)
  }

  @Test("a namespace holding a \".\" byte is refused, also when a combining mark joins it to the next character")
  func namespaceDotBytesAreRefused() throws {
    let suite = TestSuite()
    defer { suite.remove() }
    for namespace in ["a.b", "a.\u{301}b", ".\u{301}", "a\0\u{301}"] {
      #expect(throws: AsyncCacheError.self, "\(namespace.debugDescription)") {
        try UserDefaultsLayer<String, Data>(suiteName: suite.name, configuration: .init(namespace: namespace))
      }
    }
    #expect(throws: AsyncCacheError.self) { try UserDefaultsLayer<String, Data>(suiteName: "a/\u{301}b") }
  }

  @Test("namespaces Swift calls equal are one namespace")
  func equalNamespaces() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    for (first, second) in HostileKeys.equalNamespaces {
      let one = try UserDefaultsLayer<String, Data>(suiteName: suite.name, configuration: .init(namespace: first))
      let other = try UserDefaultsLayer<String, Data>(suiteName: suite.name, configuration: .init(namespace: second))
      try await one.insert(Data("v".utf8), for: "k")
      #expect(try await other.value(for: "k") == Data("v".utf8))
    }
  }
}
