import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// Ways to damage an entry file.
enum DiskDamage: String, CaseIterable, Sendable, CustomTestStringConvertible {
  case truncatedToHalf, truncatedToHeader, truncatedInsideHeader, emptied
  case payloadBitFlipped, keyBitFlipped, expiryBitFlipped, checksumBitFlipped, lengthBitFlipped
  case zeroedHeader, appendedByte, newerVersion, unknownFlags

  var testDescription: String { rawValue }

  func apply(to file: inout Data) {
    switch self {
    case .truncatedToHalf: file = file.prefix(file.count / 2)
    case .truncatedToHeader: file = file.prefix(DiskEntryFormat.headerSize)
    case .truncatedInsideHeader: file = file.prefix(10)
    case .emptied: file = Data()
    case .payloadBitFlipped: file[file.count - 7] ^= 0x04
    case .keyBitFlipped: file[DiskEntryFormat.headerSize] ^= 0x01
    case .expiryBitFlipped: file[16] ^= 0x01  // still far in the future: only the checksum notices
    case .checksumBitFlipped: file[33] ^= 0x80
    case .lengthBitFlipped: file[24] ^= 0x01
    case .zeroedHeader:
      file.replaceSubrange(0..<DiskEntryFormat.headerSize, with: Data(count: DiskEntryFormat.headerSize))
    case .appendedByte: file.append(0)
    case .newerVersion:
      file[4] = 2
      Self.resum(&file)  // a well-formed file of a format this version does not know
    case .unknownFlags:
      file[6] = 1
      Self.resum(&file)
    }
  }

  /// Recomputes the checksum after a change to the header.
  private static func resum(_ file: inout Data) {
    let keyLength = Int(file[8]) | Int(file[9]) << 8
    let metadataEnd = 40 + keyLength + (Int(file[12]) | Int(file[13]) << 8)
    let bytes = [UInt8](file)
    let sum = bytes.withUnsafeBytes { raw in
      DiskEntryFormat.checksum(
        fields: UnsafeRawBufferPointer(rebasing: raw[..<DiskEntryFormat.checksumOffset]),
        key: UnsafeRawBufferPointer(rebasing: raw[40..<(40 + keyLength)]),
        metadata: UnsafeRawBufferPointer(rebasing: raw[(40 + keyLength)..<metadataEnd]),
        payload: UnsafeRawBufferPointer(rebasing: raw[metadataEnd...]))
    }
    for index in 0..<8 { file[32 + index] = UInt8(truncatingIfNeeded: sum >> (8 * UInt64(index))) }
  }
}

@Suite("DiskLayer damage, collisions and hostile keys", .timeLimit(.minutes(3)))
struct DiskLayerDamageTests {
  // MARK: Damaged files (row 7)

