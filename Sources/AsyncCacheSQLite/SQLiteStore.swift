import AsyncCache
import CSQLite
import Foundation

/// The SQL side of `SQLiteLayer`, in terms of bytes: look rows up, apply a batch of writes in
/// one transaction, enforce the size limit, enumerate keys.
///
/// Not thread-safe; used only on its layer's executor thread (a `BlockingExecutor`). Keys are the UTF-8 bytes of
/// encoded keys, stored as blobs so that any byte (NUL included) compares exactly.
final class SQLiteStore {
  let connection: SQLiteConnection
  let namespace: String

  init(connection: SQLiteConnection, namespace: String) {
    self.connection = connection
    self.namespace = namespace
  }

  /// Opens the database at `path` in WAL mode with the busy timeout, and brings its schema up to
  /// date.
  static func open(path: String, busyTimeout: Duration) throws(SQLiteError) -> (
    SQLiteConnection, SQLiteSchema.Outcome
  ) {
    let connection = try SQLiteConnection(path: path, busyTimeout: busyTimeout)
    return (connection, try configure(connection))
  }

  /// Sets the journal mode and durability, and brings the schema up to date.
  static func configure(_ connection: SQLiteConnection) throws(SQLiteError) -> SQLiteSchema.Outcome {
    // WAL: readers never block the writer and one writer never blocks readers, in this process
    // or in others. FULL: a commit is on disk when it returns, which is what `flush()` promises.
    let mode = try connection.statement("PRAGMA journal_mode = WAL")
    defer { mode.reset() }
    _ = try mode.step()
    mode.reset()
    try connection.execute("PRAGMA synchronous = FULL")
    return try SQLiteSchema.prepare(connection)
  }

  /// Opens an existing database on read-only media: no locks, no writes, no migration.
  static func openImmutable(path: String) throws(SQLiteError) -> SQLiteConnection {
    let connection = try SQLiteConnection(path: path, busyTimeout: .zero, immutable: true)
    let version = try SQLiteSchema.version(of: connection)
    guard version == SQLiteSchema.currentVersion else {
      throw SQLiteError(
        resultCode: SQLITE_READONLY,
        message: "the database has schema version \(version), and read-only media cannot be migrated to "
          + "version \(SQLiteSchema.currentVersion)")
    }
    return connection
  }

  // MARK: Reads

  enum Lookup {
    case miss
    case hit(payload: Data, expiresAt: Int64?, accessedAt: Int64)
    case expired
    case damaged(SQLiteRecord.Damage, blob: Data)
  }

  /// Looks `key` up, checking the row's header and checksum.
  func lookup(_ key: [UInt8], now: Int64) throws(SQLiteError) -> Lookup {
    let statement = try connection.statement(
      "SELECT value, expires_at, accessed_at FROM entries WHERE namespace = ?1 AND key = ?2")
    defer { statement.reset() }
    statement.bind(namespace, at: 1)
    statement.bind(blob: key, at: 2)
    guard try statement.step() else { return .miss }
    let expiresAt = statement.optionalInt64(1)
    if let expiresAt, expiresAt <= now { return .expired }
    let blob = statement.blob(0)
    let checked = key.withUnsafeBytes { SQLiteRecord.payload(of: blob, key: $0, expiresAt: expiresAt) }
    switch checked {
    case .success(let payload):
      return .hit(payload: Data(payload), expiresAt: expiresAt, accessedAt: statement.int64(2))
    case .failure(let error): return .damaged(error.damage, blob: Data(blob))
    }
  }

  /// The stored keys that have not expired.
  func keys(now: Int64) throws(SQLiteError) -> [[UInt8]] {
    let statement = try connection.statement(
      "SELECT key FROM entries WHERE namespace = ?1 AND (expires_at IS NULL OR expires_at > ?2)")
    defer { statement.reset() }
    statement.bind(namespace, at: 1)
    statement.bind(now, at: 2)
    var keys: [[UInt8]] = []
    while try statement.step() { keys.append(Array(statement.blob(0))) }
    return keys
  }

  /// The bytes and rows stored in the namespace.
  func usage() throws(SQLiteError) -> (bytes: Int, count: Int) {
    let statement = try connection.statement("SELECT bytes, count FROM namespaces WHERE namespace = ?1")
    defer { statement.reset() }
    statement.bind(namespace, at: 1)
    guard try statement.step() else { return (0, 0) }
    return (Int(statement.int64(0)), Int(statement.int64(1)))
  }

  // MARK: Writes

  /// One write in a batch.
  enum Operation {
    /// Inserts or replaces the row, unless the stored row was written later than `stamp`.
    case upsert(blob: Data, size: Int, expiresAt: Int64?, stamp: Int64, accessedAt: Int64)
    /// Deletes the row, unless it was written later than `stamp`.
    case delete(stamp: Int64)
  }

  /// Everything one transaction applies, in order: clear, writes, touches, clean-ups.
  struct Batch {
    /// The stamp of a `removeAll()`: rows written before it are deleted.
    var clearStamp: Int64?
    var operations: [([UInt8], Operation)] = []
    /// Access times to record for keys read since the last batch (for LRU order).
    var touches: [([UInt8], Int64)] = []
    /// Rows found damaged: deleted if they still hold the damaged bytes.
    var damaged: [([UInt8], Data)] = []
    /// Keys found expired: deleted if they are still expired.
    var expired: [[UInt8]] = []

    var isEmpty: Bool {
      clearStamp == nil && operations.isEmpty && touches.isEmpty && damaged.isEmpty && expired.isEmpty
    }

    /// Whether the batch only does housekeeping (access times, clean-ups) that may be lost in
    /// a power failure without harm, so its commit need not wait for the disk.
    var isHousekeeping: Bool { clearStamp == nil && operations.isEmpty }
  }

