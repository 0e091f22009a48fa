import AsyncCache
import AsyncCacheSQLite
import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import TestSupport
import Testing

/// RELIABILITY rows 7 and 8: damaged rows and files, older and newer schemas.
@Suite("SQLiteLayer with damaged data", .timeLimit(.minutes(3)))
struct SQLiteLayerDamageTests {
  /// Ways to damage a stored row behind the layer's back.
  enum Damage: String, CaseIterable, Sendable {
    case flippedPayloadBit, flippedHeaderBit, truncated, zeroedHeader, empty, extended, changedExpiry, swappedKey
  }

  @Test("a damaged row is a miss that is deleted, counted and reported", arguments: Damage.allCases)
  func damagedRow(damage: Damage) async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let layer = try await SQLiteLayer<String, Data>(url: url)
    try await layer.insert(Data(repeating: 0xAB, count: 300), for: "victim")
    try await layer.insert(Data(repeating: 0xCD, count: 300), for: "bystander")
    try await layer.flush()

    let raw = try RawDatabase(url)
    var blob = try #require(try raw.blob(key: "victim"))
    switch damage {
    case .flippedPayloadBit: blob[200] ^= 0x04
    case .flippedHeaderBit: blob[9] ^= 0x01
    case .truncated: blob = blob.prefix(150)
    case .zeroedHeader: blob.replaceSubrange(0..<24, with: Data(count: 24))
    case .empty: blob = Data()
    case .extended: blob.append(0)
    case .changedExpiry:
      try raw.execute("UPDATE entries SET expires_at = 9000000000000000000 WHERE key = x'76696374696d'")
    case .swappedKey: try raw.execute("UPDATE entries SET key = CAST('moved' AS BLOB) WHERE key = x'76696374696d'")
    }
    if damage != .changedExpiry && damage != .swappedKey { try raw.setBlob(blob, key: "victim") }
    let probeKey = damage == .swappedKey ? "moved" : "victim"

