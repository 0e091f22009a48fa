import CSQLite
import Foundation

/// A plain sqlite3 connection that tests use to look behind the layer's back: count rows,
/// damage them, set schema versions.
final class RawDatabase {
  let handle: OpaquePointer

  init(_ url: URL) throws {
    var handle: OpaquePointer?
    guard sqlite3_open_v2(url.path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil) == SQLITE_OK,
      let handle
    else { throw RawDatabaseError(message: "cannot open \(url.path)") }
    self.handle = handle
    sqlite3_busy_timeout(handle, 5000)
  }

  deinit { sqlite3_close_v2(handle) }

  func execute(_ sql: String) throws {
    var message: UnsafeMutablePointer<CChar>?
    guard sqlite3_exec(handle, sql, nil, nil, &message) == SQLITE_OK else {
      defer { sqlite3_free(message) }
      throw RawDatabaseError(message: message.map { String(cString: $0) } ?? "sqlite3_exec failed")
    }
  }

  /// The first column of every row of `sql`, as integers.
  func integers(_ sql: String) throws -> [Int64] {
    var statement: OpaquePointer?
    guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK else {
      throw RawDatabaseError(message: String(cString: sqlite3_errmsg(handle)))
    }
    defer { sqlite3_finalize(statement) }
    var values: [Int64] = []
    while sqlite3_step(statement) == SQLITE_ROW { values.append(sqlite3_column_int64(statement, 0)) }
    return values
  }

  func integer(_ sql: String) throws -> Int64? { try integers(sql).first }

  /// The stored blob of the row for `key`.
  func blob(namespace: String = "default", key: String) throws -> Data? {
    var statement: OpaquePointer?
    let sql = "SELECT value FROM entries WHERE namespace = ?1 AND key = ?2"
    guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK else {
      throw RawDatabaseError(message: String(cString: sqlite3_errmsg(handle)))
    }
    defer { sqlite3_finalize(statement) }
    sqlite3_bind_text(statement, 1, namespace, -1, csqlite_transient())
    let keyBytes = Array(key.utf8)
    sqlite3_bind_blob(statement, 2, keyBytes, Int32(keyBytes.count), csqlite_transient())
    guard sqlite3_step(statement) == SQLITE_ROW else { return nil }
    let count = Int(sqlite3_column_bytes(statement, 0))
    guard let base = sqlite3_column_blob(statement, 0) else { return Data() }
    return Data(bytes: base, count: count)
  }

  /// Replaces the stored blob of the row for `key`.
  func setBlob(_ data: Data, namespace: String = "default", key: String) throws {
    var statement: OpaquePointer?
    let sql = "UPDATE entries SET value = ?3 WHERE namespace = ?1 AND key = ?2"
    guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK else {
      throw RawDatabaseError(message: String(cString: sqlite3_errmsg(handle)))
    }
    defer { sqlite3_finalize(statement) }
    sqlite3_bind_text(statement, 1, namespace, -1, csqlite_transient())
    let keyBytes = Array(key.utf8)
    sqlite3_bind_blob(statement, 2, keyBytes, Int32(keyBytes.count), csqlite_transient())
    data.withUnsafeBytes { bytes in
      _ = sqlite3_bind_blob(
        statement, 3, bytes.baseAddress ?? UnsafeRawPointer(bitPattern: 1), Int32(bytes.count),
        csqlite_transient())
    }
    guard sqlite3_step(statement) == SQLITE_DONE, sqlite3_changes(handle) == 1 else {
      throw RawDatabaseError(message: "no row for \(key)")
    }
  }

  func rowCount(namespace: String = "default") throws -> Int {
    Int(try integer("SELECT count(*) FROM entries WHERE namespace = '\(namespace)'") ?? 0)
  }
}

struct RawDatabaseError: Error, CustomStringConvertible {
  let message: String
  var description: String { message }
}
