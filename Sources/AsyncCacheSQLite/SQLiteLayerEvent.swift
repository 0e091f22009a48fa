public import AsyncCache
public import Foundation

/// Something a ``SQLiteLayer`` did on its own that its owner may want to log.
public enum SQLiteLayerEvent: Sendable, CustomStringConvertible {
  /// SQLite reported the database as corrupt or not a database. The file (and its `-wal` and
  /// `-shm` companions) was moved to `movedTo`, and an empty database created in its place.
  case databaseReplaced(reason: PersistenceError, movedTo: URL)
  /// The database had an older schema and was migrated to the current one.
  case schemaMigrated(from: Int, to: Int)
  /// The database came from a newer version of this library; its tables were dropped and
  /// recreated empty.
  case schemaReset(foundVersion: Int)
  /// A row failed its header or checksum check (or did not decode); it was treated as a miss
  /// and deleted.
  case rowDiscarded(key: String, reason: String)
  /// A background write failed; its rows stay pending and are retried by the next write or
  /// ``SQLiteLayer/flush()``.
  case writeFailed(PersistenceError)

  public var description: String {
    switch self {
    case .databaseReplaced(let reason, let movedTo):
      "database replaced (\(reason.message)); the damaged file was moved to \(movedTo.path)"
    case .schemaMigrated(let from, let to): "schema migrated from version \(from) to \(to)"
    case .schemaReset(let found): "schema version \(found) is newer than this library's; the cache was reset"
    case .rowDiscarded(let key, let reason): "row for key \(key.debugDescription) discarded: \(reason)"
    case .writeFailed(let error): "background write failed: \(error)"
    }
  }
}
