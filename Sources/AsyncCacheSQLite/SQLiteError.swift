import AsyncCache
import CSQLite

/// A failure reported by SQLite itself: the `PersistenceError.underlying` error of errors
/// from ``SQLiteLayer``.
public struct SQLiteError: Error, Sendable, Hashable, CustomStringConvertible {
  /// SQLite's extended result code (for example 5 for `SQLITE_BUSY`, 13 for `SQLITE_FULL`).
  public let resultCode: Int32
  /// SQLite's message for the failure.
  public let message: String

  /// Creates an error from a result code and a message.
  public init(resultCode: Int32, message: String) {
    self.resultCode = resultCode
    self.message = message
  }

  /// The primary result code (the low byte of ``resultCode``).
  public var primaryResultCode: Int32 { resultCode & 0xFF }

  /// A sentence describing the error, for logs.
  public var description: String {
    "SQLite error \(resultCode): \(message)"
  }
}

extension PersistenceError {
  /// Maps a SQLite failure to the code a caller can act on.
  static func sqlite(_ error: SQLiteError, while action: String) -> PersistenceError {
    let code: PersistenceError.Code
    switch error.primaryResultCode {
    case SQLITE_BUSY, SQLITE_LOCKED: code = .busy
    case SQLITE_FULL: code = .noSpace
    case SQLITE_READONLY, SQLITE_PERM: code = .readOnly
    case SQLITE_CORRUPT, SQLITE_NOTADB: code = .corrupted
    case SQLITE_TOOBIG: code = .valueTooLarge
    default: code = .ioFailure
    }
    return PersistenceError(code: code, message: "SQLite failed while \(action): \(error.message)", underlying: error)
  }
}
