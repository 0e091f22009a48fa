import AsyncCache
import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import TestSupport
import Testing

@testable import AsyncCacheSQLite

@Suite("SQLiteLayer logging", .timeLimit(.minutes(3)))
struct SQLiteLayerLoggingTests {
  @Test("a damaged row is logged as a warning with its key, the database and the namespace")
  func damagedRow() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let logs = RecordingLogHandler()
    let layer = try await SQLiteLayer<String, Data>(
      url: url, namespace: "images", configuration: .init(logger: logs.logger(minimumLevel: .info)))
    try await layer.insert(Data(repeating: 0xAB, count: 300), for: "victim")
    try await layer.flush()
    let raw = try RawDatabase(url)
    var blob = try #require(try raw.blob(namespace: "images", key: "victim"))
    blob[200] ^= 0x04
    try raw.setBlob(blob, namespace: "images", key: "victim")

    #expect(try await layer.value(for: "victim") == nil)
    let warning = try #require(logs.records.first)
    #expect(logs.records.count == 1)
    #expect(warning.level == .warning && warning.source == "SQLiteLayer")
    #expect(warning.message.hasPrefix("row for key \"victim\" discarded"))
    #expect(warning.metadata["event"] == "rowDiscarded" && warning.metadata["key"] == "victim")
    #expect(warning.metadata["database"] == url.path && warning.metadata["namespace"] == "images")
  }

  @Test("an entry that arrives already expired by the layer's own clock is an event and a warning, then debug records")
  func expiredArrival() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let logs = RecordingLogHandler()
    // The layer is given the wall clock; the cache's manual clock is ten months behind it.
    let layer = try await SQLiteLayer<String, Data>(
      url: folder.appending("cache.sqlite"), configuration: .init(clock: WallClock()))
    let events = layer.events()
    let cache = try LoadingCache(
      layers: [layer], origin: ClosureFetcher { Data($0.utf8) },
      configuration: .init(timeToLive: .seconds(60), clock: ManualClock(), logger: logs.logger()))

    _ = try await cache.value(for: "a")
    _ = try await cache.value(for: "b")

    #expect(try await layer.value(for: "a") == nil)
    let arrivals = await events.drained().compactMap { event -> String? in
      guard case .expiredOnArrival(let key, let expiresAt, _) = event else { return nil }
      return "\(key) \(expiresAt)"
    }
    #expect(arrivals == ["a 2026-01-01T00:01:00Z", "b 2026-01-01T00:01:00Z"])
    let records = logs.records.filter { $0.source == "SQLiteLayer" }
    #expect(records.map(\.level) == [.warning, .debug])
    #expect(records.first?.metadata["event"] == "expiredOnArrival" && records.first?.metadata["key"] == "a")
    #expect(records.first?.message.contains("arrived already expired by the layer's clock") == true)
    #expect(await layer.recentEvents.count == 2)
  }

  @Test("a database that SQLite reports corrupt is emptied and logged as an error, with where its copy is")
  func corruptDatabase() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    do {
      let layer = try await SQLiteLayer<String, String>(url: url)
      try await layer.insert("1", for: "a")
      try await layer.close()
    }
    try Data("this is not a database, it is a shopping list: eggs, milk, flour".utf8).write(to: url)
    let logs = RecordingLogHandler()
    let layer = try await SQLiteLayer<String, String>(url: url, configuration: .init(logger: logs.logger()))
    #expect(try await layer.value(for: "a") == nil)
    let error = try #require(logs.records(atLeast: .error).first)
    #expect(error.level == .error && error.metadata["event"] == "databaseReplaced")
    let copy = try #require(error.metadata["copiedTo"])
    #expect(FileManager.default.fileExists(atPath: copy))
  }

  @Test("a layer that works logs nothing at info and above")
  func quietWhenHealthy() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let logs = RecordingLogHandler()
    let layer = try await SQLiteLayer<String, String>(
      url: folder.appending("cache.sqlite"), configuration: .init(logger: logs.logger(minimumLevel: .info)))
    try await layer.insert("1", for: "a")
    try await layer.flush()
    #expect(try await layer.value(for: "a") == "1")
    #expect(logs.records.isEmpty)
  }

  @Test("closing says what it wrote, at notice: rows, bytes and time; or that nothing was pending")
  func closeSaysWhatItWrote() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let logs = RecordingLogHandler()
    let clock = ManualClock()
    let layer = try await SQLiteLayer<String, Data>(
      url: url, namespace: "n", configuration: .init(clock: clock, logger: logs.logger(minimumLevel: .info)))
    // Writes are behind. Another process holds the write lock, so the background writes fail
    // and wait to be retried on the clock, which stands still: the rows stay pending.
    let holder = try Probe(["sqlite-hold-write-lock", url.path])
    #expect(await holder.waitForLine(startingWith: "locked") != nil)
    for key in ["a", "b", "c"] { try await layer.insert(Data(repeating: 1, count: 100), for: key) }
    await clock.waitForSleepers(1)
    _ = await layer.statistics  // after the background writes queued on the layer's thread
    let (rows, bytes) = layer.pending.withLock { ($0.writes.count, $0.bytes) }
    #expect(rows == 3)
    holder.closeInput()
    #expect(await holder.waitForExit() == 0)
    logs.removeAll()

    try await layer.close()
    let record = try #require(logs.records.last)
    #expect(logs.records.count == 1)
    #expect(record.level == .notice && record.source == "SQLiteLayer")
    #expect(record.metadata["rows"] == "3" && record.metadata["bytes"] == "\(bytes)")
    #expect(record.metadata["database"] == url.path && record.metadata["namespace"] == "n")
    let elapsed = try #require(record.metadata["elapsed"])
    #expect(record.message == "closed in \(elapsed); wrote 3 pending rows (\(bytes) bytes)")
    #expect(try RawDatabase(url).rowCount(namespace: "n") == 3, "written")

    let idle = try await SQLiteLayer<String, Data>(
      url: url, namespace: "n", configuration: .init(logger: logs.logger(minimumLevel: .info)))
    logs.removeAll()
    try await idle.close()
    let idleRecord = try #require(logs.records.first)
    #expect(logs.records.count == 1)
    #expect(idleRecord.message == "closed in \(idleRecord.metadata["elapsed"] ?? ""); nothing was pending")
  }

  @Test("a close whose final write fails says, at error, how many rows are lost")
  func closeSaysWhatItLost() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let logs = RecordingLogHandler()
    let clock = ManualClock()
    let layer = try await SQLiteLayer<String, String>(
      url: url,
      configuration: .init(busyTimeout: .milliseconds(50), clock: clock, logger: logs.logger(minimumLevel: .info)))
    let holder = try Probe(["sqlite-hold-write-lock", url.path])
    #expect(await holder.waitForLine(startingWith: "locked") != nil)
    try await layer.insert("v", for: "k")  // the background write fails on the lock
    await clock.waitForSleepers(1)  // and its retry waits on the clock, which stands still
    logs.removeAll()
    await #expect(throws: PersistenceError.self) { try await layer.close() }
    holder.closeInput()
    #expect(await holder.waitForExit() == 0)
    let record = try #require(logs.records(atLeast: .info).first)
    #expect(logs.records(atLeast: .info).count == 1, "said once, not also as a background write to retry")
    #expect(record.level == .error)
    #expect(
      record.message.hasPrefix("closed; the final write failed, 1 pending rows (") && record.metadata["rows"] == "1")
    #expect(try RawDatabase(url).rowCount() == 0)
  }

  @Test("each event has its level: data lost to corruption is an error, recoveries are warnings or notices")
  func eventLevels() {
    let failure = PersistenceError(code: .ioFailure, message: "disk I/O error")
    let levels: [(SQLiteLayerEvent, CacheLogLevel)] = [
      (.databaseReplaced(reason: failure, copiedTo: nil), .error),
      (.schemaMigrated(from: 1, to: 2), .notice),
      (.schemaReset(foundVersion: 9), .warning),
      (.rowDiscarded(key: "k", reason: "checksum"), .warning),
      (.writeFailed(failure), .warning),
      (.writesRecovered, .notice),
    ]
    for (event, level) in levels {
      #expect(event.logLevel == level, "\(event)")
      #expect(event.logMetadata["event"] != nil)
    }
    #expect(
      SQLiteLayerEvent.schemaMigrated(from: 1, to: 2).logMetadata == [
        "event": "schemaMigrated", "from": "1", "to": "2",
      ])
  }
}
