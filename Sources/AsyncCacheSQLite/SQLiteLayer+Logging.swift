import AsyncCache

// What a SQLite layer logs: every event it records, and its other recoveries. Errors it throws
// are its chain's to log. Every record names the database file and the namespace.
extension SQLiteLayer {
  /// Logs `event` at its level (see ``SQLiteLayerEvent``).
  nonisolated func log(_ event: SQLiteLayerEvent) {
    log(event.logLevel, event.description, metadata: event.logMetadata)
  }

  /// Logs through the configuration's logger as `SQLiteLayer`, adding the database and the
  /// namespace to `metadata`.
  nonisolated func log(
    _ level: CacheLogLevel,
    _ message: @autoclosure () -> String,
    metadata: @autoclosure () -> [String: String] = [:],
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    followedLogger.value.log(
      level, message(),
      metadata: metadata().merging(["database": url.path, "namespace": namespace]) { mine, _ in mine },
      source: "SQLiteLayer", file: file, function: function, line: line)
  }
}

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
