import AsyncCache
import CSQLite
import Foundation

// Opening the database on the layer's thread: its folder created, read-only media served read-only,
// its schema migrated, and a file SQLite reports corrupt emptied in place (after a copy), at
// opening or later.
extension SQLiteLayer {
  /// The layer's store, opened again when an earlier recovery from a damaged file left it closed.
  func openStore() throws -> SQLiteStore {
    assert(executor.isCurrentThread, "SQLite must only be used on the layer's connection thread")
    if let store { return store }
    guard !isClosed else { throw closedError }
    // An earlier recovery from a damaged file failed; try again.
    try open()
    guard let store else { throw closedError }
    return store
  }

  /// Opens the database, replacing it if SQLite reports it corrupt.
  func open() throws {
    let directory = url.deletingLastPathComponent()
    do {
      try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    } catch {
      throw PersistenceError(
        code: .ioFailure, message: "cannot create the folder \(directory.path) for the database", underlying: error)
    }
    do {
      try connect()
    } catch let error as SQLiteError {
      guard Self.isReadOnlyFileSystem(directory) else {
        throw PersistenceError.sqlite(error, while: "opening \(url.path)")
      }
      // Read-only media: serve what the file holds, refuse writes.
      guard FileManager.default.fileExists(atPath: url.path) else {
        throw PersistenceError(
          code: .readOnly, message: "cannot create \(url.path): its file system is read-only", underlying: error)
      }
      do {
        store = SQLiteStore(connection: try SQLiteStore.openImmutable(path: url.path), namespace: namespace)
      } catch let error {
        throw PersistenceError(
          code: .readOnly, message: "cannot open \(url.path) on its read-only file system", underlying: error)
      }
      pending.withLock { $0.readOnlyReason = "\(url.path) is on a read-only file system" }
      isReadOnly = true
      do {
        try loadTagInvalidations()
      } catch {
        throw PersistenceError.sqlite(error, while: "reading the tag invalidations of \(url.path)")
      }
      layerEnvironment.log(
        .warning, "the database is on a read-only file system; opened it read-only, writes are refused")
    }
  }

  /// Whether `directory` cannot be written because its file system is read-only or access is
  /// denied.
  private static func isReadOnlyFileSystem(_ directory: URL) -> Bool {
    guard access(directory.path, W_OK) != 0 else { return false }
    return errno == EROFS || errno == EACCES || errno == EPERM
  }

  private func connect() throws {
    assert(executor.isCurrentThread, "SQLite must only be used on the layer's connection thread")
    let connection = try SQLiteConnection(path: url.path, busyTimeout: configuration.busyTimeout)
    let outcome = try configureRecovering(connection)
    guard connection.maximumLength - SQLiteRecord.headerSize >= entryLimit else {
      connection.close()
      throw AsyncCacheError.invalidConfiguration(
        "SQLiteLayer: maximumEntrySize \(entryLimit) exceeds this SQLite's limit of \(connection.maximumLength) bytes")
    }
    store = SQLiteStore(connection: connection, namespace: namespace)
    do {
      try loadTagInvalidations()
    } catch {
      // Pages damaged where the invalidations are: the entries they kill must not come back,
      // so the file is emptied, as a read of damaged pages would.
      guard try replaceIfCorrupt(error) else {
        throw PersistenceError.sqlite(error, while: "reading the tag invalidations of \(url.path)")
      }
    }
    switch outcome {
    case .current: break
    case .migrated(let from) where from > 0:
      record(.schemaMigrated(from: Int(from), to: Int(SQLiteSchema.currentVersion)))
    case .migrated: break
    case .reset(let found): record(.schemaReset(foundVersion: Int(found)))
    }
  }

  /// Reads the namespace's tag invalidations into ``tagInvalidations`` (adding to those
  /// recorded before, if the database was opened again).
  private func loadTagInvalidations() throws(SQLiteError) {
    guard let store else { return }
    for (tag, instant) in try store.tagInvalidations() {
      tagInvalidations.record(tag, at: CacheInstant(nanosecondsSince1970: instant))
    }
  }

  /// Configures a new connection; a file that turns out damaged is emptied in place first.
  private func configureRecovering(_ connection: SQLiteConnection) throws -> SQLiteSchema.Outcome {
    do {
      return try SQLiteStore.configure(connection)
    } catch  where Self.isCorruption(error) {
      try reset(connection, reason: error)
      return try SQLiteStore.configure(connection)
    }
  }

  static func isCorruption(_ error: SQLiteError) -> Bool {
    error.primaryResultCode == SQLITE_CORRUPT || error.primaryResultCode == SQLITE_NOTADB
  }

  /// When `error` says the database is corrupt, replaces it and returns `true`.
  func replaceIfCorrupt(_ error: SQLiteError) throws -> Bool {
    guard Self.isCorruption(error) else { return false }
    try replaceDatabase(reason: error)
    return true
  }

