public import AsyncCache
public import Foundation

/// Something a ``SQLiteLayer`` did on its own that its owner may want to log.
public enum SQLiteLayerEvent: DropReportingEvent, CustomStringConvertible {
  /// SQLite reported the database as corrupt or not a database. The file was emptied in place
  /// (so that every connection to it goes on with the same file), after a copy of it (and of
  /// its `-wal` file) was saved at `copiedTo` for inspection, when copying was possible.
  case databaseReplaced(reason: PersistenceError, copiedTo: URL?)
  /// The database had an older schema and was migrated to the current one.
  case schemaMigrated(from: Int, to: Int)
  /// The database came from a newer version of this library; its tables were dropped and
  /// recreated empty.
  case schemaReset(foundVersion: Int)
  /// A row failed its header or checksum check (or did not decode); it was treated as a miss
  /// and deleted.
  case rowDiscarded(key: String, reason: String)
  /// A background write failed; its rows stay pending (and readable) and are retried later,
  /// with a growing delay, or by ``SQLiteLayer/flush()``.
  case writeFailed(PersistenceError)
  /// A background retry committed the writes that had failed.
  case writesRecovered
  /// An entry arrived already expired by the layer's clock (`now`), and was not stored (any
  /// older entry for the key is removed): most often the layer reads another clock than its
  /// writer. Logged as a warning the first time, then at debug.
  case expiredOnArrival(key: String, expiresAt: CacheInstant, now: CacheInstant)
  /// The observer's sequence fell behind and `count` events before this one were dropped from
  /// its buffer. Only an observer's sequence reports this.
  case dropped(count: Int)

  /// A sentence describing the event, for logs.
  public var description: String {
    switch self {
    case .databaseReplaced(let reason, let copiedTo):
      "database emptied (\(reason.message))"
        + (copiedTo.map { "; a copy of the damaged file is at \($0.path)" } ?? "")
    case .schemaMigrated(let from, let to): "schema migrated from version \(from) to \(to)"
    case .schemaReset(let found): "schema version \(found) is newer than this library's; the cache was reset"
    case .rowDiscarded(let key, let reason): "row for key \(key.debugDescription) discarded: \(reason)"
    case .writeFailed(let error): "background write failed: \(error)"
    case .writesRecovered: "background writes that had failed are committed"
    case .expiredOnArrival(let key, let expiresAt, let now):
      "entry for key \(key.debugDescription) " + ExpiredArrivals.describe(expiresAt: expiresAt, now: now)
    case .dropped(let count): "\(count) events dropped by a slow observer"
    }
  }
}

extension SQLiteLayerEvent {
  /// ``dropped(count:)``: the layer's events carry no state to pass on.
  public static func dropped(count: Int, last: SQLiteLayerEvent) -> SQLiteLayerEvent { .dropped(count: count) }
}
