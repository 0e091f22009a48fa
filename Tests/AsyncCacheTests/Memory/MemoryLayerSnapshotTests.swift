import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import TestSupport
import Testing

@testable import AsyncCache

@Suite("MemoryLayer snapshots", .timeLimit(.minutes(3)))
struct MemoryLayerSnapshotTests {
  struct UserKey: Codable, Hashable, Sendable {
    var id: Int
    var region: String
  }

  /// A value whose encoding always fails.
  struct Unencodable: Codable, Sendable {
    init() {}
    init(from decoder: any Decoder) throws {}
    func encode(to encoder: any Encoder) throws { throw TestError("unencodable") }
  }

  static func layer(
    clock: ManualClock,
    countLimit: Int = 1_000,
    costLimit: Int = .max,
    cost: (@Sendable (Int) -> Int)? = nil,
    timeToLive: Duration? = nil
  ) throws -> MemoryLayer<String, Int> {
    try layer(
      String.self, Int.self, clock: clock, countLimit: countLimit, costLimit: costLimit, cost: cost,
      timeToLive: timeToLive)
  }

  static func layer<Key, Value>(
    _: Key.Type,
    _: Value.Type,
    clock: ManualClock,
    countLimit: Int = 1_000,
    costLimit: Int = .max,
    cost: (@Sendable (Value) -> Int)? = nil,
    timeToLive: Duration? = nil,
    segmentCount: Int? = 1,
    evictionPolicy: EvictionPolicy = .leastRecentlyUsed
  ) throws -> MemoryLayer<Key, Value> {
    // LRU by default: these tests are about the order a snapshot keeps, which LRU shows exactly.
    try MemoryLayer(
      configuration: .init(
        countLimit: countLimit, costLimit: costLimit, cost: cost, timeToLive: timeToLive, segmentCount: segmentCount,
        evictionPolicy: evictionPolicy, clock: clock))
  }

  // MARK: Round trips

  @Test("a restored layer holds the same values with the same expiries")
  func roundTrip() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    let source = try Self.layer(String.self, String.self, clock: clock)
    try source.insert(CacheEntry("forever"), for: "a")
    try source.insert(CacheEntry("soon", expiresAt: clock.now.advanced(by: .seconds(30))), for: "b")
    try source.insert("later", for: "c/d", timeToLive: .seconds(3_600))

    #expect(try await source.writeSnapshot(to: file) == 3)
    clock.advance(by: .seconds(5))
    let restored = try Self.layer(String.self, String.self, clock: clock)
    let result = try #require(try await restored.restoreSnapshot(from: file))

