import CSQLite

/// The database schema, its version history, and the migrations between versions.
///
/// The version lives in `PRAGMA user_version`. Opening a database moves it forward one
/// migration at a time, inside one `BEGIN IMMEDIATE` transaction so that two processes opening
/// the same file do not migrate it twice. A file from a *newer* version of this library cannot
/// be read safely, so its tables are dropped and recreated (a cache can always be refilled).
enum SQLiteSchema {
  /// The version this library writes.
  static let currentVersion: Int64 = 4

  /// The oldest version whose entries this library reads as they are (on read-only media, where
  /// a file cannot be migrated).
  static let oldestReadableVersion: Int64 = 3

  /// Version 1: the entries alone; namespace sizes were summed on demand.
  static let version1 = """
    CREATE TABLE entries (
      namespace TEXT NOT NULL,
      key BLOB NOT NULL,
      value BLOB NOT NULL,
      size INTEGER NOT NULL,
      expires_at INTEGER,
      accessed_at INTEGER NOT NULL
    );
    CREATE UNIQUE INDEX entries_key ON entries(namespace, key);
    CREATE INDEX entries_lru ON entries(namespace, accessed_at);
    CREATE INDEX entries_expiry ON entries(namespace, expires_at) WHERE expires_at IS NOT NULL;
    """

  /// Version 2: the stamp of the write that produced each row (`written_at`), so that a retried
  /// batch never replaces a newer row; and a running total of bytes and rows per namespace, kept
  /// inside the writing transaction, so that the size limit is checked in O(1) and stays exact
  /// when several processes write. Triggers keep the totals for deletes and for updates of a
  /// row's size; rows inserted are added by the writer, `SQLiteStore.apply`, with one statement
  /// per transaction (an insert trigger runs once per row). A namespace's row is created by
  /// `SQLiteStore.ensureNamespace()` before its first write.
  static let version2 = """
    ALTER TABLE entries ADD COLUMN written_at INTEGER NOT NULL DEFAULT 0;
    CREATE TABLE namespaces (
      namespace TEXT PRIMARY KEY,
      bytes INTEGER NOT NULL,
      count INTEGER NOT NULL
    ) WITHOUT ROWID;
    INSERT INTO namespaces (namespace, bytes, count)
      SELECT namespace, sum(size), count(*) FROM entries GROUP BY namespace;
    CREATE TRIGGER entries_delete AFTER DELETE ON entries BEGIN
      UPDATE namespaces SET bytes = bytes - old.size, count = count - 1 WHERE namespace = old.namespace;
    END;
    CREATE TRIGGER entries_update AFTER UPDATE OF size ON entries BEGIN
      UPDATE namespaces SET bytes = bytes - old.size + new.size WHERE namespace = new.namespace;
    END;
    """

  /// Version 3 repairs files of early version-2 builds, which lacked `written_at` or counted
  /// inserts with a trigger as well (counting them twice), and recomputes the totals.
  static func migrateToVersion3(_ connection: SQLiteConnection) throws(SQLiteError) {
    try connection.execute("DROP TRIGGER IF EXISTS entries_insert")
    let hasStamp =
      try connection.integer(
        "SELECT count(*) FROM pragma_table_info('entries') WHERE name = 'written_at'") ?? 0
    if hasStamp == 0 {
      try connection.execute("ALTER TABLE entries ADD COLUMN written_at INTEGER NOT NULL DEFAULT 0")
    }
    try connection.execute(
      """
      DELETE FROM namespaces;
      INSERT INTO namespaces (namespace, bytes, count)
        SELECT namespace, sum(size), count(*) FROM entries GROUP BY namespace;
      """)
  }

  /// Version 4: the instants at which tags were invalidated, per namespace (see
  /// `SQLiteLayer.invalidate(tag:at:)`), so that the entries an invalidation killed stay dead
  /// after a restart. The entries are as in version 3: a file of version 3 reads as one of
  /// version 4 with no invalidation.
  static let version4 = """
    CREATE TABLE IF NOT EXISTS tag_invalidations (
      namespace TEXT NOT NULL,
      tag TEXT NOT NULL,
      invalidated_at INTEGER NOT NULL,
      PRIMARY KEY (namespace, tag)
    ) WITHOUT ROWID;
    """

  /// Runs the migration from version `version` to `version + 1`.
  static func migrate(_ connection: SQLiteConnection, from version: Int64) throws(SQLiteError) {
    switch version {
    case 0: try connection.execute(version1)
    case 1: try connection.execute(version2)
    case 2: try migrateToVersion3(connection)
    default: try connection.execute(version4)
    }
  }

  /// What opening did to the schema.
  enum Outcome: Equatable {
    case current
    case migrated(from: Int64)
    case reset(from: Int64)
  }

  /// Brings the database to ``currentVersion``.
  static func prepare(_ connection: SQLiteConnection) throws(SQLiteError) -> Outcome {
    // Cheap check first, outside a write transaction: the common case is a current database.
    if try version(of: connection) == currentVersion { return .current }
    try connection.execute("BEGIN IMMEDIATE")
    do {
      let found = try version(of: connection)
      var outcome = Outcome.current
      var version = found
      if found > currentVersion {
        try dropEverything(connection)
        version = 0
        outcome = .reset(from: found)
      } else if found < currentVersion {
        outcome = .migrated(from: found)
      }
      while version < currentVersion {
        try migrate(connection, from: version)
        version += 1
      }
      try connection.execute("PRAGMA user_version = \(currentVersion)")
      try connection.execute("COMMIT")
      return outcome
    } catch {
      try? connection.execute("ROLLBACK")
      throw error
    }
  }

  static func version(of connection: SQLiteConnection) throws(SQLiteError) -> Int64 {
    try connection.integer("PRAGMA user_version") ?? 0
  }

  /// Drops every table, index and trigger: the file came from a newer schema we cannot read.
  private static func dropEverything(_ connection: SQLiteConnection) throws(SQLiteError) {
    let list = try connection.statement(
      "SELECT type, name FROM sqlite_master WHERE type IN ('table', 'trigger', 'view') AND name NOT LIKE 'sqlite_%'")
    var objects: [(String, String)] = []
    defer { list.reset() }
    while try list.step() { objects.append((list.text(0), list.text(1))) }
    list.reset()
    for (type, name) in objects where type != "table" {
      try connection.execute("DROP \(type.uppercased()) IF EXISTS \"\(name.replacingDoubleQuotes)\"")
    }
    for (type, name) in objects where type == "table" {
      try connection.execute("DROP TABLE IF EXISTS \"\(name.replacingDoubleQuotes)\"")
    }
  }
}

extension String {
  fileprivate var replacingDoubleQuotes: String {
    var result = ""
    for character in self {
      result.append(character)
      if character == "\"" { result.append("\"") }
    }
    return result
  }
}
