import AsyncCacheTesting
import Foundation
import TestSupport
import Testing

@testable import AsyncCache

// Serialized: on Linux, synchronizing any suite writes every changed suite to disk, so a test
// running alongside would hide a layer that forgot to synchronize its own.
@Suite("UserDefaultsLayer", .serialized, .timeLimit(.minutes(3)))
struct UserDefaultsLayerTests {
  struct Preferences: Codable, Hashable, Sendable {
    var theme: String
    var fontSize: Int
  }

  /// A value whose encoding always fails.
  struct Unencodable: Codable, Sendable {
    init() {}
    init(from decoder: any Decoder) throws {}
    func encode(to encoder: any Encoder) throws { throw TestError("unencodable") }
  }

  /// A suite with a unique name, removed from memory and from disk by ``remove()``.
  struct TestSuite {
    let name = "org.swift-async-cache.tests.\(UUID().uuidString)"

    /// A `UserDefaults` of the suite, as other code in the app would use it.
    var defaults: UserDefaults { UserDefaults(suiteName: name)! }

    #if !canImport(Darwin)
      /// Where swift-corelibs-foundation keeps the suite on disk. Apple's Foundation keeps it
      /// elsewhere, and has no `homeDirectoryForCurrentUser` on iOS, tvOS, watchOS or visionOS.
      var file: URL {
        let environment = ProcessInfo.processInfo.environment
        let configHome =
          environment["XDG_CONFIG_HOME"].flatMap { $0.hasPrefix("/") ? URL(fileURLWithPath: $0) : nil }
          ?? FileManager.default.homeDirectoryForCurrentUser.appendingPathComponent(".config")
        return configHome.appendingPathComponent("\(name).plist")
      }
    #endif

    func remove() {
      let defaults = self.defaults
      defaults.removePersistentDomain(forName: name)
      #if !canImport(Darwin)
        defaults.synchronize()
        try? FileManager.default.removeItem(at: file)
      #endif
    }
  }

  // MARK: Round trips

  @Test("values round-trip, with hits and misses counted")
  func roundTrip() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let layer = try UserDefaultsLayer<String, Data>(suiteName: suite.name)
    try await layer.insert(CacheEntry(Data([1, 2, 3])), for: "a/b")
    try await layer.insert(Data(), for: "empty")

