import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

// MARK: Fixtures shared by the DiskLayer suites

/// A temporary parent directory holding a layer's directory, `cache`, so that a test can check
/// that nothing appears beside it.
struct DiskFixture {
  let parent: TemporaryDirectory

  init() throws { parent = try TemporaryDirectory("disklayer") }

  /// The layer's directory.
  var directory: URL { parent.appending("cache") }

  /// Opens a layer with `String` keys and `Data` values on ``directory``.
  func open(
    _ configuration: DiskLayer<String, Data>.Configuration = .init(),
    fileSystem: any DiskFileSystem = POSIXDiskFileSystem(),
    fileNameHash: @escaping @Sendable (UnsafeRawBufferPointer) -> SHA256.Digest = { SHA256.hash($0) }
  ) async throws -> DiskLayer<String, Data> {
    try await DiskLayer(
      directory: directory, configuration: configuration, keyEncoding: .string, valueCoder: .data,
      fileSystem: fileSystem, fileNameHash: fileNameHash)
  }

  /// The names in the layer's directory, sorted.
  var names: [String] {
    ((try? FileManager.default.contentsOfDirectory(atPath: directory.path)) ?? []).sorted()
  }

  /// The names of temporary files in the layer's directory.
  var temporaryNames: [String] { names.filter { $0.contains(".tmp-") } }

  /// The sum of the sizes of the files in the layer's directory.
  var bytesOnDisk: Int {
    names.reduce(0) { sum, name in
      let attributes = try? FileManager.default.attributesOfItem(atPath: directory.appendingPathComponent(name).path)
      return sum + ((attributes?[.size] as? Int) ?? 0)
    }
  }

  /// The file that holds `key` (with the production file-name hash).
  func file(for key: String) -> URL {
    directory.appendingPathComponent(SHA256.hash(Array(key.utf8)).hexString)
  }

  func remove() { parent.remove() }
}

/// The size of the file of an entry: header, key, value.
func diskEntrySize(key: String, valueCount: Int) -> Int {
  DiskEntryFormat.headerSize + key.utf8.count + valueCount
}

/// `count` bytes that differ by `seed`.
func diskBytes(_ count: Int, seed: UInt8 = 1) -> Data {
  Data((0..<count).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ Int(seed)) })
}

extension DiskLayer {
  /// Structural violations of the layer's index (empty when sound).
  var indexViolations: [String] { index.invariantViolations() }
}

// MARK: Behaviour

@Suite("DiskLayer", .timeLimit(.minutes(3)))
struct DiskLayerTests {
  struct Profile: Codable, Hashable, Sendable {
    var name: String
    var scores: [Int]
  }

  // MARK: Round trips

