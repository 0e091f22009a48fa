import AsyncCache

// What a SQLite layer logs: every event it records (`record(_:level:)`), and its other
// recoveries. Errors it throws are its chain's to log. Every record names the database file and
// the namespace (the layer's `LayerEnvironment` adds them).
extension SQLiteLayerEvent {
  /// How loud the event is: data lost to corruption is an error; a recovery that drops data
  /// (a reset schema, a damaged row) or a write that will be retried is a warning; a migration or
  /// writes that recovered are notices.
  var logLevel: CacheLogLevel {
    switch self {
    case .databaseReplaced: .error
    case .schemaMigrated: .notice
    case .schemaReset: .warning
    case .rowDiscarded: .warning
    case .writeFailed: .warning
    case .writesRecovered: .notice
    case .expiredOnArrival: .warning
    case .dropped: .warning
    }
  }

  /// The event's details, by name.
  var logMetadata: [String: String] {
    switch self {
    case .databaseReplaced(let reason, let copiedTo):
      var metadata = ["event": "databaseReplaced", "reason": reason.message]
      if let copiedTo { metadata["copiedTo"] = copiedTo.path }
      return metadata
    case .schemaMigrated(let from, let to):
      return ["event": "schemaMigrated", "from": "\(from)", "to": "\(to)"]
    case .schemaReset(let found):
      return ["event": "schemaReset", "foundVersion": "\(found)"]
    case .rowDiscarded(let key, let reason):
      return ["event": "rowDiscarded", "key": CacheLogger.describe(key), "reason": reason]
    case .writeFailed(let error):
      return ["event": "writeFailed", "error": CacheLogger.describe(error)]
    case .writesRecovered:
      return ["event": "writesRecovered"]
    case .expiredOnArrival(let key, let expiresAt, let now):
      return [
        "event": "expiredOnArrival", "key": CacheLogger.describe(key), "expiresAt": "\(expiresAt)", "now": "\(now)",
      ]
    case .dropped(let count):
      return ["event": "dropped", "count": "\(count)"]
    }
  }
}
