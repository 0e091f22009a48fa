import AsyncCache
import AsyncCacheSQLite
import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@Suite("SQLiteLayer: tag invalidation", .timeLimit(.minutes(3)))
struct SQLiteLayerTagTests {
  static func tagged(_ value: String, _ tags: Set<String>, producedAt seconds: Int64) -> CacheEntry<String> {
    CacheEntry(
      value, expiresAt: nil, metadata: EntryMetadata(producedAt: CacheInstant(secondsSince1970: seconds), tags: tags))
  }

  @Test("an invalidated tag kills the rows filed under it, pending or written, and stays recorded across a reopen")
  func survivesRestart() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let layer = try await SQLiteLayer<String, String>(url: url)
    try await layer.insert(Self.tagged("written", ["t"], producedAt: 100), for: "written")
    try await layer.flush()
    try await layer.insert(Self.tagged("pending", ["t", "u"], producedAt: 100), for: "pending")
    try await layer.insert(Self.tagged("other", ["u"], producedAt: 100), for: "other")
    try await layer.insert(Self.tagged("later", ["t"], producedAt: 300), for: "later")
    try await layer.insert(CacheEntry("untagged", expiresAt: nil), for: "untagged")

    try await layer.invalidate(tag: "t", at: CacheInstant(secondsSince1970: 200))

    #expect(try await layer.entry(for: "written") == nil)
    #expect(try await layer.entry(for: "pending") == nil, "a write still pending is dead too")
    #expect(try await layer.value(for: "other") == "other")
    #expect(try await layer.value(for: "later") == "later", "produced after the invalidation")
    #expect(try await layer.value(for: "untagged") == "untagged")
    try await layer.close()

    let reopened = try await SQLiteLayer<String, String>(url: url)
    #expect(try await reopened.entry(for: "written") == nil, "the invalidation is in the file")
    #expect(try await reopened.entry(for: "pending") == nil)
    #expect(try await reopened.value(for: "other") == "other")
    #expect(try await reopened.value(for: "later") == "later")
    // An earlier instant changes nothing; a write after the invalidation lives.
    try await reopened.invalidate(tag: "t", at: CacheInstant(secondsSince1970: 50))
    #expect(try await reopened.value(for: "later") == "later")
    try await reopened.insert(Self.tagged("again", ["t"], producedAt: 250), for: "written")
    #expect(try await reopened.value(for: "written") == "again")
    try await reopened.close()
  }

  @Test("namespaces keep their own invalidations")
  func namespaces() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let one = try await SQLiteLayer<String, String>(url: url, namespace: "one")
    let two = try await SQLiteLayer<String, String>(url: url, namespace: "two")
    try await one.insert(Self.tagged("1", ["t"], producedAt: 100), for: "k")
    try await two.insert(Self.tagged("2", ["t"], producedAt: 100), for: "k")
    try await one.invalidate(tag: "t", at: CacheInstant(secondsSince1970: 200))
    #expect(try await one.entry(for: "k") == nil)
    #expect(try await two.value(for: "k") == "2")
    try await one.close()
    try await two.close()
    let reopened = try await SQLiteLayer<String, String>(url: url, namespace: "two")
    #expect(try await reopened.value(for: "k") == "2")
    try await reopened.close()
  }

  @Test("through a cache: after a restart, the entries killed before it are still misses and load anew")
  func throughACacheAcrossARestart() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let clock = ManualClock()
    let loads = Locked(0)
    let origin = ClosureEntryFetcher<String, String> { key, _ in
      let load = loads.withLock {
        $0 += 1
        return $0
      }
      return .value("\(key) #\(load)", metadata: EntryMetadata(tags: ["tenant:1"]))
    }
    func cache() async throws -> LoadingCache<String, String> {
      try LoadingCache(
        layers: [try MemoryLayer<String, String>(), try await SQLiteLayer<String, String>(url: url)], origin: origin,
        configuration: .init(clock: clock))
    }
    let first = try await cache()
    #expect(try await first.value(for: "a") == "a #1")
    clock.advance(by: .seconds(1))
    try await first.invalidate(tag: "tenant:1")
    try await first.close()

    let second = try await cache()
    #expect(try await second.value(for: "a") == "a #2", "the row written before the invalidation is dead")
    #expect(try await second.value(for: "a") == "a #2")
    try await second.close()
    let third = try await cache()
    #expect(try await third.value(for: "a") == "a #2", "the row loaded after it lives")
    try await third.close()
  }

  @Test("a database written before tags is migrated, reads its rows, and records invalidations")
  func migratesVersion3() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let fixture = try #require(Bundle.module.url(forResource: "Fixtures/entries-v3", withExtension: "sqlite"))
    let url = folder.appending("cache.sqlite")
    try FileManager.default.copyItem(at: fixture, to: url)
    let layer = try await SQLiteLayer<String, String>(url: url)
    let migrated = await layer.recentEvents.contains { event in
      if case .schemaMigrated(from: 3, to: 4) = event { true } else { false }
    }
    #expect(migrated)
    #expect(try await layer.value(for: "alpha") == "one")
    // Rows without tags are untouched by any invalidation.
    try await layer.invalidate(tag: "t", at: CacheInstant(secondsSince1970: 4_000_000_000))
    #expect(try await layer.value(for: "alpha") == "one")
    try await layer.close()
  }

  @Test("a closed layer refuses the invalidation")
  func closed() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let layer = try await SQLiteLayer<String, String>(url: folder.appending("cache.sqlite"))
    try await layer.close()
    let error = await #expect(throws: PersistenceError.self) {
      try await layer.invalidate(tag: "t", at: CacheInstant(secondsSince1970: 1))
    }
    #expect(error?.code == .closed)
  }
}

extension SQLiteLayerTagTests {
  @Test("a read that comes to a dead row deletes it with the next batch; a row written since stays")
  func lazyCleanUp() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let layer = try await SQLiteLayer<String, String>(url: folder.appending("cache.sqlite"))
    try await layer.insert(Self.tagged("dead", ["t"], producedAt: 100), for: "a")
    try await layer.insert(Self.tagged("dead too", ["t"], producedAt: 100), for: "b")
    try await layer.flush()
    #expect(try await layer.keys.count == 2)
    try await layer.invalidate(tag: "t", at: CacheInstant(secondsSince1970: 200))
    #expect(try await layer.entry(for: "a") == nil)
    try await layer.flush()
    #expect(try await layer.keys.sorted() == ["b"], "the row read was deleted; the other waits for a read")
    #expect(try await layer.entry(for: "b") == nil)
    // A write between the read and the batch wins.
    try await layer.insert(Self.tagged("alive", ["t"], producedAt: 300), for: "b")
    try await layer.flush()
    #expect(try await layer.value(for: "b") == "alive")
    try await layer.close()
  }
}