  @Test func valuesSurviveReopeningTheDirectory() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let clock = ManualClock()
    let values = ["empty": Data(), "one": Data([7]), "large": diskBytes(300_000), "ünïcödé 🔑": diskBytes(10, seed: 9)]
    let expiresAt = clock.now.advanced(by: .seconds(3600))
    do {
      let layer = try await fixture.open(.init(clock: clock))
      for (key, value) in values { try await layer.insert(CacheEntry(value, expiresAt: expiresAt), for: key) }
      try await layer.insert(Data("forever".utf8), for: "forever")
      #expect(await layer.statistics.writes == 5)
    }
    let reopened = try await fixture.open(.init(clock: clock))
    for (key, value) in values {
      #expect(try await reopened.entry(for: key) == CacheEntry(value, expiresAt: expiresAt))
    }
    #expect(try await reopened.entry(for: "forever") == CacheEntry(Data("forever".utf8)))
    #expect(await Set(reopened.keys) == Set(values.keys).union(["forever"]))
    let expectedBytes =
      values.reduce(0) { $0 + diskEntrySize(key: $1.key, valueCount: $1.value.count) }
      + diskEntrySize(key: "forever", valueCount: 7)
    #expect(await reopened.totalBytes == expectedBytes)
    #expect(fixture.bytesOnDisk == expectedBytes)
    #expect(await reopened.statistics.hits == 5)
    #expect(await reopened.indexViolations.isEmpty)
  }

  @Test func codableValuesRoundTripAsJSON() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let profile = Profile(name: "Ada", scores: [3, 1, 4])
    do {
      let layer = try await DiskLayer<String, Profile>(directory: fixture.directory)
      try await layer.insert(profile, for: "ada")
    }
    let reopened = try await DiskLayer<String, Profile>(directory: fixture.directory)
    #expect(try await reopened.value(for: "ada") == profile)
    // The file holds the header, the key, then the value as JSON.
    let stored = try Data(contentsOf: fixture.file(for: "ada"))
    #expect(stored[40..<43] == Data("ada".utf8))
    #expect(try JSONDecoder().decode(Profile.self, from: stored.suffix(from: 43)) == profile)
  }

  @Test func nonStringKeysAndOtherCodersRoundTrip() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await DiskLayer<Int, Profile>(
      directory: fixture.directory, keyEncoding: .description, valueCoder: .propertyList)
    try await layer.insert(Profile(name: "x", scores: []), for: -42)
    let reopened = try await DiskLayer<Int, Profile>(
      directory: fixture.directory, keyEncoding: .description, valueCoder: .propertyList)
    #expect(try await reopened.value(for: -42) == Profile(name: "x", scores: []))
    #expect(await reopened.keys == [-42])
    let data = try await DiskLayer<Int, Data>(directory: fixture.directory, keyEncoding: .description)
    #expect(try await data.value(for: 7) == nil)
  }

  @Test func replacingAValueKeepsOneFileAndCountsItsNewSize() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open()
    try await layer.insert(diskBytes(100), for: "a")
    try await layer.insert(diskBytes(50, seed: 2), for: "a")
    #expect(try await layer.value(for: "a") == diskBytes(50, seed: 2))
    #expect(fixture.names == [fixture.file(for: "a").lastPathComponent])
    #expect(await layer.count == 1)
    #expect(await layer.totalBytes == diskEntrySize(key: "a", valueCount: 50))
  }

  @Test func removingAValueDeletesItsFile() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open()
    try await layer.insert(diskBytes(10), for: "a")
    try await layer.insert(diskBytes(10), for: "b")
    try await layer.removeValue(for: "a")
    try await layer.removeValue(for: "never stored")
    #expect(try await layer.value(for: "a") == nil)
    #expect(fixture.names == [fixture.file(for: "b").lastPathComponent])
    #expect(await layer.count == 1)
    let reopened = try await fixture.open()
    #expect(try await reopened.value(for: "a") == nil)
    #expect(try await reopened.value(for: "b") == diskBytes(10))
  }

  @Test func removingAllKeepsTheDirectoryAndFilesThatAreNotEntries() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open()
    for key in ["a", "b", "c"] { try await layer.insert(diskBytes(10), for: key) }
    try Data("mine".utf8).write(to: fixture.directory.appendingPathComponent("README.txt"))
    try await layer.removeAll()
    #expect(fixture.names == ["README.txt"])
    #expect(await layer.count == 0)
    #expect(await layer.totalBytes == 0)
    #expect(try await layer.value(for: "a") == nil)
    try await layer.insert(diskBytes(10), for: "d")
    #expect(try await layer.value(for: "d") == diskBytes(10))
  }

  @Test func keysAreListedFromTheMostRecentlyUsed() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open()
    for key in ["a", "b", "c"] { try await layer.insert(diskBytes(4), for: key) }
    _ = try await layer.value(for: "a")
    #expect(await layer.keys == ["a", "c", "b"])
  }

  @Test func keysThatNoLongerDecodeAreLeftOut() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let strings = try await fixture.open()
    try await strings.insert(diskBytes(4), for: "not a number")
    try await strings.insert(diskBytes(4), for: "42")
    let numbers = try await DiskLayer<Int, Data>(directory: fixture.directory, keyEncoding: .description)
    #expect(await numbers.keys == [42])
  }

  @Test func aKeyThatCannotBeEncodedIsATypedError() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    struct Unencodable: Error {}
    let layer = try await DiskLayer<Int, Data>(
      directory: fixture.directory,
      keyEncoding: CacheKeyEncoding(encode: { _ in throw Unencodable() }, decode: { _ in 0 }))
    await #expect {
      try await layer.insert(Data(), for: 1)
    } throws: { error in
      (error as? PersistenceError)?.code == .encodingFailed && (error as? PersistenceError)?.underlying is Unencodable
    }
    await #expect(throws: PersistenceError.self) { _ = try await layer.value(for: 1) }
  }

  // MARK: Expiry

  @Test func entriesExpireByTheInjectedClockAndAreDeleted() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let clock = ManualClock()
    let layer = try await fixture.open(.init(clock: clock))
    try await layer.insert(diskBytes(8), for: "a", timeToLive: .seconds(60))
    clock.advance(by: .seconds(59))
    #expect(try await layer.value(for: "a") == diskBytes(8))
    clock.advance(by: .seconds(1))
    #expect(try await layer.value(for: "a") == nil)
    #expect(fixture.names.isEmpty)
    let statistics = await layer.statistics
    #expect(statistics.evictions[.expired] == 1)
    #expect(statistics.hits == 1 && statistics.misses == 1)
    #expect(statistics.count == 0 && statistics.totalBytes == 0)
  }

  @Test func expiryIsStoredInTheFile() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let clock = ManualClock()
    try await fixture.open(.init(clock: clock)).insert(diskBytes(8), for: "a", timeToLive: .seconds(60))
    clock.advance(by: .seconds(30))
    let reopened = try await fixture.open(.init(clock: clock))
    #expect(try await reopened.entry(for: "a")?.expiresAt == ManualClock.defaultStart.advanced(by: .seconds(60)))
    clock.advance(by: .seconds(30))
    #expect(try await reopened.value(for: "a") == nil)
    // An expired file found when opening is deleted there.
    try await reopened.insert(diskBytes(8), for: "b", timeToLive: .seconds(1))
    clock.advance(by: .seconds(1))
    let third = try await fixture.open(.init(clock: clock))
    #expect(await third.count == 0)
    #expect(await third.statistics.evictions[.expired] == 1)
    #expect(fixture.names.isEmpty)
  }

  @Test func theConfiguredTimeToLiveCapsAnEntrysExpiry() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let clock = ManualClock()
    let layer = try await fixture.open(.init(timeToLive: .seconds(10), clock: clock))
    try await layer.insert(CacheEntry(diskBytes(8), expiresAt: clock.now.advanced(by: .seconds(3600))), for: "long")
    try await layer.insert(CacheEntry(diskBytes(8), expiresAt: clock.now.advanced(by: .seconds(5))), for: "short")
    try await layer.insert(diskBytes(8), for: "none")
    #expect(try await layer.entry(for: "long")?.expiresAt == clock.now.advanced(by: .seconds(10)))
    #expect(try await layer.entry(for: "short")?.expiresAt == clock.now.advanced(by: .seconds(5)))
    #expect(try await layer.entry(for: "none")?.expiresAt == clock.now.advanced(by: .seconds(10)))
  }

  @Test func insertingAnExpiredEntryRemovesThePreviousOne() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let clock = ManualClock()
    let layer = try await fixture.open(.init(clock: clock))
    try await layer.insert(diskBytes(8), for: "a")
    try await layer.insert(CacheEntry(diskBytes(9), expiresAt: clock.now), for: "a")
    #expect(try await layer.value(for: "a") == nil)
    #expect(fixture.names.isEmpty)
  }

  @Test func removeExpiredDeletesOnlyExpiredFiles() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let clock = ManualClock()
    let layer = try await fixture.open(.init(clock: clock))
    try await layer.insert(diskBytes(8), for: "a", timeToLive: .seconds(10))
    try await layer.insert(diskBytes(8), for: "b", timeToLive: .seconds(20))
    try await layer.insert(diskBytes(8), for: "c", timeToLive: .seconds(30))
    try await layer.insert(diskBytes(8), for: "d")
    clock.advance(by: .seconds(20))
    #expect(await layer.keys.sorted() == ["c", "d"])  // expired keys are not listed
    #expect(await layer.removeExpired() == 2)
    #expect(fixture.names == [fixture.file(for: "c"), fixture.file(for: "d")].map(\.lastPathComponent).sorted())
    #expect(await layer.count == 2)
    #expect(await layer.statistics.evictions[.expired] == 2)
    #expect(await layer.removeExpired() == 0)
  }

  // MARK: Limits

  @Test func theSizeLimitEvictsTheLeastRecentlyReadAndIsNeverExceeded() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let entry = diskEntrySize(key: "a", valueCount: 100)
    let layer = try await fixture.open(.init(sizeLimit: 3 * entry))
    for key in ["a", "b", "c"] {
      try await layer.insert(diskBytes(100), for: key)
      #expect(fixture.bytesOnDisk <= 3 * entry)
    }
    _ = try await layer.value(for: "a")  // b is now the least recently used
    try await layer.insert(diskBytes(100), for: "d")
    #expect(fixture.bytesOnDisk <= 3 * entry)
    #expect(try await layer.value(for: "b") == nil)
    #expect(await Set(layer.keys) == ["a", "c", "d"])
    // A larger entry evicts as many as it needs, least recently used first: c, then a.
    _ = try await layer.value(for: "d")
    try await layer.insert(diskBytes(2 * 100 + 41), for: "e")
    #expect(await Set(layer.keys) == ["d", "e"])
    #expect(fixture.bytesOnDisk <= 3 * entry)
    #expect(await layer.totalBytes == fixture.bytesOnDisk)
    #expect(await layer.statistics.evictions[.costLimit] == 3)
    #expect(await layer.indexViolations.isEmpty)
  }

  @Test func replacingAnEntryNeverEvictsItself() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let entry = diskEntrySize(key: "a", valueCount: 100)
    let layer = try await fixture.open(.init(sizeLimit: 2 * entry))
    try await layer.insert(diskBytes(100), for: "a")
    try await layer.insert(diskBytes(100), for: "b")
    try await layer.insert(diskBytes(150, seed: 3), for: "a")  // a is the oldest, but it is being replaced
    #expect(try await layer.value(for: "a") == diskBytes(150, seed: 3))
    #expect(try await layer.value(for: "b") == nil)
    #expect(fixture.bytesOnDisk <= 2 * entry)
  }

  @Test func theCountLimitEvictsTheLeastRecentlyUsed() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open(.init(countLimit: 2))
    try await layer.insert(diskBytes(10), for: "a")
    try await layer.insert(diskBytes(10), for: "b")
    _ = try await layer.value(for: "a")
    try await layer.insert(diskBytes(10), for: "c")
    #expect(await Set(layer.keys) == ["a", "c"])
    #expect(fixture.names.count == 2)
    try await layer.insert(diskBytes(20), for: "c")  // a replacement adds no entry
    #expect(await Set(layer.keys) == ["a", "c"])
    #expect(await layer.statistics.evictions[.countLimit] == 1)
  }

  @Test func openingWithSmallerLimitsEvictsTheOldestFiles() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open()
    for key in ["a", "b", "c", "d", "e"] { try await layer.insert(diskBytes(10), for: key) }
    try setModificationTimes(fixture, ["a": -500, "b": -100, "c": -400, "d": -200, "e": -300])
    let smaller = try await fixture.open(.init(countLimit: 2))
    #expect(await smaller.keys == ["b", "d"])
    #expect(fixture.names.count == 2)
    #expect(await smaller.statistics.evictions[.countLimit] == 3)
  }

  @Test func recencyOrderSurvivesReopeningThroughModificationTimes() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let entry = diskEntrySize(key: "a", valueCount: 10)
    for key in ["a", "b", "c"] { try await fixture.open().insert(diskBytes(10), for: key) }
    // a was used longest ago, then c, then b.
    try setModificationTimes(fixture, ["a": -7200, "b": -60, "c": -3600])
    let reopened = try await fixture.open(.init(sizeLimit: 3 * entry))
    #expect(await reopened.keys == ["b", "c", "a"])
    try await reopened.insert(diskBytes(10), for: "d")
    #expect(await Set(reopened.keys) == ["b", "c", "d"])
  }

  @Test func aHitRefreshesAStaleModificationTimeAtMostOnceAMinute() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let entry = diskEntrySize(key: "a", valueCount: 10)
    for key in ["a", "b"] { try await fixture.open().insert(diskBytes(10), for: key) }
    try setModificationTimes(fixture, ["a": -7200, "b": -3600])
    let fileSystem = FakeDiskFileSystem()
    let layer = try await fixture.open(fileSystem: fileSystem)
    _ = try await layer.value(for: "a")
    _ = try await layer.value(for: "a")
    #expect(fileSystem.count(of: .touch) == 1)
    let modified = try #require(
      FileManager.default.attributesOfItem(atPath: fixture.file(for: "a").path)[.modificationDate] as? Date)
    #expect(modified.timeIntervalSinceNow > -60)
    // After a restart, b is now the least recently used.
    let reopened = try await fixture.open(.init(sizeLimit: 2 * entry))
    try await reopened.insert(diskBytes(10), for: "c")
    #expect(await Set(reopened.keys) == ["a", "c"])
  }

  @Test func aHundredMegabyteValueIsRefusedBeforeAnythingIsWritten() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open()  // per-entry cap: 64 MiB
    try await layer.insert(Data("old".utf8), for: "huge")
    // The 100 MB buffer lives only inside this call.
    func insertHugeValue() async -> (any Error)? {
      do {
        try await layer.insert(Data(count: 100_000_000), for: "huge")
        return nil
      } catch {
        return error
      }
    }
    let error = try #require(await insertHugeValue() as? PersistenceError)
    #expect(error.code == .valueTooLarge)
    #expect(error.message.contains("\"huge\""))
    #expect(error.message.contains("100000000 bytes"))
    #expect(error.message.contains("\(64 << 20) bytes"))
    // Nothing was written, and the stale value is gone rather than outliving the caller's intent.
    #expect(fixture.names.isEmpty)
    #expect(try await layer.value(for: "huge") == nil)
    let statistics = await layer.statistics
    #expect(statistics.evictions[.oversized] == 1)
    #expect(statistics.writes == 1 && statistics.failedWrites == 0)
  }

  @Test func theCapCountsTheEncodedValueAndTheSizeLimitTheWholeFile() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open(.init(sizeLimit: 300, maximumEntrySize: 200))
    try await layer.insert(diskBytes(200), for: "k")
    #expect(try await layer.value(for: "k") == diskBytes(200))
    await #expect {
      try await layer.insert(diskBytes(201), for: "k2")
    } throws: { error in
      let error = error as? PersistenceError
      return error?.code == .valueTooLarge && error?.message.contains("201 bytes") == true
        && error?.message.contains("maximumEntrySize") == true
    }
    // 40-byte header + 70-byte key + 200-byte value = 310 bytes: over the size limit.
    let longKey = String(repeating: "x", count: 70)
    await #expect {
      try await layer.insert(diskBytes(200), for: longKey)
    } throws: { error in
      let error = error as? PersistenceError
      return error?.code == .valueTooLarge && error?.message.contains("310 bytes") == true
        && error?.message.contains("sizeLimit") == true
    }
    #expect(fixture.names == [fixture.file(for: "k").lastPathComponent])
  }

  @Test func keysLongerThanItReadsBackAreRefused() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open(.init(sizeLimit: 64 << 20))
    let key = String(repeating: "k", count: (16 << 20) + 1)
    await #expect {
      try await layer.insert(diskBytes(1), for: key)
    } throws: { error in
      let error = error as? PersistenceError
      return error?.code == .valueTooLarge && error?.message.contains("longest key") == true
    }
    #expect(fixture.names.isEmpty)
  }

  @Test func expiredEntriesMakeRoomBeforeLiveOnes() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let clock = ManualClock()
    let entrySize = 40 + 1 + 100
    let layer = try await fixture.open(.init(sizeLimit: entrySize * 3, clock: clock))
    try await layer.insert(diskBytes(100), for: "a")
    try await layer.insert(CacheEntry(diskBytes(100), expiresAt: clock.now.advanced(by: .seconds(5))), for: "b")
    try await layer.insert(diskBytes(100), for: "c")
    clock.advance(by: .seconds(10))
    try await layer.insert(diskBytes(100), for: "d")
    #expect(Set(await layer.keys) == ["a", "c", "d"], "the expired b went, not the least recently used a")
    #expect(await layer.statistics.evictions[.expired] == 1)
  }

  @Test(
    "invalid configurations are refused, naming the value",
    arguments: [
      (DiskLayer<String, Data>.Configuration(sizeLimit: 0), "sizeLimit"),
      (.init(countLimit: 0), "countLimit"),
      (.init(sizeLimit: 100, maximumEntrySize: 101), "maximumEntrySize"),
      (.init(maximumEntrySize: 0), "maximumEntrySize"),
      (.init(timeToLive: .zero), "timeToLive"),
    ])
  func invalidConfiguration(configuration: DiskLayer<String, Data>.Configuration, name: String) async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    await #expect {
      _ = try await fixture.open(configuration)
    } throws: { error in
      let error = error as? AsyncCacheError
      return error?.code == .invalidConfiguration && error?.message.contains(name) == true
    }
    #expect(!FileManager.default.fileExists(atPath: fixture.directory.path))
  }

  @Test func aURLThatIsNotAFileURLIsRefused() async {
    await #expect {
      _ = try await DiskLayer<String, Data>(directory: URL(string: "https://example.com/cache")!)
    } throws: { error in
      (error as? AsyncCacheError)?.code == .invalidConfiguration
    }
  }

  // MARK: In a chain

  @Test func aDiskHitBackFillsMemoryWithItsExpiry() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let clock = ManualClock()
    let expiresAt = clock.now.advanced(by: .seconds(300))
    try await fixture.open(.init(clock: clock)).insert(CacheEntry(diskBytes(64), expiresAt: expiresAt), for: "a")
    let memory = try MemoryLayer<String, Data>(configuration: .init(clock: clock))
    let disk = try await fixture.open(.init(clock: clock))
    let chain = try CacheChain<String, Data>([memory, disk])
    #expect(try await chain.entry(for: "a") == CacheEntry(diskBytes(64), expiresAt: expiresAt))
    #expect(memory.entry(for: "a") == CacheEntry(diskBytes(64), expiresAt: expiresAt))
    clock.advance(by: .seconds(300))
    #expect(try await chain.entry(for: "a") == nil)
  }

  // MARK: Model

  /// Random operations against a simple model of a size- and count-limited LRU store; after
  /// each, the files on disk, the layer's totals and its contents match the model.
  @Test(arguments: [1, 2, 3] as [UInt64])
  func randomOperationsMatchAModel(seed: UInt64) async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let sizeLimit = 4000
    let countLimit = 6
    let layer = try await fixture.open(.init(sizeLimit: sizeLimit, countLimit: countLimit))
    var generator = SeededGenerator(seed: seed)
    var model: [(key: String, value: Data)] = []  // least recently used first
    func size(_ item: (key: String, value: Data)) -> Int { diskEntrySize(key: item.key, valueCount: item.value.count) }
    for step in 0..<300 {
      let key = "k\(Int.random(in: 0..<10, using: &generator))"
      switch Int.random(in: 0..<20, using: &generator) {
      case 0..<10:
        let value = diskBytes(Int.random(in: 0...1200, using: &generator), seed: UInt8(step & 0xFF))
        try await layer.insert(value, for: key)
        model.removeAll { $0.key == key }
        let newSize = diskEntrySize(key: key, valueCount: value.count)
        while !model.isEmpty, model.reduce(newSize, { $0 + size($1) }) > sizeLimit || model.count + 1 > countLimit {
          model.removeFirst()
        }
        model.append((key, value))
      case 10..<17:
        let found = try await layer.value(for: key)
        if let index = model.firstIndex(where: { $0.key == key }) {
          #expect(found == model[index].value, "step \(step): \(key)")
          model.append(model.remove(at: index))
        } else {
          #expect(found == nil, "step \(step): \(key)")
        }
      default:
        try await layer.removeValue(for: key)
        model.removeAll { $0.key == key }
      }
      let modelBytes = model.reduce(0) { $0 + size($1) }
      #expect(await layer.totalBytes == modelBytes, "step \(step)")
      #expect(fixture.bytesOnDisk == modelBytes, "step \(step)")
      #expect(modelBytes <= sizeLimit)
      #expect(await layer.keys == model.reversed().map(\.key), "step \(step)")
    }
    #expect(await layer.indexViolations.isEmpty)
    #expect(fixture.temporaryNames.isEmpty)
    let reopened = try await fixture.open(.init(sizeLimit: sizeLimit, countLimit: countLimit))
    for (key, value) in model { #expect(try await reopened.value(for: key) == value) }
    #expect(await reopened.count == model.count)
  }
}

/// Sets the modification times of the files of `keys` to now plus the given seconds.
func setModificationTimes(_ fixture: DiskFixture, _ offsets: [String: TimeInterval]) throws {
  for (key, offset) in offsets {
    try FileManager.default.setAttributes(
      [.modificationDate: Date(timeIntervalSinceNow: offset)], ofItemAtPath: fixture.file(for: key).path)
  }
}