    #expect(try await layer.entry(for: "a/b") == CacheEntry(Data([1, 2, 3])))
    #expect(try await layer.value(for: "empty") == Data())
    #expect(try await layer.value(for: "missing") == nil)
    let statistics = await layer.statistics
    #expect(statistics.hits == 2)
    #expect(statistics.misses == 1)
    #expect(suite.defaults.object(forKey: "asynccache.default.a/b") is Data)
  }

  @Test("Codable values and key encodings round-trip")
  func codable() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let preferences = try UserDefaultsLayer<String, Preferences>(suiteName: suite.name)
    try await preferences.insert(Preferences(theme: "dark", fontSize: 14), for: "me")
    #expect(try await preferences.value(for: "me") == Preferences(theme: "dark", fontSize: 14))

    let byID = try UserDefaultsLayer<Int, String>(
      suiteName: suite.name, configuration: .init(namespace: "byID"), keyEncoding: .description,
      valueCoder: .utf8)
    try await byID.insert("forty-two", for: 42)
    #expect(try await byID.value(for: 42) == "forty-two")
    #expect(await byID.keys == [42])
  }

  @Test("entries survive a new layer and are written to disk")
  func persists() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let clock = ManualClock()
    let expiresAt = clock.now.advanced(by: .seconds(3_600))
    let first = try UserDefaultsLayer<String, String>(
      suiteName: suite.name, configuration: .init(clock: clock), valueCoder: .utf8)
    try await first.insert(CacheEntry("kept", expiresAt: expiresAt), for: "a")

    let second = try UserDefaultsLayer<String, String>(
      suiteName: suite.name, configuration: .init(clock: clock), valueCoder: .utf8)
    #expect(try await second.entry(for: "a") == CacheEntry("kept", expiresAt: expiresAt))
    #if !canImport(Darwin)
      // swift-corelibs-foundation writes only when synchronized; the layer does it on every change.
      let plist = try PropertyListSerialization.propertyList(from: Data(contentsOf: suite.file), format: nil)
      let stored = try #require((plist as? [String: Any])?["asynccache.default.a"] as? Data)
      #expect(UserDefaultsRecord.parse(stored, defaultsKey: "asynccache.default.a")?.payload == Data("kept".utf8))
    #endif
  }

  @Test("metadata round-trips; an entry without it is stored in record format 1, with it in format 2")
  func metadata() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let metadata = EntryMetadata(entityTag: #""v9""#, producedAt: CacheInstant(secondsSince1970: 5), tags: ["a", "b"])
    let first = try UserDefaultsLayer<String, String>(suiteName: suite.name, valueCoder: .utf8)
    try await first.insert(CacheEntry("tagged", expiresAt: nil, metadata: metadata), for: "t")
    try await first.insert(CacheEntry("plain"), for: "p")
    let second = try UserDefaultsLayer<String, String>(suiteName: suite.name, valueCoder: .utf8)
    #expect(try await second.entry(for: "t") == CacheEntry("tagged", expiresAt: nil, metadata: metadata))
    #expect(try await second.entry(for: "p") == CacheEntry("plain"))
    let plain = try #require(suite.defaults.object(forKey: "asynccache.default.p") as? Data)
    let tagged = try #require(suite.defaults.object(forKey: "asynccache.default.t") as? Data)
    try #require(plain.count >= 8 && tagged.count >= 8)
    #expect(Array(plain.prefix(8)) == Array("ACUD".utf8) + [1, 0, 0, 0])
    #expect(Array(tagged.prefix(6)) == Array("ACUD".utf8) + [2, 0] && tagged[6] > 0)

    // Metadata over a limit is refused, and the previous entry goes (the caller meant to replace it).
    await #expect(throws: PersistenceError.self) {
      try await second.insert(CacheEntry("x", expiresAt: nil, metadata: EntryMetadata(tags: [""])), for: "t")
    }
    #expect(try await second.entry(for: "t") == nil)

    // A record whose metadata does not decode is damage, even with its checksum intact.
    var damaged = [UInt8](tagged)
    damaged[24] = 99
    let reordered = UserDefaultsRecord.make(
      payload: Data("tagged".utf8), metadata: Array(damaged[24..<(24 + Int(tagged[6]))]), expiry: .max,
      defaultsKey: "asynccache.default.t")
    suite.defaults.set(reordered, forKey: "asynccache.default.t")
    #expect(try await second.entry(for: "t") == nil)
    #expect(await second.statistics.damagedEntries == 1)
  }

  @Test("records written before metadata existed (by 0117f2a) are read without loss")
  func readsVersion1Records() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let records = [
      "asynccache.default.alpha": "4143554401000000ffffffffffffff7fa4bf1fc60c0b050a226f6e6522",
      "asynccache.default.beta": "41435544010000000000a656cfcfee389fcbcfd7dadb4aa32274776f22",
    ]
    for (key, hex) in records { suite.defaults.set(Data(hexadecimal: hex), forKey: key) }
    let layer = try UserDefaultsLayer<String, String>(suiteName: suite.name)
    #expect(try await layer.entry(for: "alpha") == CacheEntry("one"))
    #expect(
      try await layer.entry(for: "beta") == CacheEntry("two", expiresAt: CacheInstant(secondsSince1970: 4_102_444_800)))
    #expect(await layer.statistics.damagedEntries == 0)
    // And an entry without metadata is written as those were, byte for byte.
    try await layer.insert(CacheEntry("one"), for: "alpha")
    #expect(
      suite.defaults.data(forKey: "asynccache.default.alpha") == Data(hexadecimal: records["asynccache.default.alpha"]!)
    )
  }

  // MARK: Expiry

  @Test("an expired entry is a miss that is removed and counted")
  func expiry() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let clock = ManualClock()
    let layer = try UserDefaultsLayer<String, Data>(suiteName: suite.name, configuration: .init(clock: clock))
    try await layer.insert(Data([1]), for: "a", timeToLive: .seconds(10))
    #expect(try await layer.entry(for: "a")?.expiresAt == clock.now.advanced(by: .seconds(10)))

    clock.advance(by: .seconds(10))
    #expect(try await layer.value(for: "a") == nil)
    #expect(suite.defaults.object(forKey: "asynccache.default.a") == nil)
    let statistics = await layer.statistics
    #expect(statistics.expired == 1)
    #expect(statistics.misses == 1)
  }

  @Test("the configured time to live caps an entry's expiry, and an expired insert removes the old entry")
  func timeToLive() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let clock = ManualClock()
    let layer = try UserDefaultsLayer<String, Data>(
      suiteName: suite.name, configuration: .init(timeToLive: .seconds(60), clock: clock))
    try await layer.insert(Data([1]), for: "a")
    try await layer.insert(CacheEntry(Data([2]), expiresAt: clock.now.advanced(by: .seconds(5))), for: "b")
    #expect(try await layer.entry(for: "a")?.expiresAt == clock.now.advanced(by: .seconds(60)))
    #expect(try await layer.entry(for: "b")?.expiresAt == clock.now.advanced(by: .seconds(5)))

    try await layer.insert(CacheEntry(Data([3]), expiresAt: clock.now), for: "a")
    #expect(suite.defaults.object(forKey: "asynccache.default.a") == nil)
  }

  @Test("removeExpired removes expired and damaged entries and keeps the rest")
  func removeExpired() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let clock = ManualClock()
    let layer = try UserDefaultsLayer<String, Data>(suiteName: suite.name, configuration: .init(clock: clock))
    try await layer.insert(Data([1]), for: "short", timeToLive: .seconds(10))
    try await layer.insert(Data([2]), for: "shorter", timeToLive: .seconds(5))
    try await layer.insert(Data([3]), for: "long", timeToLive: .seconds(100))
    suite.defaults.set("foreign", forKey: "asynccache.default.foreign")
    suite.defaults.set("not ours", forKey: "unrelated")
    clock.advance(by: .seconds(10))

    #expect(try await layer.removeExpired() == 3)
    #expect(await layer.keys == ["long"])
    #expect(suite.defaults.string(forKey: "unrelated") == "not ours")
    let statistics = await layer.statistics
    #expect(statistics.expired == 2)
    #expect(statistics.damagedEntries == 1)
  }

  // MARK: Clearing

  @Test("removeAll removes this layer's entries only: not other keys, namespaces or suites")
  func removeAllIsScoped() async throws {
    let suite = TestSuite()
    let other = TestSuite()
    defer {
      suite.remove()
      other.remove()
    }
    let layer = try UserDefaultsLayer<String, Data>(suiteName: suite.name)
    let neighbour = try UserDefaultsLayer<String, Data>(suiteName: suite.name, configuration: .init(namespace: "other"))
    let elsewhere = try UserDefaultsLayer<String, Data>(suiteName: other.name)
    for key in ["a", "b", "c"] {
      try await layer.insert(Data([1]), for: key)
      try await neighbour.insert(Data([2]), for: key)
      try await elsewhere.insert(Data([3]), for: key)
    }
    suite.defaults.set("plain", forKey: "a")
    suite.defaults.set("prefix-like", forKey: "asynccache.defaultX")
    suite.defaults.set(7, forKey: "asynccache")

    try await layer.removeAll()

    #expect(await layer.keys.isEmpty)
    #expect(try await layer.value(for: "a") == nil)
    #expect(Set(await neighbour.keys) == ["a", "b", "c"])
    #expect(Set(await elsewhere.keys) == ["a", "b", "c"])
    #expect(try await elsewhere.value(for: "a") == Data([3]))
    let defaults = suite.defaults
    #expect(defaults.string(forKey: "a") == "plain")
    #expect(defaults.string(forKey: "asynccache.defaultX") == "prefix-like")
    #expect(defaults.integer(forKey: "asynccache") == 7)
  }

  // MARK: Damaged values

  enum Damage: String, CaseIterable, Sendable {
    case flippedValueBit, flippedExpiryBit, truncated, headerOnly, empty, wrongMagic, newerVersion
    case foreignString, foreignNumber, movedFromAnotherKey, undecodableValue
  }

  @Test(
    "a damaged, foreign or undecodable stored value is a miss that is removed and counted", arguments: Damage.allCases)
  func damaged(_ damage: Damage) async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let layer = try UserDefaultsLayer<String, Preferences>(suiteName: suite.name)
    try await layer.insert(Preferences(theme: "dark", fontSize: 14), for: "a")
    try await layer.insert(Preferences(theme: "light", fontSize: 12), for: "b")
    let defaults = suite.defaults
    var stored = [UInt8](try #require(defaults.data(forKey: "asynccache.default.a")))
    let replacement: Any
    switch damage {
    case .flippedValueBit:
      stored[stored.count - 2] ^= 0x01
      replacement = Data(stored)
    case .flippedExpiryBit:
      stored[10] ^= 0x40
      replacement = Data(stored)
    case .truncated: replacement = Data(stored.dropLast())
    case .headerOnly: replacement = Data(stored.prefix(UserDefaultsRecord.headerSize))
    case .empty: replacement = Data()
    case .wrongMagic:
      stored[0] = 0
      replacement = Data(stored)
    case .newerVersion:
      stored[4] = 2
      replacement = Data(stored)
    case .foreignString: replacement = "hello"
    case .foreignNumber: replacement = 42
    case .movedFromAnotherKey: replacement = try #require(defaults.data(forKey: "asynccache.default.b"))
    case .undecodableValue:
      let payload = Data("not json".utf8)
      replacement = UserDefaultsRecord.make(
        payload: payload, metadata: [], expiry: .max, defaultsKey: "asynccache.default.a")
    }
    defaults.set(replacement, forKey: "asynccache.default.a")
    #expect(await layer.keys.count == (damage == .undecodableValue ? 2 : 1))

    #expect(try await layer.value(for: "a") == nil)
    #expect(suite.defaults.object(forKey: "asynccache.default.a") == nil)
    #expect(try await layer.value(for: "b") == Preferences(theme: "light", fontSize: 12))
    let statistics = await layer.statistics
    #expect(statistics.damagedEntries == 1)
    #expect(statistics.misses == 1)
    #expect(statistics.hits == 1)
  }

  // MARK: Refused input

  @Test("a value over the size limit is refused with an error naming the key, and the old value removed")
  func valueTooLarge() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let layer = try UserDefaultsLayer<String, Data>(suiteName: suite.name, configuration: .init(maximumEntrySize: 100))
    try await layer.insert(Data(count: 100), for: "thumb")  // at the limit
    #expect(try await layer.value(for: "thumb")?.count == 100)

    await #expect { try await layer.insert(Data(count: 101), for: "thumb") } throws: { error in
      guard let error = error as? PersistenceError else { return false }
      return error.code == .valueTooLarge && error.message.contains("\"thumb\"") && error.message.contains("101")
    }
    #expect(try await layer.value(for: "thumb") == nil)
    #expect(await layer.keys.isEmpty)
  }

  @Test("the default size limit is 64 KiB")
  func defaultSizeLimit() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let layer = try UserDefaultsLayer<String, Data>(suiteName: suite.name)
    #expect(layer.configuration.maximumEntrySize == 64 * 1024)
    try await layer.insert(Data(count: 64 * 1024), for: "k")
    await #expect { try await layer.insert(Data(count: 64 * 1024 + 1), for: "k") } throws: { error in
      (error as? PersistenceError)?.code == .valueTooLarge
    }
  }

  @Test("a value that cannot be encoded is an encodingFailed error and the old value is removed")
  func encodingFailure() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let layer = try UserDefaultsLayer<String, Unencodable>(suiteName: suite.name)
    suite.defaults.set(
      UserDefaultsRecord.make(
        payload: Data("{}".utf8), metadata: [], expiry: .max, defaultsKey: "asynccache.default.k"),
      forKey: "asynccache.default.k")
    #expect(try await layer.value(for: "k") != nil)

    await #expect { try await layer.insert(Unencodable(), for: "k") } throws: { error in
      guard let error = error as? PersistenceError else { return false }
      return error.code == .encodingFailed && error.message.contains("\"k\"")
    }
    #expect(suite.defaults.object(forKey: "asynccache.default.k") == nil)
  }

  @Test(
    "invalid suite names are refused with an error naming them",
    arguments: ["", "NSGlobalDomain", "a/b", "/tmp/x", ".", "..", "a\0b", String(repeating: "x", count: 201)]
  )
  func invalidSuiteName(_ name: String) {
    #expect {
      try UserDefaultsLayer<String, Data>(suiteName: name)
    } throws: { error in
      guard let error = error as? AsyncCacheError else { return false }
      return error.code == .invalidConfiguration && error.message.contains("suite name \(name.debugDescription)")
    }
  }

  @Test("the app's bundle identifier is refused as a suite name", .enabled(if: Bundle.main.bundleIdentifier != nil))
  func bundleIdentifierSuite() throws {
    let identifier = try #require(Bundle.main.bundleIdentifier)
    #expect(throws: AsyncCacheError.self) { try UserDefaultsLayer<String, Data>(suiteName: identifier) }
  }

  @Test(
    "configuration values out of range are refused",
    arguments: [
      UserDefaultsLayer<String, Data>.Configuration(namespace: ""),
      .init(namespace: "a.b"),
      .init(maximumEntrySize: 0),
      .init(timeToLive: .zero),
    ])
  func invalidConfiguration(_ configuration: UserDefaultsLayer<String, Data>.Configuration) {
    #expect {
      try UserDefaultsLayer<String, Data>(suiteName: "org.swift-async-cache.tests.unused", configuration: configuration)
    } throws: { error in
      (error as? AsyncCacheError)?.code == .invalidConfiguration
    }
  }

  // MARK: Keys

  @Test("keys lists the unexpired entries whose keys decode")
  func keys() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let clock = ManualClock()
    let layer = try UserDefaultsLayer<Int, String>(
      suiteName: suite.name, configuration: .init(clock: clock), keyEncoding: .description, valueCoder: .utf8)
    for key in [1, 2, 3] { try await layer.insert("\(key)", for: key) }
    try await layer.insert("gone soon", for: 4, timeToLive: .seconds(1))
    let defaults = suite.defaults
    defaults.set(
      UserDefaultsRecord.make(
        payload: Data("x".utf8), metadata: [], expiry: .max, defaultsKey: "asynccache.default.seven"),
      forKey: "asynccache.default.seven")
    defaults.set("unrelated", forKey: "5")
    clock.advance(by: .seconds(1))

    #expect(Set(await layer.keys) == [1, 2, 3])
    try await layer.removeValue(for: 2)
    #expect(Set(await layer.keys) == [1, 3])
  }

  // MARK: Concurrency

  @Test("many tasks can use one layer at once")
  func concurrentUse() async throws {
    let suite = TestSuite()
    defer { suite.remove() }
    let layer = try UserDefaultsLayer<Int, String>(
      suiteName: suite.name, keyEncoding: .description, valueCoder: .utf8)
    try await withThrowingTaskGroup(of: Void.self) { group in
      for worker in 0..<4 {
        group.addTask {
          var generator = SeededGenerator(seed: UInt64(worker))
          for _ in 0..<50 {
            let key = Int.random(in: 0..<20, using: &generator)
            switch Int.random(in: 0..<3, using: &generator) {
            case 0: try await layer.insert("\(key)", for: key)
            case 1: try await layer.removeValue(for: key)
            default:
              if let value = try await layer.value(for: key) { #expect(value == "\(key)") }
            }
          }
        }
      }
      try await group.waitForAll()
    }
    for key in await layer.keys { #expect(try await layer.value(for: key) == "\(key)") }
  }
}

extension Data {
  /// The bytes of a string of hexadecimal digits.
  init(hexadecimal: String) {
    var bytes: [UInt8] = []
    var index = hexadecimal.startIndex
    while index < hexadecimal.endIndex {
      let next = hexadecimal.index(index, offsetBy: 2)
      bytes.append(UInt8(hexadecimal[index..<next], radix: 16) ?? 0)
      index = next
    }
    self.init(bytes)
  }
}
