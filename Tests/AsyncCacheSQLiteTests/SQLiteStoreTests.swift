import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCacheSQLite

@Suite("SQLiteStore")
struct SQLiteStoreTests {
  /// `synchronous = FULL` alone is not durable on Apple platforms: SQLite then syncs with a plain
  /// `fsync`, which leaves commits in the drive's cache. The pragmas are per connection, so they
  /// are read back from a connection configured as the layer configures its own.
  @Test("a connection is configured for durable commits: WAL, synchronous FULL, fullfsync for commits and checkpoints")
  func durableConfiguration() throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let (connection, _) = try SQLiteStore.open(path: folder.appending("cache.sqlite").path, busyTimeout: .seconds(1))
    defer { connection.close() }
    let mode = try connection.statement("PRAGMA journal_mode")
    #expect(try mode.step())
    #expect(mode.text(0) == "wal")
    mode.reset()
    #expect(try connection.integer("PRAGMA synchronous") == 2)  // FULL
    #expect(try connection.integer("PRAGMA fullfsync") == 1)
    #expect(try connection.integer("PRAGMA checkpoint_fullfsync") == 1)

    // A housekeeping batch commits with `synchronous = NORMAL` and restores FULL; the full-sync
    // flags are separate flags of the connection, which that leaves alone.
    try connection.execute("PRAGMA synchronous = NORMAL")
    try connection.execute("PRAGMA synchronous = FULL")
    #expect(try connection.integer("PRAGMA fullfsync") == 1)
    #expect(try connection.integer("PRAGMA checkpoint_fullfsync") == 1)
  }
}