  @Test(
    "a damaged file is a miss that is deleted and counted",
    arguments: DiskDamage.allCases, [false, true])
  func damagedFile(damage: DiskDamage, reopen: Bool) async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    var layer = try await fixture.open()
    try await layer.insert(diskBytes(1000), for: "victim")
    try await layer.insert(diskBytes(1000, seed: 5), for: "intact")
    var file = try Data(contentsOf: fixture.file(for: "victim"))
    damage.apply(to: &file)
    try file.write(to: fixture.file(for: "victim"))
    if reopen { layer = try await fixture.open() }
    #expect(try await layer.value(for: "victim") == nil)
    #expect(!FileManager.default.fileExists(atPath: fixture.file(for: "victim").path))
    let statistics = await layer.statistics
    #expect(statistics.damagedEntries == 1)
    #expect(statistics.count == 1 && statistics.totalBytes == diskEntrySize(key: "intact", valueCount: 1000))
    #expect(try await layer.value(for: "intact") == diskBytes(1000, seed: 5))
    #expect(await layer.keys == ["intact"])
    // The key is usable again.
    try await layer.insert(diskBytes(3), for: "victim")
    #expect(try await layer.value(for: "victim") == diskBytes(3))
  }

  @Test func aValueThatNoLongerDecodesIsTreatedAsDamage() async throws {
    struct Profile: Codable, Equatable { var name: String }
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    try await fixture.open().insert(Data("not json".utf8), for: "p")
    let profiles = try await DiskLayer<String, Profile>(directory: fixture.directory)
    #expect(try await profiles.value(for: "p") == nil)
    #expect(await profiles.statistics.damagedEntries == 1)
    #expect(fixture.names.isEmpty)
  }

  @Test func aValidFileUnderAnotherKeysNameIsDeletedAsMisplaced() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open()
    try await layer.insert(diskBytes(10), for: "a")
    try await layer.insert(diskBytes(20), for: "b")
    // b's file now holds a's intact entry: whoever did that, it must never answer for b.
    try FileManager.default.removeItem(at: fixture.file(for: "b"))
    try FileManager.default.copyItem(at: fixture.file(for: "a"), to: fixture.file(for: "b"))
    #expect(try await layer.value(for: "b") == nil)
    #expect(await layer.statistics.damagedEntries == 1)
    #expect(!FileManager.default.fileExists(atPath: fixture.file(for: "b").path))
    try FileManager.default.copyItem(at: fixture.file(for: "a"), to: fixture.file(for: "b"))
    let reopened = try await fixture.open()
    #expect(try await reopened.value(for: "b") == nil)
    #expect(try await reopened.value(for: "a") == diskBytes(10))
    #expect(await reopened.statistics.damagedEntries == 1)
  }

  // MARK: Collisions and long keys (row 12)

  /// Every key hashes to the same file name.
  static let collidingHash: @Sendable (UnsafeRawBufferPointer) -> SHA256.Digest = { _ in SHA256.Digest(1, 2, 3, 4) }

  @Test func keysWhoseFileNamesCollideNeverReadEachOthersBytes() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open(fileNameHash: Self.collidingHash)
    try await layer.insert(Data("A".utf8), for: "a")
    try await layer.insert(Data("B".utf8), for: "b")
    #expect(try await layer.value(for: "a") == nil)
    #expect(try await layer.value(for: "b") == Data("B".utf8))
    try await layer.removeValue(for: "a")  // must not delete b's file
    #expect(try await layer.value(for: "b") == Data("B".utf8))
    #expect(fixture.names.count == 1)
    #expect(await layer.keys == ["b"])
    let statistics = await layer.statistics
    #expect(statistics.damagedEntries == 0 && statistics.count == 1)
  }

  /// The index thinks the file holds `a`, but another layer replaced it with `b`'s: the stored
  /// key tells them apart, and `b`'s intact file is left alone.
  @Test func aCollisionFoundOnReadIsAMissThatKeepsTheOtherKeysFile() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let first = try await fixture.open(fileNameHash: Self.collidingHash)
    try await first.insert(Data("A".utf8), for: "a")
    let second = try await fixture.open(fileNameHash: Self.collidingHash)
    try await second.insert(Data("B".utf8), for: "b")
    #expect(try await first.value(for: "a") == nil)
    #expect(fixture.names.count == 1)
    #expect(await first.statistics.damagedEntries == 0)
    #expect(await first.keys == ["b"])
    #expect(try await first.value(for: "b") == Data("B".utf8))
    let reopened = try await fixture.open(fileNameHash: Self.collidingHash)
    #expect(try await reopened.value(for: "b") == Data("B".utf8))
    #expect(try await reopened.value(for: "a") == nil)
  }

  @Test func keysThatFlattenAlikeStayApart() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    // "é" and "e\u{301}" are one key (Swift calls them equal): see KeyIdentityTests.
    let keys = ["a/b", "a_b", "a\\b", "a:b", "A/B", "a/b/", "é", "e\u{300}"]
    let layer = try await fixture.open()
    for (index, key) in keys.enumerated() { try await layer.insert(diskBytes(16, seed: UInt8(index)), for: key) }
    let reopened = try await fixture.open()
    for (index, key) in keys.enumerated() {
      #expect(try await reopened.value(for: key) == diskBytes(16, seed: UInt8(index)), "\(key.debugDescription)")
    }
    #expect(fixture.names.count == keys.count)
  }

  @Test func tenKilobyteKeysWork() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let long = String(repeating: "k", count: 10_000)
    let keys = [long, long.dropLast() + "K", String(repeating: "é", count: 10_000)]
    let layer = try await fixture.open()
    for (index, key) in keys.enumerated() { try await layer.insert(diskBytes(100, seed: UInt8(index)), for: key) }
    #expect(fixture.names.allSatisfy { $0.count == 64 })
    let reopened = try await fixture.open()  // the index reads keys longer than its first read
    for (index, key) in keys.enumerated() {
      #expect(try await reopened.value(for: key) == diskBytes(100, seed: UInt8(index)))
    }
    #expect(await Set(reopened.keys) == Set(keys))
    #expect(await reopened.statistics.damagedEntries == 0)
  }

  // MARK: Path traversal (row 13)

  @Test func hostileKeysNeverWriteOutsideTheDirectory() async throws {
    let root = try TemporaryDirectory("disklayer-traversal")
    defer { root.remove() }
    let directory = root.appending("outer/inner/cache")
    try FileManager.default.createDirectory(at: root.appending("outer/inner"), withIntermediateDirectories: true)
    let keys = [
      "../../x", "../../../x", "/abs", "/tmp/asynccache-traversal", "..", ".", "", "/", "a\0b", "\0", "a/../../b",
      "~", "~/x", "..\\..\\x", "%2e%2e%2fx", "name.tmp-0123456789abcdef", "\n",
      String(repeating: "../", count: 200) + "etc",
    ]
    let outside = ["/abs", "/tmp/asynccache-traversal", root.appending("x").path, root.appending("outer/x").path]
    let existedBefore = outside.filter { FileManager.default.fileExists(atPath: $0) }
    let before = root.listing()
    let layer = try await DiskLayer<String, Data>(directory: directory)
    for (index, key) in keys.enumerated() { try await layer.insert(diskBytes(32, seed: UInt8(index)), for: key) }
    for (index, key) in keys.enumerated() {
      #expect(try await layer.value(for: key) == diskBytes(32, seed: UInt8(index)), "\(key.debugDescription)")
    }
    #expect(await Set(layer.keys) == Set(keys))
    let added = Set(root.listing()).subtracting(before)
    let entryNames = added.subtracting(["outer/inner/cache"])
    #expect(added.contains("outer/inner/cache"))
    #expect(entryNames.count == keys.count)
    #expect(
      entryNames.allSatisfy { $0.hasPrefix("outer/inner/cache/") && SHA256.Digest(hexString: $0.dropFirst(18)) != nil })
    #expect(outside.filter { FileManager.default.fileExists(atPath: $0) } == existedBefore)
    for key in keys { try await layer.removeValue(for: key) }
    #expect(Set(root.listing()) == Set(before).union(["outer/inner/cache"]))
  }

  // MARK: Temporary files (row 10, seam side)

  @Test func orphanedTemporaryFilesAreSweptAndOtherFilesKept() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    try FileManager.default.createDirectory(at: fixture.directory, withIntermediateDirectories: true)
    let name = SHA256.hash(Array("a".utf8)).hexString
    let orphans = ["\(name).tmp-0123456789abcdef", "\(name).tmp-x"]
    let foreign = ["notes.txt", "\(name).bak", String(name.dropLast()), "\(name.uppercased())"]
    for file in orphans + foreign {
      try Data("leftover".utf8).write(to: fixture.directory.appendingPathComponent(file))
    }
    try FileManager.default.createDirectory(
      at: fixture.directory.appendingPathComponent("subdirectory"), withIntermediateDirectories: true)
    let layer = try await fixture.open()
    #expect(fixture.names == (foreign + ["subdirectory"]).sorted())
    #expect(await layer.count == 0)
    #expect(await layer.statistics.damagedEntries == 0)
    try await layer.removeAll()
    #expect(fixture.names == (foreign + ["subdirectory"]).sorted())
  }

  /// A write that died between writing its temporary file and renaming it (the seam keeps the
  /// file, as a killed process would) leaves the old value readable, and the next open sweeps it.
  @Test func aWriteThatDiedBeforeItsRenameIsSweptOnOpen() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let fileSystem = FakeDiskFileSystem()
    let layer = try await fixture.open(fileSystem: fileSystem)
    try await layer.insert(diskBytes(100), for: "a")
    fileSystem.fail(.rename, with: EIO)
    fileSystem.fail(.removeFile, with: EIO)
    await #expect(throws: PersistenceError.self) { try await layer.insert(diskBytes(200, seed: 2), for: "a") }
    #expect(fixture.temporaryNames.count == 1)
    let reopened = try await fixture.open()
    #expect(fixture.temporaryNames.isEmpty)
    #expect(try await reopened.value(for: "a") == diskBytes(100))
    #expect(await reopened.statistics.damagedEntries == 0)
  }
}
