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
    // Apple platforms: with these off (the default) commits and checkpoints sync with a plain
    // fsync, which leaves the data in the drive's cache; on, they ask the drive to flush it
    // (F_FULLFSYNC). Elsewhere SQLite ignores them (fsync is full already), hence no #if.
    try connection.execute("PRAGMA fullfsync = ON; PRAGMA checkpoint_fullfsync = ON")
    return try SQLiteSchema.prepare(connection)
  }

  /// Opens an existing database on read-only media: no locks, no writes, no migration.
  static func openImmutable(path: String) throws(SQLiteError) -> SQLiteConnection {
    let connection = try SQLiteConnection(path: path, busyTimeout: .zero, mode: .immutable)
    let version = try SQLiteSchema.version(of: connection)
    guard (SQLiteSchema.oldestReadableVersion...SQLiteSchema.currentVersion).contains(version) else {
      throw SQLiteError(
        resultCode: SQLITE_READONLY,
        message: "the database has schema version \(version), and read-only media cannot be migrated to "
          + "version \(SQLiteSchema.currentVersion)")
    }
    return connection
  }

  // MARK: Tag invalidations

  /// The namespace's invalidated tags and their instants (nanoseconds since 1970); none in a
  /// file of a version before tags (read-only media, not migrated).
  func tagInvalidations() throws(SQLiteError) -> [(tag: String, instant: Int64)] {
    let hasTable =
      try connection.integer("SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name = 'tag_invalidations'")
      ?? 0
    guard hasTable > 0 else { return [] }
    let statement = try connection.statement("SELECT tag, invalidated_at FROM tag_invalidations WHERE namespace = ?1")
    defer { statement.reset() }
    statement.bind(namespace, at: 1)
    var found: [(tag: String, instant: Int64)] = []
    while try statement.step() { found.append((statement.text(0), statement.int64(1))) }
    return found
  }

  /// Records that `tag` was invalidated at `instant` (nanoseconds since 1970), keeping the later
  /// of it and an instant recorded before; committed, and on disk, when it returns.
  func recordTagInvalidation(_ tag: String, at instant: Int64) throws(SQLiteError) {
    endReading()
    try connection.run(
      """
      INSERT INTO tag_invalidations (namespace, tag, invalidated_at) VALUES (?1, ?2, ?3)
        ON CONFLICT (namespace, tag) DO UPDATE SET invalidated_at = max(invalidated_at, excluded.invalidated_at)
      """
    ) { statement in
      statement.bind(namespace, at: 1)
      statement.bind(tag, at: 2)
      statement.bind(instant, at: 3)
    }
  }

  // MARK: Reads

  enum Lookup {
    case miss
    case hit(payload: Data, metadata: EntryMetadata, expiresAt: Int64?, accessedAt: Int64)
    case expired
    case damaged(SQLiteRecord.Damage, blob: Data)
  }

  /// Looks `key` up, checking the row's header and checksum.
  ///
  /// The hot path of every read: the statement is kept with the namespace bound, and the key is
  /// bound without a copy for the one step.
  func lookup(_ key: UnsafeRawBufferPointer, now: Int64) throws(SQLiteError) -> Lookup {
    let statement: SQLiteStatement
    if let lookupStatement {
      statement = lookupStatement
    } else {
      statement = try connection.statement(
        "SELECT value, expires_at, accessed_at FROM entries WHERE namespace = ?1 AND key = ?2")
      statement.bind(namespace, at: 1)
      lookupStatement = statement
    }
    statement.bind(borrowing: key, at: 2)
    defer { statement.resetKeeping(boundAt: 1) }
    guard try statement.step() else { return .miss }
    let expiresAt = statement.optionalInt64(1)
    if let expiresAt, expiresAt <= now { return .expired }
    let blob = statement.blob(0)
    switch SQLiteRecord.contents(of: blob, key: key, expiresAt: expiresAt) {
    case .success(let contents):
      return .hit(
        payload: Data(contents.payload), metadata: contents.metadata, expiresAt: expiresAt,
        accessedAt: statement.int64(2))
    case .failure(let error): return .damaged(error.damage, blob: Data(blob))
    }
  }

  /// The statement of ``lookup(_:now:)``, prepared on first use, with the namespace bound.
  private var lookupStatement: SQLiteStatement?

  /// Whether a read transaction opened by ``beginReading()`` is open.
  private(set) var isReading = false

  /// Opens a read transaction for the lookups that follow, unless one is open; returns whether
  /// it opened one, which the caller must close with ``endReading()``.
  ///
  /// Lookups that share a transaction share one snapshot (taken by the first) and one pair of
  /// shared-memory locks, two `fcntl` calls, instead of a transaction each.
  func beginReading() throws(SQLiteError) -> Bool {
    guard !isReading, sqlite3_get_autocommit(connection.handle) != 0 else { return false }
    try connection.statement("BEGIN").run()
    isReading = true
    return true
  }

  /// Closes the read transaction opened by ``beginReading()``, if one is open. Writes call it
  /// first.
  func endReading() {
    guard isReading else { return }
    isReading = false
    do {
      try connection.statement("COMMIT").run()
    } catch {
      try? connection.execute("ROLLBACK")
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

  /// The bytes and rows stored in the namespace. 64-bit, as SQLite keeps them: a namespace may
  /// hold more than a 32-bit `Int` counts (watchOS).
  func usage() throws(SQLiteError) -> (bytes: Int64, count: Int64) {
    let statement = try connection.statement("SELECT bytes, count FROM namespaces WHERE namespace = ?1")
    defer { statement.reset() }
    statement.bind(namespace, at: 1)
    guard try statement.step() else { return (0, 0) }
    return (statement.int64(0), statement.int64(1))
  }

  // MARK: Writes

  /// Everything one transaction applies, in order: clear, writes, touches, clean-ups.
  struct Batch {
    /// The stamp of a `removeAll()`: rows written before it are deleted.
    var clearStamp: Int64?
    /// Writes under their encoded keys (stored as the keys' UTF-8 bytes), as the layer's
    /// pending writes hold them. An upsert replaces, and a delete deletes, only a row written
    /// before its stamp.
    var operations: [String: PendingWrites.Write] = [:]
    /// Access times to record for keys read since the last batch (for LRU order).
    var touches: [([UInt8], Int64)] = []
    /// Rows found damaged, or dead by tag: deleted if they still hold the bytes found.
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

  /// Creates the namespace's row of running totals if it is missing (writes only update it).
  /// Runs inside the caller's transaction.
  func ensureNamespace() throws(SQLiteError) {
    try connection.run("INSERT OR IGNORE INTO namespaces (namespace, bytes, count) VALUES (?1, 0, 0)") {
      $0.bind(namespace, at: 1)
    }
  }

  /// Applies `batch` in one `BEGIN IMMEDIATE` transaction, then evicts expired and least
  /// recently accessed rows until the namespace is within `sizeLimit` bytes and `countLimit`
  /// rows. Either all of it commits or none of it does.
  ///
  /// The running totals: triggers keep them for deletes and for rows replaced with another
  /// size; rows inserted here are added up and counted with one statement, before the limits
  /// are checked (an insert trigger, run for every row, cost a sixth of a batched write).
  func apply(_ batch: Batch, sizeLimit: Int, countLimit: Int?, now: Int64) throws(SQLiteError) -> Report {
    endReading()
    if batch.isHousekeeping { try connection.execute("PRAGMA synchronous = NORMAL") }
    // Setting `synchronous` only sets a flag of the connection (no I/O, no lock), so restoring
    // it cannot fail on an open connection; were it to, the connection would report that on the
    // next statement anyway.
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
      let inserted = try write(batch.operations)
      if inserted.count > 0 {
        try connection.run("UPDATE namespaces SET bytes = bytes + ?2, count = count + ?3 WHERE namespace = ?1") {
          statement in
          statement.bind(namespace, at: 1)
          statement.bind(Int64(inserted.bytes), at: 2)
          statement.bind(Int64(inserted.count), at: 3)
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

  static let insertSQL = """
    INSERT INTO entries (namespace, key, value, size, expires_at, accessed_at, written_at)
    VALUES (?1, ?2, ?3, ?4, ?5, ?7, ?6)
    ON CONFLICT (namespace, key) DO NOTHING
    """
  /// Replaces a row unless it was written later (by another connection, while this batch
  /// waited or failed): that row keeps its newer value.
  static let replaceSQL = """
    UPDATE entries SET value = ?3, size = ?4, expires_at = ?5, accessed_at = ?7, written_at = ?6
    WHERE namespace = ?1 AND key = ?2 AND written_at <= ?6
    """
  static let deleteSQL = "DELETE FROM entries WHERE namespace = ?1 AND key = ?2 AND written_at <= ?3"

  /// Writes `operations`; returns the bytes and rows it inserted (the triggers count the rows
  /// it replaced or deleted). Runs inside the caller's transaction.
  ///
  /// The statements are looked up once and the namespace bound once; keys and values are bound
  /// without copies, for the one step that reads them.
  private func write(_ operations: [String: PendingWrites.Write]) throws(SQLiteError) -> (bytes: Int, count: Int) {
    guard !operations.isEmpty else { return (0, 0) }
    let insert = try connection.statement(Self.insertSQL)
    defer { insert.reset() }
    insert.bind(namespace, at: 1)
    var replace: SQLiteStatement?
    var delete: SQLiteStatement?
    defer {
      replace?.reset()
      delete?.reset()
    }
    /// The statement of `sql` with the namespace bound, looked up the first time it is needed.
    func prepared(_ statement: inout SQLiteStatement?, _ sql: String) throws(SQLiteError) -> SQLiteStatement {
      if let statement { return statement }
      let prepared = try connection.statement(sql)
      prepared.bind(namespace, at: 1)
      statement = prepared
      return prepared
    }
    var inserted = (bytes: 0, count: 0)
    for (key, write) in operations {
      var key = key
      switch write {
      case .upsert(let row, let stamp, let accessedAt):
        let result = key.withUTF8 { key in
          withRecord(of: row) { blob -> Result<Bool, SQLiteError> in
            func bind(_ statement: SQLiteStatement) {
              statement.bind(borrowing: UnsafeRawBufferPointer(key), at: 2)
              statement.bind(borrowing: blob, at: 3)
              statement.bind(Int64(row.size), at: 4)
              statement.bind(row.expiresAt, at: 5)
              statement.bind(stamp, at: 6)
              statement.bind(accessedAt, at: 7)
            }
            do throws(SQLiteError) {
              bind(insert)
              if try insert.run() == 1 { return .success(true) }
              let statement = try prepared(&replace, Self.replaceSQL)
              bind(statement)
              try statement.run()
              return .success(false)
            } catch {
              return .failure(error)
            }
          }
        }
        if try result.get() {
          inserted.bytes += row.size
          inserted.count += 1
        }
      case .delete(let stamp):
        let statement = try prepared(&delete, Self.deleteSQL)
        let result = key.withUTF8 { key -> Result<Int, SQLiteError> in
          statement.bind(borrowing: UnsafeRawBufferPointer(key), at: 2)
          statement.bind(stamp, at: 3)
          do throws(SQLiteError) { return .success(try statement.run()) } catch { return .failure(error) }
        }
        _ = try result.get()
      }
    }
    return inserted
  }

  /// Calls `body` with the value column of `row` (header and encoded value, `SQLiteRecord`),
  /// assembled in a buffer that is reused from row to row.
  private func withRecord<Result>(of row: PendingWrites.Row, _ body: (UnsafeRawBufferPointer) -> Result) -> Result {
    let count = row.count
    if recordBuffer.count < count {
      recordBuffer.deallocate()
      recordBuffer = .allocate(byteCount: count, alignment: 8)
    }
    defer {
      // A rare large value does not keep its buffer.
      if recordBuffer.count > Self.keptRecordBufferSize {
        recordBuffer.deallocate()
        recordBuffer = .allocate(byteCount: Self.keptRecordBufferSize, alignment: 8)
      }
    }
    let buffer = UnsafeMutableRawBufferPointer(rebasing: recordBuffer[..<count])
    row.encodedMetadata.withUnsafeBytes { metadata in
      row.payload.withUnsafeBytes { payload in
        SQLiteRecord.write(into: buffer, metadata: metadata, payload: payload, digest: row.checksum)
      }
    }
    return body(UnsafeRawBufferPointer(buffer))
  }

  /// The buffer ``withRecord(of:_:)`` assembles value columns in.
  private var recordBuffer = UnsafeMutableRawBufferPointer.allocate(byteCount: keptRecordBufferSize, alignment: 8)
  private static let keptRecordBufferSize = 64 << 10

  deinit {
    recordBuffer.deallocate()
  }

  /// Deletes expired rows, then the least recently accessed ones, until within the limits.
  /// Runs inside the caller's transaction.
  private func enforceLimits(
    sizeLimit: Int, countLimit: Int?, now: Int64, report: inout Report
  ) throws(SQLiteError) {
    var (bytes, count) = try usage()
    let sizeLimit = Int64(sizeLimit)
    let countLimit = countLimit.map(Int64.init) ?? .max
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
        bytes -= oldest.int64(1)
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