  /// Has the layer's thread open another reader (see `SQLiteReaders`), after the jobs queued.
  nonisolated func requestReader() {
    executor.execute { [self] in assumeIsolated { $0.openReader() } }
  }

  /// Opens a reader: a read-only connection through the layer's VFS, with its lookup prepared
  /// and run once here, where waiting is allowed (it opens the WAL, maps its shared memory and
  /// reads the schema), so that reads on callers' threads find all of that done.
  private func openReader() {
    closeRetiredReaders()
    let generation = readers.generation
    guard store != nil else {
      // Recovering from a damaged file: a later read asks again.
      readers.openingFailed(disable: false)
      return
    }
    // Read-only media (no WAL, no locks) and network or FUSE file systems (whose locks and
    // reads may ask a server even when the pages are cached) read on this thread only.
    guard !isClosed, !isReadOnly, fileSystemReadsFromMemoryWithoutWaiting(at: url.deletingLastPathComponent().path)
    else {
      readers.openingFailed(disable: true)
      return
    }
    do {
      let connection = try SQLiteConnection(path: url.path, busyTimeout: .zero, mode: .reader)
      // A memory-mapped page may fault in from the device; the VFS would not map one anyway.
      try connection.execute("PRAGMA mmap_size = 0")
      let reader = SQLiteStore(connection: connection, namespace: namespace)
      _ = try [UInt8(0)].withUnsafeBytes { try reader.lookup($0, now: 0) }
      readers.add(reader, generation: generation)?.close()
    } catch {
      // A lock held by another process (a checkpoint, a recovery) passes; the file, its
      // permissions or its system do not.
      let passing =
        (error as? SQLiteError).map { $0.primaryResultCode == SQLITE_BUSY || $0.primaryResultCode == SQLITE_LOCKED }
        ?? false
      readers.openingFailed(disable: !passing)
      guard !passing else { return }
      layerEnvironment.log(
        .info, "cannot open a connection to read on callers' threads; every read goes to the layer's thread: \(error)",
        metadata: ["error": CacheLogger.describe(error)])
    }
  }

  /// Closes the readers handed back after their generation ended.
  func closeRetiredReaders() {
    for reader in readers.takeRetired() { reader.close() }
  }

  /// Closes every reader, after waiting for those checked out: a read on a caller's thread
  /// never waits for the device (it gives up instead), so this waits for the time of a read
  /// from memory.
  func closeReaders() {
    var closing = readers.close()
    while readers.checkedOut > 0 { sched_yield() }
    closing += readers.takeRetired()
    for reader in closing { reader.close() }
  }

  /// Empties the damaged database in place, after copying it aside for inspection.
  ///
  /// Every connection to the file, in this process (other namespaces) and in others, goes on
  /// with the same file, now empty and sound; a file moved aside would leave them writing into
  /// a database that nobody opens again.
  func replaceDatabase(reason: SQLiteError) throws {
    let connection = try openStore().connection
    // Readers opened before read the damaged file's pages from their caches: new ones read the
    // emptied file.
    for reader in readers.retireAll() { reader.close() }
    do {
      try reset(connection, reason: reason)
      _ = try SQLiteStore.configure(connection)
    } catch {
      // Leave the layer to reconnect (and try again) on its next call.
      store?.connection.close()
      store = nil
      // Busy, a full disk...: say so, so that the caller can act on it.
      if let error = error as? SQLiteError {
        throw PersistenceError.sqlite(error, while: "resetting the damaged database \(url.path)")
      }
      throw PersistenceError(
        code: .corrupted, message: "\(url.path) is damaged and could not be reset", underlying: error)
    }
  }

  /// Copies the damaged file aside (best effort), then empties it in place on `connection`.
  private func reset(_ connection: SQLiteConnection, reason: SQLiteError) throws {
    // One copy per damaged file: attempts that fail (another process holds the lock, say) and
    // are retried reuse it, instead of filling the disk with copies.
    let manager = FileManager.default
    if damagedCopy == nil {
      let aside = url.deletingLastPathComponent().appendingPathComponent(
        "\(url.lastPathComponent).corrupt-\(UUID().uuidString)")
      var copied = false
      for suffix in ["", "-wal"] where manager.fileExists(atPath: url.path + suffix) {
        if (try? manager.copyItem(atPath: url.path + suffix, toPath: aside.path + suffix)) != nil { copied = true }
      }
      damagedCopy = copied ? aside : nil
    }
    try connection.resetDatabase()
    let copy = damagedCopy
    damagedCopy = nil
    counters.databaseReplacements += 1
    record(.databaseReplaced(reason: .sqlite(reason, while: "using \(url.path)"), copiedTo: copy))
  }
}
