import AsyncCache
import CAsyncCacheSQLiteVFS
import CSQLite
import Foundation

/// One SQLite connection and its prepared statements.
///
/// Not thread-safe: one thread uses it at a time. The layer's own connection is only used on the
/// layer's executor thread (a `BlockingExecutor`); a reader (`SQLiteReaders`) by the thread that
/// checked it out. Statements are prepared once (`SQLITE_PREPARE_PERSISTENT`) and reused.
final class SQLiteConnection {
  let handle: OpaquePointer
  let path: String
  private var statements: [String: SQLiteStatement] = [:]

  /// How a connection opens its file.
  enum Mode {
    /// Read and write, creating the file if needed: the layer's own connection.
    case readWrite
    /// An existing file, read-only and without locks: for read-only media, where WAL's shared
    /// memory file cannot be created.
    case immutable
    /// An existing file, read-only: a connection that reads on callers' threads (see
    /// `SQLiteReaders`).
    case reader
  }

  /// Opens the database at `path` through the layer's VFS (`CAsyncCacheSQLiteVFS`), which
  /// forwards to the system's default one.
  init(path: String, busyTimeout: Duration, mode: Mode = .readWrite) throws(SQLiteError) {
    var handle: OpaquePointer?
    let vfs = asynccache_sqlite_vfs_name()
    let result: Int32
    switch mode {
    case .immutable:
      let flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_URI | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
      let uri = "file:\(Self.percentEncoded(path))?immutable=1"
      result = sqlite3_open_v2(uri, &handle, flags, vfs)
    case .readWrite:
      let flags = SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
      result = sqlite3_open_v2(path, &handle, flags, vfs)
    case .reader:
      let flags = SQLITE_OPEN_READONLY | SQLITE_OPEN_NOMUTEX | SQLITE_OPEN_EXRESCODE
      result = sqlite3_open_v2(path, &handle, flags, vfs)
    }
    guard result == SQLITE_OK, let handle else {
      let message = handle.map { String(cString: sqlite3_errmsg($0)) } ?? String(cString: sqlite3_errstr(result))
      sqlite3_close_v2(handle)
      throw SQLiteError(resultCode: result, message: message)
    }
    self.handle = handle
    self.path = path
    setBusyTimeout(busyTimeout)
  }

  deinit {
    close()
  }

  /// `path` with the characters that are special in a URI (and anything not printable ASCII)
  /// percent-encoded.
  static func percentEncoded(_ path: String) -> String {
    var result = ""
    for byte in path.utf8 {
      switch byte {
      case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
        UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "/"), UInt8(ascii: "-"), UInt8(ascii: "_"),
        UInt8(ascii: "."), UInt8(ascii: "~"):
        result.unicodeScalars.append(Unicode.Scalar(byte))
      default:
        let hex = String(byte, radix: 16, uppercase: true)
        result += "%" + (hex.count == 1 ? "0" + hex : hex)
      }
    }
    return result
  }

  private var isClosed = false

  /// Finalizes every statement and closes the connection.
  func close() {
    guard !isClosed else { return }
    isClosed = true
    for statement in statements.values { statement.finalize() }
    statements.removeAll()
    sqlite3_close_v2(handle)
  }

  /// Runs one or more statements that return no rows.
  func execute(_ sql: String) throws(SQLiteError) {
    var message: UnsafeMutablePointer<CChar>?
    let result = sqlite3_exec(handle, sql, nil, nil, &message)
    guard result == SQLITE_OK else {
      let text = message.map { String(cString: $0) } ?? lastErrorMessage
      sqlite3_free(message)
      throw SQLiteError(resultCode: sqlite3_extended_errcode(handle), message: text)
    }
  }

  /// The cached prepared statement for `sql`, reset and with its bindings cleared.
  func statement(_ sql: String) throws(SQLiteError) -> SQLiteStatement {
    if let statement = statements[sql] { return statement }
    var pointer: OpaquePointer?
    let result = sqlite3_prepare_v3(handle, sql, -1, UInt32(SQLITE_PREPARE_PERSISTENT), &pointer, nil)
    guard result == SQLITE_OK, let pointer else { throw error(result) }
    let statement = SQLiteStatement(pointer, connection: self)
    statements[sql] = statement
    return statement
  }

  /// Runs a statement for its side effects.
  func run(_ sql: String, _ bind: (SQLiteStatement) -> Void = { _ in }) throws(SQLiteError) {
    let statement = try statement(sql)
    defer { statement.reset() }
    bind(statement)
    while try statement.step() {}
  }

  /// The first column of the first row of `sql` as an integer, or `nil` when there is no row.
  func integer(_ sql: String, _ bind: (SQLiteStatement) -> Void = { _ in }) throws(SQLiteError) -> Int64? {
    let statement = try statement(sql)
    defer { statement.reset() }
    bind(statement)
    guard try statement.step(), !statement.isNull(0) else { return nil }
    return statement.int64(0)
  }

  /// How long a statement waits for a lock held by another connection before it fails with
  /// `SQLITE_BUSY`.
  func setBusyTimeout(_ timeout: Duration) {
    guard !isClosed else { return }
    sqlite3_busy_timeout(handle, Int32(clamping: timeout.clampedNanoseconds / 1_000_000))
  }

  /// Empties the database in place, even a corrupt one; every connection to the file sees the
  /// empty database.
  func resetDatabase() throws(SQLiteError) {
    let result = csqlite_reset_database(handle)
    guard result == SQLITE_OK else { throw error(result) }
  }

  /// Rows changed by the last statement.
  var changes: Int { Int(sqlite3_changes(handle)) }

  var lastErrorMessage: String { String(cString: sqlite3_errmsg(handle)) }

  func error(_ result: Int32) -> SQLiteError {
    let code = sqlite3_extended_errcode(handle)
    return SQLiteError(resultCode: code == SQLITE_OK ? result : code, message: lastErrorMessage)
  }

  /// The largest string or blob this connection accepts (`SQLITE_LIMIT_LENGTH`).
  var maximumLength: Int { Int(sqlite3_limit(handle, SQLITE_LIMIT_LENGTH, -1)) }
}