  /// What applying a batch removed to stay within the limits.
  struct Report {
    var evicted = 0
    var expiredRemoved = 0
  }

  /// Creates the namespace's row of running totals if it is missing (the insert trigger only
  /// updates it). Runs inside the caller's transaction.
  func ensureNamespace() throws(SQLiteError) {
    try connection.run("INSERT OR IGNORE INTO namespaces (namespace, bytes, count) VALUES (?1, 0, 0)") {
      $0.bind(namespace, at: 1)
    }
  }

  /// Applies `batch` in one `BEGIN IMMEDIATE` transaction, then evicts expired and least
  /// recently accessed rows until the namespace is within `sizeLimit` bytes and `countLimit`
  /// rows. Either all of it commits or none of it does.
  func apply(_ batch: Batch, sizeLimit: Int, countLimit: Int?, now: Int64) throws(SQLiteError) -> Report {
    if batch.isHousekeeping { try connection.execute("PRAGMA synchronous = NORMAL") }
    defer { if batch.isHousekeeping { try? connection.execute("PRAGMA synchronous = FULL") } }
    try connection.execute("BEGIN IMMEDIATE")
    do {
      try ensureNamespace()
      if let clearStamp = batch.clearStamp {
        try connection.run("DELETE FROM entries WHERE namespace = ?1 AND written_at <= ?2") { statement in
          statement.bind(namespace, at: 1)
          statement.bind(clearStamp, at: 2)
        }
      }
      for (key, operation) in batch.operations {
        switch operation {
        case .upsert(let blob, let size, let expiresAt, let stamp, let accessedAt):
          // A row written later (by another connection, while this batch waited or failed)
          // keeps its newer value.
          try connection.run(
            """
            INSERT INTO entries (namespace, key, value, size, expires_at, accessed_at, written_at)
            VALUES (?1, ?2, ?3, ?4, ?5, ?7, ?6)
            ON CONFLICT (namespace, key) DO UPDATE SET
              value = excluded.value, size = excluded.size, expires_at = excluded.expires_at,
              accessed_at = excluded.accessed_at, written_at = excluded.written_at
            WHERE excluded.written_at >= entries.written_at
            """
          ) { statement in
            statement.bind(namespace, at: 1)
            statement.bind(blob: key, at: 2)
            statement.bind(blob: blob, at: 3)
            statement.bind(Int64(size), at: 4)
            statement.bind(expiresAt, at: 5)
            statement.bind(stamp, at: 6)
            statement.bind(accessedAt, at: 7)
          }
        case .delete(let stamp):
          try connection.run(
            "DELETE FROM entries WHERE namespace = ?1 AND key = ?2 AND written_at <= ?3"
          ) { statement in
            statement.bind(namespace, at: 1)
            statement.bind(blob: key, at: 2)
            statement.bind(stamp, at: 3)
          }
        }
      }
      for (key, accessedAt) in batch.touches {
        try connection.run(
          "UPDATE entries SET accessed_at = max(accessed_at, ?3) WHERE namespace = ?1 AND key = ?2"
        ) { statement in
          statement.bind(namespace, at: 1)
          statement.bind(blob: key, at: 2)
          statement.bind(accessedAt, at: 3)
        }
      }
      for (key, blob) in batch.damaged {
        try connection.run("DELETE FROM entries WHERE namespace = ?1 AND key = ?2 AND value = ?3") { statement in
          statement.bind(namespace, at: 1)
          statement.bind(blob: key, at: 2)
          statement.bind(blob: blob, at: 3)
        }
      }
      var report = Report()
      for key in batch.expired {
        try connection.run("DELETE FROM entries WHERE namespace = ?1 AND key = ?2 AND expires_at <= ?3") {
          statement in
          statement.bind(namespace, at: 1)
          statement.bind(blob: key, at: 2)
          statement.bind(now, at: 3)
        }
        report.expiredRemoved += connection.changes
      }
      try enforceLimits(sizeLimit: sizeLimit, countLimit: countLimit, now: now, report: &report)
      try connection.execute("COMMIT")
      return report
    } catch {
      try? connection.execute("ROLLBACK")
      throw error
    }
  }

  /// Deletes expired rows, then the least recently accessed ones, until within the limits.
  /// Runs inside the caller's transaction.
  private func enforceLimits(
    sizeLimit: Int, countLimit: Int?, now: Int64, report: inout Report
  ) throws(SQLiteError) {
    var (bytes, count) = try usage()
    let countLimit = countLimit ?? .max
    guard bytes > sizeLimit || count > countLimit else { return }
    report.expiredRemoved += try deleteExpired(now: now)
    (bytes, count) = try usage()
    guard bytes > sizeLimit || count > countLimit else { return }
    let oldest = try connection.statement(
      "SELECT rowid, size FROM entries WHERE namespace = ?1 ORDER BY accessed_at, rowid")
    var victims: [Int64] = []
    do {
      defer { oldest.reset() }
      oldest.bind(namespace, at: 1)
      while bytes > sizeLimit || count > countLimit, try oldest.step() {
        victims.append(oldest.int64(0))
        bytes -= Int(oldest.int64(1))
        count -= 1
      }
    }
    for rowid in victims {
      try connection.run("DELETE FROM entries WHERE rowid = ?1") { $0.bind(rowid, at: 1) }
    }
    report.evicted += victims.count
  }

  /// Deletes the namespace's expired rows; returns how many.
  func deleteExpired(now: Int64) throws(SQLiteError) -> Int {
    try connection.run("DELETE FROM entries WHERE namespace = ?1 AND expires_at <= ?2") { statement in
      statement.bind(namespace, at: 1)
      statement.bind(now, at: 2)
    }
    return connection.changes
  }
}