    #expect(result == .init(restored: 3, skippedExpired: 0, writtenAt: ManualClock.defaultStart))
    #expect(restored.entry(for: "a") == CacheEntry("forever"))
    #expect(
      restored.entry(for: "b") == CacheEntry("soon", expiresAt: ManualClock.defaultStart.advanced(by: .seconds(30))))
    #expect(
      restored.entry(for: "c/d")
        == CacheEntry("later", expiresAt: ManualClock.defaultStart.advanced(by: .seconds(3_600))))
    #expect(restored.count == 3)
    #expect(restored.invariantViolations.isEmpty)
  }

  @Test("Codable struct keys and collection values round-trip")
  func codableStructKeys() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("users.snapshot")
    let clock = ManualClock()
    let source = try Self.layer(UserKey.self, [String].self, clock: clock)
    let keys = (0..<50).map { UserKey(id: $0, region: $0.isMultiple(of: 2) ? "eu" : "us/west") }
    for key in keys { try source.insert(["\(key.id)", key.region, ""], for: key) }

    try await source.writeSnapshot(to: file)
    let restored = try Self.layer(UserKey.self, [String].self, clock: clock)
    try await restored.restoreSnapshot(from: file)

    #expect(Set(restored.keys) == Set(keys))
    for key in keys { #expect(restored.value(for: key) == ["\(key.id)", key.region, ""]) }
  }

  @Test("a layer with many segments restores every entry")
  func manySegments() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    let source = try Self.layer(Int.self, Int.self, clock: clock, countLimit: 10_000, segmentCount: 16)
    for key in 0..<2_000 { try source.insert(key * 3, for: key) }

    #expect(try await source.writeSnapshot(to: file) == 2_000)
    let restored = try Self.layer(Int.self, Int.self, clock: clock, countLimit: 10_000, segmentCount: 16)
    #expect(try await restored.restoreSnapshot(from: file)?.restored == 2_000)

    for key in 0..<2_000 { #expect(restored.value(for: key) == key * 3) }
    #expect(restored.invariantViolations.isEmpty)
  }

  // MARK: Recency

  @Test("a restored layer keeps the recency order, so it evicts the least recently used first")
  func recencyOrder() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    let source = try Self.layer(clock: clock, countLimit: 10)
    for (index, key) in ["a", "b", "c", "d"].enumerated() { try source.insert(index, for: key) }
    _ = source.value(for: "b")
    _ = source.value(for: "a")  // least to most recent: c, d, b, a
    try await source.writeSnapshot(to: file)

    let full = try Self.layer(clock: clock, countLimit: 4)
    try await full.restoreSnapshot(from: file)
    #expect(full.store.keysInEvictionOrder == [["c", "d", "b", "a"]])
    try full.insert(4, for: "e")
    #expect(!full.contains("c"))
    try full.insert(5, for: "f")
    #expect(Set(full.keys) == ["b", "a", "e", "f"])

    // A layer smaller than the snapshot keeps the most recently used entries; the older ones
    // are left out, not inserted and evicted.
    let small = try Self.layer(clock: clock, countLimit: 2)
    let result = try await small.restoreSnapshot(from: file)
    #expect(result?.restored == 2)
    #expect(result?.skippedOverLimits == 2)
    #expect(small.store.keysInEvictionOrder == [["b", "a"]])
    #expect(small.statistics.evictions[.countLimit] == 0)
  }

  /// The policies a snapshot is restored into: each must keep the most recently used entries.
  enum RestoringPolicy: String, CaseIterable, Sendable, CustomTestStringConvertible {
    case leastRecentlyUsed
    case windowTinyLFU
    /// Whatever a layer configured without a policy runs.
    case byDefault

    var testDescription: String { rawValue }

    func layer(
      clock: ManualClock, countLimit: Int, costLimit: Int = .max, cost: (@Sendable (Int) -> Int)? = nil
    ) throws -> MemoryLayer<String, Int> {
      var configuration = MemoryLayer<String, Int>.Configuration(
        countLimit: countLimit, costLimit: costLimit, cost: cost, clock: clock)
      switch self {
      case .leastRecentlyUsed: configuration.evictionPolicy = .leastRecentlyUsed
      case .windowTinyLFU: configuration.evictionPolicy = .windowTinyLFU
      case .byDefault: break
      }
      return try MemoryLayer(configuration: configuration, admissionSeed: 1)
    }
  }

  /// Writes a snapshot of `k0` … `k19` with values `0` … `19`, least to most recently used.
  static func writeTwentyEntries(to file: URL, clock: ManualClock) async throws {
    let source = try Self.layer(clock: clock, countLimit: 100)
    for index in 0..<20 { try source.insert(index, for: "k\(index)") }
    #expect(try await source.writeSnapshot(to: file) == 20)
  }

  @Test(
    "a layer smaller than the snapshot keeps its most recently used entries, whatever the policy",
    arguments: RestoringPolicy.allCases)
  func smallerLayerKeepsTheMostRecent(_ policy: RestoringPolicy) async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    try await Self.writeTwentyEntries(to: file, clock: clock)

    let layer = try policy.layer(clock: clock, countLimit: 4)
    let result = try await layer.restoreSnapshot(from: file)
    #expect(result?.restored == 4)
    #expect(result?.skippedOverLimits == 16)
    #expect(Set(layer.keys) == ["k16", "k17", "k18", "k19"])
    #expect(layer.invariantViolations.isEmpty)
  }

  @Test(
    "under a cost limit, a restore keeps the most recent entries that fit together, whatever the policy",
    arguments: RestoringPolicy.allCases)
  func costLimitKeepsTheMostRecent(_ policy: RestoringPolicy) async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    try await Self.writeTwentyEntries(to: file, clock: clock)

    // Costs 1, 2 or 3 (1 + value % 3): k19 2, k18 1, k17 3, k16 2, k15 1 sum to 9; k14 (3) would
    // make 12, over the limit of 10, so it and everything older stay out.
    let layer = try policy.layer(clock: clock, countLimit: 100, costLimit: 10, cost: { 1 + $0 % 3 })
    let result = try await layer.restoreSnapshot(from: file)
    #expect(result?.restored == 5)
    #expect(result?.skippedOverLimits == 15)
    #expect(Set(layer.keys) == ["k15", "k16", "k17", "k18", "k19"])
    #expect(layer.totalCost == 9)
    #expect(layer.invariantViolations.isEmpty)
  }

  @Test(
    "restored entries displace the entries already held, even ones the policy would rather keep",
    arguments: RestoringPolicy.allCases)
  func restoredEntriesDisplaceOlderOnes(_ policy: RestoringPolicy) async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    try await Self.writeTwentyEntries(to: file, clock: clock)

    // Four entries read often: W-TinyLFU's admission would turn newcomers away for them.
    let layer = try policy.layer(clock: clock, countLimit: 4)
    for key in ["a", "b", "c", "d"] {
      try layer.insert(0, for: key)
      for _ in 0..<10 { _ = layer.value(for: key) }
    }
    let result = try await layer.restoreSnapshot(from: file)
    #expect(result?.restored == 4)
    #expect(Set(layer.keys) == ["k16", "k17", "k18", "k19"])
    #expect(layer.statistics.evictions[.countLimit] == 4)
    #expect(layer.invariantViolations.isEmpty)
  }

  @Test("per-segment recency lists merge by relative position, keeping each segment's order")
  func mergingSegments() {
    let merged = MemoryLayer<Int, Int>.leastRecentFirst([[1, 2, 3, 4], [10, 11], [], [20]])
    #expect(merged == [1, 10, 2, 20, 3, 11, 4])
    #expect(MemoryLayer<Int, Int>.leastRecentFirst([[3, 1, 2]]) == [3, 1, 2])
    #expect(MemoryLayer<Int, Int>.leastRecentFirst([[Int]]()) == [])
  }

  // MARK: Expiry and limits

  @Test("entries that expired before the restore are skipped and counted")
  func expiredEntriesAreSkipped() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    let source = try Self.layer(clock: clock)
    try source.insert(1, for: "short", timeToLive: .seconds(10))
    try source.insert(2, for: "long", timeToLive: .seconds(100))
    try source.insert(3, for: "forever")
    try await source.writeSnapshot(to: file)

    clock.advance(by: .seconds(50))
    let restored = try Self.layer(clock: clock)
    let result = try await restored.restoreSnapshot(from: file)

    #expect(result == .init(restored: 2, skippedExpired: 1, writtenAt: ManualClock.defaultStart))
    #expect(Set(restored.keys) == ["long", "forever"])
  }

  @Test("an entry that expires between the restore's expiry check and its insert is counted as expired, not restored")
  func entriesExpiringDuringTheRestoreAreCountedAsExpired() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    let source = try Self.layer(clock: clock)
    try source.insert(1, for: "short", timeToLive: .seconds(10))
    try source.insert(2, for: "forever")
    try await source.writeSnapshot(to: file)

    // The cost function runs after the restore checked the expiries and before it inserts:
    // time passes there, deterministically.
    let restored = try Self.layer(
      clock: clock,
      cost: { value in
        clock.advance(by: .seconds(20))
        return value
      })
    let result = try await restored.restoreSnapshot(from: file)

    #expect(result == .init(restored: 1, skippedExpired: 1, writtenAt: ManualClock.defaultStart))
    #expect(restored.keys == ["forever"])
    #expect(restored.invariantViolations.isEmpty)
  }

  @Test("a cost function that answers differently when called again cannot fail a restore half-way")
  func costsAreComputedOnce() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    try await Self.writeTwentyEntries(to: file, clock: clock)

    let calls = Locked(0)
    // Valid for the 20 checks of the snapshot's entries, negative after.
    let layer = try Self.layer(
      clock: clock, countLimit: 100,
      cost: { value in
        calls.withLock {
          $0 += 1
          return $0
        } <= 20 ? 1 : -1
      })
    try layer.insert(-1, for: "held")
    calls.withLock { $0 = 0 }
    let result = try await layer.restoreSnapshot(from: file)
    #expect(result?.restored == 20)
    #expect(layer.count == 21)
    #expect(layer.totalCost == 21)
    #expect(calls.withLock { $0 } == 20, "each restored value is weighed once")
    #expect(layer.invariantViolations.isEmpty)
  }

  @Test("entries already expired when the snapshot is written are left out")
  func expiredEntriesAreNotWritten() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    let source = try Self.layer(clock: clock)
    try source.insert(1, for: "short", timeToLive: .seconds(10))
    try source.insert(2, for: "forever")
    clock.advance(by: .seconds(10))
    #expect(source.count == 2)  // still held, not yet removed

    #expect(try await source.writeSnapshot(to: file) == 1)
    let restored = try Self.layer(clock: clock)
    #expect(
      try await restored.restoreSnapshot(from: file) == .init(restored: 1, skippedExpired: 0, writtenAt: clock.now))
    #expect(restored.keys == ["forever"])
  }

  @Test("the restoring layer's time to live caps the saved expiries")
  func timeToLiveCapsExpiry() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    let source = try Self.layer(clock: clock)
    try source.insert(1, for: "forever")
    try source.insert(2, for: "soon", timeToLive: .seconds(30))
    try await source.writeSnapshot(to: file)

    let restored = try Self.layer(clock: clock, timeToLive: .seconds(60))
    try await restored.restoreSnapshot(from: file)
    #expect(restored.entry(for: "forever")?.expiresAt == clock.now.advanced(by: .seconds(60)))
    #expect(restored.entry(for: "soon")?.expiresAt == clock.now.advanced(by: .seconds(30)))
  }

  @Test("a restore obeys the cost limit, leaving out the least recently used")
  func costLimit() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    let source = try Self.layer(clock: clock)
    for key in ["x", "y", "z"] { try source.insert(4, for: key) }
    try source.insert(11, for: "huge")
    _ = source.value(for: "z")  // least to most recent: x, y, huge, z
    try await source.writeSnapshot(to: file)

    let restored = try Self.layer(clock: clock, costLimit: 10, cost: { $0 })
    let result = try await restored.restoreSnapshot(from: file)
    // From the most recent down: z (4) fits; huge alone exceeds the limit and is refused; y
    // fits (8); x would make 12, so it stays out.
    #expect(Set(restored.keys) == ["y", "z"])
    #expect(restored.totalCost == 8)
    #expect(result?.restored == 2)
    #expect(result?.skippedOverLimits == 2)
    #expect(restored.statistics.evictions[.oversized] == 1)
    #expect(restored.statistics.evictions[.costLimit] == 0)
  }

  @Test("a negative cost refuses the restore and leaves the layer unchanged")
  func negativeCost() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    let source = try Self.layer(clock: clock)
    try source.insert(1, for: "a")
    try source.insert(99, for: "b")
    try await source.writeSnapshot(to: file)

    let restored = try Self.layer(clock: clock, cost: { $0 == 99 ? -1 : $0 })
    try restored.insert(7, for: "keep")
    await #expect { try await restored.restoreSnapshot(from: file) } throws: { error in
      (error as? AsyncCacheError)?.code == .invalidCost
    }
    #expect(restored.keys == ["keep"])
  }

  // MARK: Damaged snapshots

  enum Damage: String, CaseIterable, Sendable {
    case empty, truncatedHeader, truncatedPayload, trailingBytes, flippedPayloadBit, flippedHeaderBit, wrongMagic
    case newerVersion, countMismatch, notAPropertyList, otherValueType

    var expectedCode: PersistenceError.Code {
      switch self {
      case .newerVersion, .notAPropertyList, .otherValueType: .decodingFailed
      default: .corrupted
      }
    }

    /// Damages `file`, a snapshot of `String` keys and `Int` values.
    func apply(to file: [UInt8]) throws -> [UInt8] {
      var bytes = file
      let header = SnapshotFile.headerSize
      switch self {
      case .empty: return []
      case .truncatedHeader: return Array(bytes.prefix(header - 1))
      case .truncatedPayload: return Array(bytes.dropLast(3))
      case .trailingBytes: return bytes + [0]
      case .flippedPayloadBit: bytes[header + (bytes.count - header) / 2] ^= 0x10
      case .flippedHeaderBit: bytes[24] ^= 0x01  // the entry count
      case .wrongMagic: bytes[1] = UInt8(ascii: "X")
      case .newerVersion:
        bytes[8] = UInt8(SnapshotFile.formatVersion + 1)
        let checksum = XXH64.hash(bytes[0..<48])
        withUnsafeBytes(of: checksum.littleEndian) { bytes.replaceSubrange(48..<56, with: $0) }
      case .countMismatch:
        let payload = Data(bytes[header...])
        return try snapshot(payload: payload, entryCount: 3)
      case .notAPropertyList:
        return try snapshot(payload: Data("this is not a property list".utf8), entryCount: 2)
      case .otherValueType:
        let encoder = PropertyListEncoder()
        encoder.outputFormat = .binary
        let records = [SnapshotRecord(key: "a", value: "one", expiry: .max)]
        return try snapshot(payload: encoder.encode(records), entryCount: 1)
      }
      return bytes
    }

    /// A snapshot file with intact checksums around `payload`.
    private func snapshot(payload: Data, entryCount: UInt64) throws -> [UInt8] {
      let header = SnapshotFile.Header(
        formatVersion: SnapshotFile.formatVersion, writtenAt: 0, entryCount: entryCount,
        payloadLength: UInt64(payload.count), payloadChecksum: payload.withUnsafeBytes { XXH64.hash($0) })
      return SnapshotFile.bytes(of: header) + payload
    }
  }

  @Test("a damaged snapshot is a typed error naming the file, and the layer is unchanged", arguments: Damage.allCases)
  func damagedSnapshot(_ damage: Damage) async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    let source = try Self.layer(clock: clock)
    try source.insert(1, for: "a")
    try source.insert(2, for: "b")
    try await source.writeSnapshot(to: file)
    let damaged = try damage.apply(to: [UInt8](Data(contentsOf: file)))
    try Data(damaged).write(to: file)

    let layer = try Self.layer(clock: clock)
    try layer.insert(7, for: "keep")
    _ = layer.value(for: "keep")
    let before = layer.statistics
    await #expect { try await layer.restoreSnapshot(from: file) } throws: { error in
      guard let error = error as? PersistenceError else { return false }
      return error.code == damage.expectedCode && error.message.contains(file.path)
    }
    #expect(layer.statistics == before)
    #expect(layer.keys == ["keep"])
    #expect(layer.value(for: "keep") == 7)
    #expect(FileManager.default.fileExists(atPath: file.path))  // reported, not deleted
  }

  @Test("a missing snapshot is nothing to restore")
  func missingSnapshot() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let layer = try Self.layer(clock: ManualClock())
    try layer.insert(7, for: "keep")

    #expect(try await layer.restoreSnapshot(from: directory.appending("never-written")) == nil)
    #expect(try await layer.restoreSnapshot(from: directory.appending("no-such-directory/cache.snapshot")) == nil)
    #expect(layer.keys == ["keep"])
  }

  @Test("a directory in place of the snapshot is an I/O error")
  func directoryInsteadOfFile() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let layer = try Self.layer(clock: ManualClock())
    await #expect { try await layer.restoreSnapshot(from: directory.url) } throws: { error in
      (error as? PersistenceError)?.code == .ioFailure
    }
  }

  // MARK: Atomic writes

  @Test("a write that fails before its rename leaves the previous snapshot intact and no temporary file")
  func failedWriteKeepsThePreviousSnapshot() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    let source = try Self.layer(clock: clock)
    try source.insert(1, for: "old")
    try await source.writeSnapshot(to: file)
    let previous = try Data(contentsOf: file)

    try source.insert(2, for: "new")
    await #expect(throws: TestError("crash before rename")) {
      try await source.writeSnapshot(to: file, beforeRename: { throw TestError("crash before rename") })
    }

    #expect(try Data(contentsOf: file) == previous)
    #expect(directory.listing() == ["cache.snapshot"])
    let restored = try Self.layer(clock: clock)
    try await restored.restoreSnapshot(from: file)
    #expect(restored.keys == ["old"])
  }

  @Test("a value that cannot be encoded fails the write before the file is touched")
  func encodingFailure() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    try Data("previous".utf8).write(to: file)
    let layer = try Self.layer(String.self, Unencodable.self, clock: ManualClock())
    try layer.insert(Unencodable(), for: "a")

    await #expect { try await layer.writeSnapshot(to: file) } throws: { error in
      guard let error = error as? PersistenceError else { return false }
      return error.code == .encodingFailed && error.message.contains(file.path)
    }
    #expect(try Data(contentsOf: file) == Data("previous".utf8))
    #expect(directory.listing() == ["cache.snapshot"])
  }

  @Test("writing into a directory that does not exist is an I/O error naming the file")
  func missingDirectory() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("missing/cache.snapshot")
    let layer = try Self.layer(clock: ManualClock())
    try layer.insert(1, for: "a")

    await #expect { try await layer.writeSnapshot(to: file) } throws: { error in
      guard let error = error as? PersistenceError else { return false }
      return error.code == .ioFailure && error.message.contains(file.path)
    }
    #expect(directory.listing().isEmpty)
  }

  @Test("a write sweeps temporary files that killed writes left behind, and only those")
  func staleTemporaryFilesAreSwept() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let prefix = SnapshotFile.temporaryPrefix(for: file)
    let stale = prefix + UUID().uuidString + SnapshotFile.temporarySuffix
    let fresh = prefix + UUID().uuidString + SnapshotFile.temporarySuffix
    let unrelated = ".other.snapshot." + UUID().uuidString + SnapshotFile.temporarySuffix
    for name in [stale, fresh, unrelated] { try Data([1]).write(to: directory.appending(name)) }
    let anHourAgo = Date(timeIntervalSinceNow: -3_600)
    for name in [stale, unrelated] {
      try FileManager.default.setAttributes(
        [.modificationDate: anHourAgo], ofItemAtPath: directory.appending(name).path)
    }

    let layer = try Self.layer(clock: ManualClock())
    try await layer.writeSnapshot(to: file)

    #expect(directory.listing() == [fresh, unrelated, "cache.snapshot"].sorted())
  }

  @Test(
    "a full file system is a noSpace error and the previous snapshot stays intact",
    .enabled(if: TmpfsMount.unavailableReason == nil, "needs a tmpfs mount")
  )
  func fullFileSystem() async throws {
    let mount = try #require(try TmpfsMount.mount(sizeInBytes: 64 * 1024))
    defer { mount.unmount() }
    let file = mount.url.appendingPathComponent("cache.snapshot")
    let clock = ManualClock()
    let layer = try Self.layer(String.self, String.self, clock: clock)
    try layer.insert("small", for: "old")
    try await layer.writeSnapshot(to: file)
    let previous = try Data(contentsOf: file)

    // Distinct strings: a binary property list stores equal strings once.
    for index in 0..<100 { try layer.insert("\(index)" + String(repeating: "x", count: 2_000), for: "big-\(index)") }
    await #expect { try await layer.writeSnapshot(to: file) } throws: { error in
      guard let error = error as? PersistenceError else { return false }
      return error.code == .noSpace && error.message.contains(file.path)
    }

    #expect(try Data(contentsOf: file) == previous)
    #expect(TemporaryDirectory.listing(of: mount.url) == ["cache.snapshot"])
    let restored = try Self.layer(String.self, String.self, clock: clock)
    try await restored.restoreSnapshot(from: file)
    #expect(restored.keys == ["old"])
  }

  @Test(
    "a read-only file system is a readOnly error, and its snapshot can still be restored",
    .enabled(if: TmpfsMount.unavailableReason == nil, "needs a tmpfs mount")
  )
  func readOnlyFileSystem() async throws {
    let mount = try #require(try TmpfsMount.mount(sizeInBytes: 64 * 1024))
    defer { mount.unmount() }
    let file = mount.url.appendingPathComponent("cache.snapshot")
    let clock = ManualClock()
    let layer = try Self.layer(clock: clock)
    try layer.insert(1, for: "old")
    try await layer.writeSnapshot(to: file)
    try mount.remount(readOnly: true)

    try layer.insert(2, for: "new")
    await #expect { try await layer.writeSnapshot(to: file) } throws: { error in
      (error as? PersistenceError)?.code == .readOnly
    }
    let restored = try Self.layer(clock: clock)
    try await restored.restoreSnapshot(from: file)
    #expect(restored.keys == ["old"])
  }

  // MARK: Concurrency

  @Test("a snapshot written while other tasks use the layer holds only values that were stored")
  func concurrentUse() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let file = directory.appending("cache.snapshot")
    let clock = ManualClock()
    let layer = try Self.layer(Int.self, Int.self, clock: clock, countLimit: 500, segmentCount: 4)
    for key in 0..<500 { try layer.insert(key * 2, for: key) }

    try await withThrowingTaskGroup(of: Void.self) { group in
      for worker in 0..<4 {
        group.addTask {
          var generator = SeededGenerator(seed: UInt64(worker))
          for _ in 0..<2_000 {
            let key = Int.random(in: 0..<1_000, using: &generator)
            if Bool.random(using: &generator) { try layer.insert(key * 2, for: key) } else { _ = layer.value(for: key) }
          }
        }
      }
      group.addTask { try await layer.writeSnapshot(to: file) }
      group.addTask { try await layer.writeSnapshot(to: file) }
      try await group.waitForAll()
    }

    let restored = try Self.layer(Int.self, Int.self, clock: clock, countLimit: 500, segmentCount: 4)
    let result = try #require(try await restored.restoreSnapshot(from: file))
    #expect(result.restored > 0 && result.restored <= 500)
    for key in restored.keys { #expect(restored.value(for: key) == key * 2) }
    #expect(restored.invariantViolations.isEmpty)
  }
}