/// A prepared statement. Bind, step, read columns, reset.
final class SQLiteStatement {
  let pointer: OpaquePointer
  unowned let connection: SQLiteConnection

  init(_ pointer: OpaquePointer, connection: SQLiteConnection) {
    self.pointer = pointer
    self.connection = connection
  }

  func finalize() { sqlite3_finalize(pointer) }

  /// Clears the bindings and resets the statement so that it can run again.
  func reset() {
    sqlite3_reset(pointer)
    sqlite3_clear_bindings(pointer)
  }

  /// Steps once; `true` when a row is available.
  func step() throws(SQLiteError) -> Bool {
    switch sqlite3_step(pointer) {
    case SQLITE_ROW: return true
    case SQLITE_DONE: return false
    case let result: throw connection.error(result)
    }
  }

  /// Runs a statement that returns no rows and resets it, keeping its bindings (a loop binds a
  /// parameter that every run shares once). Returns the rows it changed.
  @discardableResult
  func run() throws(SQLiteError) -> Int {
    let result = sqlite3_step(pointer)
    guard result == SQLITE_DONE else {
      let error = connection.error(result)
      sqlite3_reset(pointer)
      throw error
    }
    sqlite3_reset(pointer)
    return connection.changes
  }

  /// Resets the statement and clears every binding but parameter `kept` (bound once for many
  /// runs), so that no borrowed bytes stay bound.
  func resetKeeping(boundAt kept: Int32) {
    sqlite3_reset(pointer)
    for index in 1...max(1, sqlite3_bind_parameter_count(pointer)) where index != kept {
      sqlite3_bind_null(pointer, index)
    }
  }

  func bind(_ value: Int64, at index: Int32) {
    sqlite3_bind_int64(pointer, index, value)
  }

  func bind(_ value: Int64?, at index: Int32) {
    if let value { sqlite3_bind_int64(pointer, index, value) } else { sqlite3_bind_null(pointer, index) }
  }

  func bind(_ text: String, at index: Int32) {
    var text = text
    text.withUTF8 { bytes in
      _ = sqlite3_bind_text(
        pointer, index, UnsafeRawPointer(bytes.baseAddress).map { $0.assumingMemoryBound(to: CChar.self) },
        Int32(bytes.count), csqlite_transient())
    }
  }

  /// Binds bytes as a blob (SQLite copies them).
  func bind(blob bytes: UnsafeRawBufferPointer, at index: Int32) {
    // A zero-length blob needs a non-nil pointer, or SQLite binds NULL.
    if bytes.isEmpty {
      sqlite3_bind_zeroblob(pointer, index, 0)
    } else {
      sqlite3_bind_blob64(pointer, index, bytes.baseAddress, sqlite3_uint64(bytes.count), csqlite_transient())
    }
  }

  func bind(blob data: Data, at index: Int32) {
    data.withUnsafeBytes { bind(blob: $0, at: index) }
  }

  /// Binds bytes as a blob without copying them (`SQLITE_STATIC`): they must stay valid and
  /// unchanged until the statement has run, and be unbound (rebound, or cleared by ``reset()``
  /// or ``resetKeeping(boundAt:)``) before they go away.
  func bind(borrowing bytes: UnsafeRawBufferPointer, at index: Int32) {
    // A zero-length blob needs a non-nil pointer, or SQLite binds NULL.
    if bytes.isEmpty {
      sqlite3_bind_zeroblob(pointer, index, 0)
    } else {
      sqlite3_bind_blob64(pointer, index, bytes.baseAddress, sqlite3_uint64(bytes.count), nil)
    }
  }

  func bind(blob bytes: [UInt8], at index: Int32) {
    bytes.withUnsafeBytes { bind(blob: $0, at: index) }
  }

  func isNull(_ column: Int32) -> Bool { sqlite3_column_type(pointer, column) == SQLITE_NULL }

  func int64(_ column: Int32) -> Int64 { sqlite3_column_int64(pointer, column) }

  func optionalInt64(_ column: Int32) -> Int64? { isNull(column) ? nil : int64(column) }

  /// The bytes of a blob column, valid until the next step or reset.
  func blob(_ column: Int32) -> UnsafeRawBufferPointer {
    let base = sqlite3_column_blob(pointer, column)
    let count = Int(sqlite3_column_bytes(pointer, column))
    guard let base, count > 0 else { return UnsafeRawBufferPointer(start: nil, count: 0) }
    return UnsafeRawBufferPointer(start: base, count: count)
  }

  func text(_ column: Int32) -> String {
    let bytes = blob(column)
    return String(decoding: bytes, as: UTF8.self)
  }
}
