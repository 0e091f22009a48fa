import AsyncCache
import AsyncCacheSQLite
import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@Suite("SQLiteLayer", .timeLimit(.minutes(3)))
struct SQLiteLayerTests {
  struct Photo: Codable, Hashable, Sendable {
    var id: Int
    var title: String
  }

  struct PhotoKey: Codable, Hashable, Sendable {
    var album: String
    var index: Int
  }

  @Test("a layer used on its own runs until its graceful shutdown signal or its close, then writes what is pending")
  func runsAsAService() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let signal = OneShotSignal()
    var configuration = SQLiteLayer<String, Data>.Configuration()
    configuration.gracefulShutdown = { await signal.wait() }
    let layer = try await SQLiteLayer<String, Data>(url: url, configuration: configuration)
    let service = Task { try await layer.run() }
    try await layer.insert(Data("pending".utf8), for: "a")
    signal.fire()
    try await service.value
    await #expect(throws: PersistenceError.self) { try await layer.value(for: "a") }
    let reopened = try await SQLiteLayer<String, Data>(url: url)
    #expect(try await reopened.value(for: "a") == Data("pending".utf8))

    let closedElsewhere = Task { try await reopened.run() }
    try await reopened.close()
    try await closedElsewhere.value
  }

  @Test("a value inserted is read back at once, after a flush, and across a reopen")
  func roundTrip() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("nested/folder/cache.sqlite")
    do {
      let layer = try await SQLiteLayer<String, Data>(url: url)
      try await layer.insert(Data("hello".utf8), for: "a")
      #expect(try await layer.value(for: "a") == Data("hello".utf8))
      try await layer.flush()
      #expect(try RawDatabase(url).rowCount() == 1)
      #expect(try await layer.value(for: "a") == Data("hello".utf8))
      try await layer.close()
    }
    let reopened = try await SQLiteLayer<String, Data>(url: url)
    #expect(try await reopened.value(for: "a") == Data("hello".utf8))
    #expect(try await reopened.value(for: "b") == nil)
    let statistics = await reopened.statistics
    #expect(statistics.hits == 1)
    #expect(statistics.misses == 1)
  }

  @Test("Codable values under Codable keys round-trip, with their expiry")
  func codable() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let clock = ManualClock()
    let configuration = SQLiteLayer<PhotoKey, Photo>.Configuration(clock: clock)
    let key = PhotoKey(album: "trip/2026", index: 3)
    let expiry = clock.now.advanced(by: .seconds(60))
    do {
      let layer = try await SQLiteLayer<PhotoKey, Photo>(
        url: url, configuration: configuration, keyEncoding: .json, valueCoder: .json)
      try await layer.insert(CacheEntry(Photo(id: 1, title: "Sea"), expiresAt: expiry), for: key)
      try await layer.close()
    }
    let layer = try await SQLiteLayer<PhotoKey, Photo>(
      url: url, configuration: configuration, keyEncoding: .json, valueCoder: .json)
    #expect(try await layer.entry(for: key) == CacheEntry(Photo(id: 1, title: "Sea"), expiresAt: expiry))
    #expect(try await layer.keys == [key])
  }

  @Test("namespaces share one file without seeing each other's keys")
  func namespaces() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("shared.sqlite")
    let thumbnails = try await SQLiteLayer<String, String>(url: url, namespace: "thumbnails")
    let profiles = try await SQLiteLayer<String, String>(url: url, namespace: "profiles")
    try await thumbnails.insert("small", for: "42")
    try await profiles.insert("Ada", for: "42")
    try await thumbnails.flush()
    try await profiles.flush()
    #expect(try await thumbnails.value(for: "42") == "small")
    #expect(try await profiles.value(for: "42") == "Ada")

    try await thumbnails.removeAll()
    try await thumbnails.flush()
    #expect(try await thumbnails.value(for: "42") == nil)
    #expect(try await thumbnails.keys.isEmpty)
    #expect(try await profiles.value(for: "42") == "Ada")
    #expect(try await profiles.keys == ["42"])
    #expect(try RawDatabase(url).rowCount(namespace: "profiles") == 1)
  }

  @Test("expired rows are misses, purged lazily and by removeExpired()")
  func expiry() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let clock = ManualClock()
    let url = folder.appending("cache.sqlite")
    let layer = try await SQLiteLayer<String, String>(
      url: url, configuration: .init(timeToLive: .seconds(100), clock: clock))
    try await layer.insert("short", for: "a", timeToLive: .seconds(10))
    try await layer.insert("default", for: "b")
    try await layer.insert("capped", for: "c", timeToLive: .seconds(1000))
    try await layer.insert(CacheEntry("past", expiresAt: clock.now.advanced(by: .seconds(-1))), for: "d")
    try await layer.flush()
    #expect(try await layer.value(for: "d") == nil)
    #expect(try RawDatabase(url).rowCount() == 3)
    #expect(try await layer.entry(for: "c")?.expiresAt == clock.now.advanced(by: .seconds(100)))

    clock.advance(by: .seconds(10))
    #expect(try await layer.value(for: "a") == nil)
    #expect(try await layer.value(for: "b") == "default")
    #expect(try Set(await layer.keys) == ["b", "c"])
    try await layer.flush()
    #expect(try RawDatabase(url).rowCount() == 2, "the expired row read as a miss is purged with the next batch")

    clock.advance(by: .seconds(90))
    #expect(try await layer.removeExpired() == 2)
    #expect(try RawDatabase(url).rowCount() == 0)
    #expect(await layer.statistics.expiredRemoved == 3)
  }

  @Test("the size limit is hard: every commit stays within it, evicting least recently read rows first")
  func sizeLimit() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let value = Data(repeating: 7, count: 1000)
    let rowSize = 1 + 24 + 1000
    let layer = try await SQLiteLayer<String, Data>(
      url: url, configuration: .init(sizeLimit: rowSize * 5, accessTimeResolution: .zero))
    for index in 0..<5 {
      try await layer.insert(value, for: "\(index)")
      try await layer.flush()
    }
    #expect(try await layer.usage == .init(bytes: rowSize * 5, count: 5))
    _ = try await layer.value(for: "0")
    for index in 5..<8 {
      try await layer.insert(value, for: "\(index)")
      try await layer.flush()
      #expect(try await layer.usage.bytes <= rowSize * 5)
    }
    #expect(try Set(await layer.keys) == ["0", "4", "5", "6", "7"])
    #expect(await layer.statistics.evictions == 3)
    #expect(
      try RawDatabase(url).integer("SELECT sum(length(key)) + sum(length(value)) FROM entries") == Int64(rowSize * 5))
  }

  @Test("reads record their access time at most once per resolution, and eviction follows it")
  func accessTimeResolution() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let clock = ManualClock()
    let rowSize = 1 + 24 + 100
    let layer = try await SQLiteLayer<String, Data>(
      url: url,
      configuration: .init(sizeLimit: rowSize * 3, accessTimeResolution: .seconds(60), clock: clock))
    for key in ["a", "b", "c"] {
      try await layer.insert(Data(count: 100), for: key)
      try await layer.flush()
    }
    let raw = try RawDatabase(url)
    let accessed = "SELECT accessed_at FROM entries WHERE key = CAST('a' AS BLOB)"
    let written = try #require(try raw.integer(accessed))

    clock.advance(by: .seconds(59))
    _ = try await layer.value(for: "a")
    try await layer.flush()
    #expect(try raw.integer(accessed) == written, "a read within the resolution records nothing")

    clock.advance(by: .seconds(2))
    _ = try await layer.value(for: "a")
    try await layer.insert(Data(count: 100), for: "d")
    try await layer.flush()
    #expect(try raw.integer(accessed) == written + 61_000_000_000)
    #expect(try Set(await layer.keys) == ["a", "c", "d"], "the least recently read row, b, was evicted")
  }

  @Test("one batch larger than the limit commits within it")
  func batchOverLimit() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let layer = try await SQLiteLayer<String, Data>(
      url: folder.appending("cache.sqlite"), configuration: .init(sizeLimit: 10_000, countLimit: 7))
    for index in 0..<20 { try await layer.insert(Data(repeating: 1, count: 500), for: "k\(index)") }
    try await layer.flush()
    let usage = try await layer.usage
    #expect(usage.bytes <= 10_000)
    #expect(usage.count == 7)
  }

  @Test("values over the per-entry cap are refused with an error naming the key, before SQLite sees them")
  func valueTooLarge() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let layer = try await SQLiteLayer<String, Data>(url: url, configuration: .init(sizeLimit: 1 << 30))
    let huge = Data(count: 100 << 20)
    await #expect {
      try await layer.insert(huge, for: "movie")
    } throws: { error in
      let error = error as? PersistenceError
      return error?.code == .valueTooLarge && error?.message.contains("movie") == true
        && error?.message.contains("\(100 << 20)") == true
    }
    let small = try await SQLiteLayer<String, Data>(url: url, namespace: "small", configuration: .init(sizeLimit: 100))
    await #expect {
      try await small.insert(Data(count: 200), for: "k")
    } throws: { ($0 as? PersistenceError)?.code == .valueTooLarge }
    try await layer.flush()
    #expect(try RawDatabase(url).rowCount() == 0)
  }

  @Test("a value within the per-entry cap but over the size limit with its key and header names the size limit")
  func refusalNamesTheLimitItBroke() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let layer = try await SQLiteLayer<String, Data>(
      url: url, configuration: .init(sizeLimit: 1_000, maximumEntrySize: 1_000))
    // 990 bytes of value + 2 of key + a 24-byte header = 1,016 bytes: over the size limit only.
    let error = await #expect(throws: PersistenceError.self) { try await layer.insert(Data(count: 990), for: "k9") }
    #expect(error?.code == .valueTooLarge)
    #expect(error?.message.contains("1016 bytes") == true, "\(String(describing: error))")
    #expect(error?.message.contains("sizeLimit") == true, "\(String(describing: error))")
    #expect(error?.message.contains("maximumEntrySize") == false, "\(String(describing: error))")
    // Over the per-entry cap: that cap is named, with the value's own size.
    let capped = try await SQLiteLayer<String, Data>(
      url: url, namespace: "capped", configuration: .init(sizeLimit: 10_000, maximumEntrySize: 500))
    let overCap = await #expect(throws: PersistenceError.self) { try await capped.insert(Data(count: 501), for: "k") }
    #expect(overCap?.message.contains("501 bytes") == true, "\(String(describing: overCap))")
    #expect(overCap?.message.contains("maximumEntrySize") == true, "\(String(describing: overCap))")
    #expect(overCap?.message.contains("of 500 bytes") == true, "\(String(describing: overCap))")
    try await layer.close()
    try await capped.close()
  }

  @Test(
    "keys that look alike, long keys and keys with NUL bytes stay apart",
    arguments: [
      ["a/b", "a_b", "a\\b", "A/b"],
      [String(repeating: "k", count: 10_000), String(repeating: "k", count: 10_000) + "!"],
      ["a\0b", "a\0c", "a", "a\0"],
      ["../../x", "/abs", "..", "", " "],
    ])
  func distinctKeys(keys: [String]) async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let layer = try await SQLiteLayer<String, String>(url: url)
    for key in keys { try await layer.insert("value of \(key)", for: key) }
    try await layer.flush()
    let reopened = try await SQLiteLayer<String, String>(url: url)
    for key in keys { #expect(try await reopened.value(for: key) == "value of \(key)") }
    #expect(try Set(await reopened.keys) == Set(keys))
    #expect(TemporaryDirectory.listing(of: folder.url).allSatisfy { $0.hasPrefix("cache.sqlite") })
  }

  @Test("writes and removals are readable before they are written, and keys include them")
  func pendingWrites() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let layer = try await SQLiteLayer<String, String>(url: folder.appending("cache.sqlite"))
    try await layer.insert("1", for: "a")
    try await layer.insert("2", for: "b")
    try await layer.flush()
    try await layer.removeValue(for: "a")
    try await layer.insert("3", for: "c")
    #expect(try await layer.value(for: "a") == nil)
    #expect(try Set(await layer.keys) == ["b", "c"])
    try await layer.removeAll()
    try await layer.insert("4", for: "d")
    #expect(try await layer.value(for: "b") == nil)
    #expect(try await layer.keys == ["d"])
    try await layer.flush()
    #expect(try await layer.keys == ["d"])
    #expect(await layer.statistics.pendingWrites == 0)
  }

  @Test("a closed layer refuses work with a typed error")
  func closed() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let layer = try await SQLiteLayer<String, String>(url: folder.appending("cache.sqlite"))
    try await layer.insert("1", for: "a")
    try await layer.close()
    await #expect { try await layer.value(for: "a") } throws: { ($0 as? PersistenceError)?.code == .closed }
    await #expect { try await layer.insert("2", for: "b") } throws: { ($0 as? PersistenceError)?.code == .closed }
    await #expect { try await layer.removeAll() } throws: { ($0 as? PersistenceError)?.code == .closed }
    await #expect { try await layer.flush() } throws: { ($0 as? PersistenceError)?.code == .closed }
    let reopened = try await SQLiteLayer<String, String>(url: folder.appending("cache.sqlite"))
    #expect(try await reopened.value(for: "a") == "1", "close() wrote what was pending")
  }

  @Test(
    "invalid configurations are refused with an error naming the setting",
    arguments: [
      ("", SQLiteLayer<String, Data>.Configuration(), "namespace"),
      ("ns", .init(sizeLimit: 0), "sizeLimit"),
      ("ns", .init(countLimit: 0), "countLimit"),
      ("ns", .init(maximumEntrySize: -1), "maximumEntrySize"),
      ("ns", .init(maximumEntrySize: 2_000_000_000), "maximumEntrySize"),
      ("ns", .init(timeToLive: .zero), "timeToLive"),
    ])
  func invalidConfiguration(namespace: String, configuration: SQLiteLayer<String, Data>.Configuration, name: String)
    async throws
  {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    await #expect {
      _ = try await SQLiteLayer<String, Data>(
        url: folder.appending("cache.sqlite"), namespace: namespace, configuration: configuration)
    } throws: { error in
      let error = error as? AsyncCacheError
      return error?.code == .invalidConfiguration && error?.message.contains(name) == true
    }
  }

  @Test("a memory layer in front of SQLite serves the second launch from disk")
  func chain() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    do {
      let disk = try await SQLiteLayer<String, String>(url: url)
      let cache = try LoadingCache(
        layers: [try MemoryLayer<String, String>(), disk], origin: ClosureFetcher { "fetched \($0)" })
      #expect(try await cache.value(for: "a") == "fetched a")
      try await disk.flush()
    }
    let disk = try await SQLiteLayer<String, String>(url: url)
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, String>(), disk], origin: UnimplementedFetcher<String, String>())
    #expect(try await cache.value(for: "a") == "fetched a")
  }
}