    #expect(try await layer.value(for: probeKey) == nil)
    #expect(try await layer.value(for: "bystander") == Data(repeating: 0xCD, count: 300))
    let statistics = await layer.statistics
    #expect(statistics.damagedEntries == 1)
    #expect(await layer.recentEvents.contains { if case .rowDiscarded(probeKey, _) = $0 { true } else { false } })
    try await layer.flush()
    #expect(try raw.rowCount() == 1, "the damaged row is deleted with the next batch")
  }

  @Test("the layer's event sequence and its handler get the same events; a slow observer is told what it lost")
  func eventSequence() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let handled = EventLog<String>()
    let layer = try await SQLiteLayer<String, Data>(
      url: url, configuration: .init(eventHandler: { handled.append($0.description) }))
    let everything = layer.events()
    let lastOnly = layer.events(bufferingNewest: 1)
    for key in ["a", "b", "c"] { try await layer.insert(Data(repeating: 1, count: 100), for: key) }
    try await layer.flush()
    let raw = try RawDatabase(url)
    for key in ["a", "b", "c"] { try raw.setBlob(Data([0]), key: key) }
    for key in ["a", "b", "c"] { #expect(try await layer.value(for: key) == nil) }

    let seen = await everything.drained().map(\.description)
    try #require(seen.count == 3)
    #expect(seen.allSatisfy { $0.hasPrefix("row for key") })
    #expect(seen == handled.all, "the handler is an adapter of the same hub")
    #expect(await lastOnly.drained().map(\.description) == ["2 events dropped by a slow observer", seen[2]])
    #expect(lastOnly.droppedCount == 2)
  }

  @Test("a row damaged and then rewritten is not deleted by the clean-up of the damaged bytes")
  func rewrittenAfterDamage() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let layer = try await SQLiteLayer<String, Data>(url: url)
    try await layer.insert(Data([1, 2, 3]), for: "k")
    try await layer.flush()
    try RawDatabase(url).setBlob(Data([9, 9, 9]), key: "k")
    #expect(try await layer.value(for: "k") == nil)
    let other = try await SQLiteLayer<String, Data>(url: url)
    try await other.insert(Data([4, 5, 6]), for: "k")
    try await other.flush()
    try await layer.flush()
    #expect(try await layer.value(for: "k") == Data([4, 5, 6]))
  }

  struct Old: Codable, Sendable { var name: String }
  struct New: Codable, Sendable { var identifier: Int }

  @Test("a value that no longer decodes is a miss that is deleted and counted")
  func undecodable() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let old = try await SQLiteLayer<String, Old>(url: url)
    try await old.insert(Old(name: "x"), for: "k")
    try await old.close()
    let new = try await SQLiteLayer<String, New>(url: url)
    #expect(try await new.value(for: "k") == nil)
    #expect(await new.statistics.damagedEntries == 1)
    try await new.flush()
    #expect(try RawDatabase(url).rowCount() == 0)
  }

  /// Ways to damage a whole database file.
  enum FileDamage: String, CaseIterable, Sendable {
    case notADatabase, zeroedHeader, truncatedToHalfAPage
  }

  @Test(
    "a file SQLite reports as corrupt or not a database is moved aside and replaced", arguments: FileDamage.allCases)
  func damagedFile(damage: FileDamage) async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    do {
      let layer = try await SQLiteLayer<String, String>(url: url)
      try await layer.insert("1", for: "a")
      try await layer.close()
    }
    switch damage {
    case .notADatabase:
      try Data("this is not a database, it is a shopping list: eggs, milk, flour".utf8).write(to: url)
    case .zeroedHeader:
      let handle = try FileHandle(forUpdating: url)
      try handle.write(contentsOf: Data(count: 100))
      try handle.close()
    case .truncatedToHalfAPage:
      let handle = try FileHandle(forUpdating: url)
      try handle.truncate(atOffset: 2048)
      try handle.close()
    }
    let events = EventLog<SQLiteLayerEvent>()
    let layer = try await SQLiteLayer<String, String>(
      url: url, configuration: .init(eventHandler: { events.append($0) }))
    #expect(try await layer.value(for: "a") == nil)
    try await layer.insert("2", for: "b")
    try await layer.flush()
    #expect(try await layer.value(for: "b") == "2")
    #expect(await layer.statistics.databaseReplacements == 1)
    let copy = try #require(
      events.all.compactMap { event -> URL? in
        if case .databaseReplaced(let reason, let copiedTo) = event, reason.code == .corrupted { copiedTo } else { nil }
      }.first)
    #expect(FileManager.default.fileExists(atPath: copy.path), "a copy of the damaged file is kept for inspection")
    #expect(copy.deletingLastPathComponent().standardizedFileURL == folder.url.standardizedFileURL)
  }

  @Test("a damaged file shared by two namespaces is emptied in place, once, and both go on with it")
  func damagedSharedFile() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    do {
      let writer = try await SQLiteLayer<String, Data>(url: url, namespace: "a")
      for index in 0..<200 { try await writer.insert(Data(repeating: UInt8(index), count: 2000), for: "k\(index)") }
      try await writer.close()
      try RawDatabase(url).execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }
    let a = try await SQLiteLayer<String, Data>(url: url, namespace: "a")
    let b = try await SQLiteLayer<String, Data>(url: url, namespace: "b")
    try Self.overwritePages(of: url)

    #expect(try await a.value(for: "k5") == nil)
    try await a.insert(Data([1]), for: "fresh")
    try await a.flush()
    #expect(try await b.value(for: "k5") == nil)
    try await b.insert(Data([2]), for: "other")
    try await b.flush()
    try await a.insert(Data([3]), for: "later")
    try await a.flush()

    let reopened = try await SQLiteLayer<String, Data>(url: url, namespace: "a")
    #expect(try await reopened.value(for: "fresh") == Data([1]))
    #expect(try await reopened.value(for: "later") == Data([3]), "a kept writing into the file everyone opens")
    #expect(await a.statistics.databaseReplacements + b.statistics.databaseReplacements == 1)
    let leftovers = folder.listing().filter { !$0.hasPrefix("cache.sqlite.corrupt-") }
    #expect(Set(leftovers).isSubset(of: ["cache.sqlite", "cache.sqlite-wal", "cache.sqlite-shm"]))
  }

  /// Overwrites every page after the first with garbage, keeping the file header.
  static func overwritePages(of url: URL) throws {
    let size = try #require(try FileManager.default.attributesOfItem(atPath: url.path)[.size] as? Int)
    let handle = try FileHandle(forUpdating: url)
    try handle.seek(toOffset: 4096)
    var generator = SplitMix(seed: 7)
    try handle.write(contentsOf: Data((4096..<size).map { _ in UInt8(truncatingIfNeeded: generator.next()) }))
    try handle.close()
  }

  @Test("pages damaged inside a table are found on read: the file is replaced and the read is a miss")
  func damagedPages() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    do {
      let layer = try await SQLiteLayer<String, Data>(url: url)
      for index in 0..<200 { try await layer.insert(Data(repeating: UInt8(index), count: 2000), for: "k\(index)") }
      try await layer.close()
      try RawDatabase(url).execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }
    try Self.overwritePages(of: url)

    let layer = try await SQLiteLayer<String, Data>(url: url)
    #expect(try await layer.value(for: "k5") == nil)
    try await layer.insert(Data([1]), for: "fresh")
    try await layer.flush()
    #expect(try await layer.value(for: "fresh") == Data([1]))
    #expect(await layer.statistics.databaseReplacements == 1)
  }

  @Test("a database with the previous schema version is migrated forward and keeps its rows")
  func olderSchema() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    do {
      let layer = try await SQLiteLayer<String, String>(url: url)
      try await layer.insert("one", for: "a")
      try await layer.insert("two", for: "b")
      try await layer.close()
    }
    // Turn it into a version-1 database: no per-namespace totals, no triggers.
    let raw = try RawDatabase(url)
    try raw.execute(
      """
      DROP TRIGGER entries_delete; DROP TRIGGER entries_update;
      DROP TABLE namespaces; ALTER TABLE entries DROP COLUMN written_at; PRAGMA user_version = 1;
      """)
    let events = EventLog<SQLiteLayerEvent>()
    let layer = try await SQLiteLayer<String, String>(
      url: url, configuration: .init(eventHandler: { events.append($0) }))
    #expect(try await layer.value(for: "a") == "one")
    #expect(try raw.integer("PRAGMA user_version") == 4)
    let usage = try await layer.usage
    #expect(usage.count == 2)
    #expect(usage.bytes == Int(try raw.integer("SELECT sum(size) FROM entries") ?? -1))
    // An insert, a replacement by a longer value and a removal: the totals follow all three.
    try await layer.insert("three", for: "c")
    try await layer.insert("one, longer now", for: "a")
    try await layer.removeValue(for: "b")
    try await layer.flush()
    #expect(try await layer.usage.count == 2, "the migrated database keeps its totals")
    #expect(try await layer.usage.bytes == Int(try raw.integer("SELECT sum(size) FROM entries") ?? -1))
    #expect(events.all.contains { if case .schemaMigrated(1, 4) = $0 { true } else { false } })
  }

  @Test(
    "files of early version-2 builds are repaired: no double-counting trigger, a write stamp, exact totals",
    arguments: [true, false])
  func earlyVersion2(withStamp: Bool) async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    do {
      let layer = try await SQLiteLayer<String, String>(url: url)
      try await layer.insert("one", for: "a")
      try await layer.close()
    }
    let raw = try RawDatabase(url)
    try raw.execute(
      """
      CREATE TRIGGER entries_insert AFTER INSERT ON entries BEGIN
        UPDATE namespaces SET bytes = bytes + new.size, count = count + 1 WHERE namespace = new.namespace;
      END;
      UPDATE namespaces SET count = count + 5;
      PRAGMA user_version = 2;
      """)
    if !withStamp { try raw.execute("ALTER TABLE entries DROP COLUMN written_at") }
    let layer = try await SQLiteLayer<String, String>(url: url)
    #expect(try await layer.value(for: "a") == "one")
    for index in 0..<10 { try await layer.insert("v", for: "k\(index)") }
    try await layer.flush()
    #expect(try await layer.usage.count == 11, "inserts are counted once")
    #expect(try await layer.usage.bytes == Int(try raw.integer("SELECT sum(size) FROM entries") ?? -1))
    #expect(try raw.integer("PRAGMA user_version") == 4)
  }

  @Test("a database from a newer version is reset cleanly, then works")
  func newerSchema() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    do {
      let raw = try RawDatabase(url)
      try raw.execute(
        """
        CREATE TABLE entries (id INTEGER PRIMARY KEY, payload TEXT, shard INTEGER);
        CREATE TABLE future_feature (x);
        CREATE VIEW future_view AS SELECT * FROM future_feature;
        INSERT INTO entries (payload, shard) VALUES ('from the future', 1);
        PRAGMA user_version = 7;
        """)
    }
    let events = EventLog<SQLiteLayerEvent>()
    let layer = try await SQLiteLayer<String, String>(
      url: url, configuration: .init(eventHandler: { events.append($0) }))
    #expect(try await layer.keys.isEmpty)
    try await layer.insert("now", for: "k")
    try await layer.flush()
    #expect(try await layer.value(for: "k") == "now")
    #expect(try RawDatabase(url).integer("PRAGMA user_version") == 4)
    #expect(try RawDatabase(url).integer("SELECT count(*) FROM sqlite_master WHERE name LIKE 'future%'") == 0)
    #expect(events.all.contains { if case .schemaReset(7) = $0 { true } else { false } })
  }
}

/// A small seeded generator for test data.
struct SplitMix: RandomNumberGenerator {
  var state: UInt64
  init(seed: UInt64) { state = seed }
  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var z = state
    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
    return z ^ (z >> 31)
  }
}
