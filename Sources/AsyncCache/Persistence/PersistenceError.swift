#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Android)
  import Android
#endif

/// An error from a persistent layer: storage that failed, input it refused, data it could not
/// read back.
///
/// Damaged data is never an error on read (it is a miss that is cleaned up and counted); these
/// errors report what the caller can act on. Match on ``code``; ``message`` names the key, file
/// or limit involved.
public struct PersistenceError: Error, Sendable, CustomStringConvertible {
  /// What went wrong, stable across releases.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    private enum Base: Hashable, Sendable {
      case valueTooLarge
      case encodingFailed
      case decodingFailed
      case noSpace
      case readOnly
      case busy
      case corrupted
      case ioFailure
      case closed
    }

    private let base: Base

    private init(_ base: Base) { self.base = base }

    /// A value (or key) is larger than the layer accepts; nothing was written.
    public static let valueTooLarge = Code(.valueTooLarge)
    /// A key or value could not be encoded; nothing was written.
    public static let encodingFailed = Code(.encodingFailed)
    /// Stored bytes could not be decoded, for example a stored key while enumerating keys.
    public static let decodingFailed = Code(.decodingFailed)
    /// The storage is full (`ENOSPC`, `SQLITE_FULL`).
    public static let noSpace = Code(.noSpace)
    /// The storage is read-only (`EROFS`, `EACCES`, `SQLITE_READONLY`).
    public static let readOnly = Code(.readOnly)
    /// Another connection or process held a lock longer than the busy timeout.
    public static let busy = Code(.busy)
    /// The storage is damaged beyond what the layer repairs on its own.
    public static let corrupted = Code(.corrupted)
    /// Any other failure of the file system or database; see ``PersistenceError/underlying``.
    public static let ioFailure = Code(.ioFailure)
    /// The layer was closed.
    public static let closed = Code(.closed)

    /// The code's name, such as `noSpace`.
    public var description: String {
      switch base {
      case .valueTooLarge: "valueTooLarge"
      case .encodingFailed: "encodingFailed"
      case .decodingFailed: "decodingFailed"
      case .noSpace: "noSpace"
      case .readOnly: "readOnly"
      case .busy: "busy"
      case .corrupted: "corrupted"
      case .ioFailure: "ioFailure"
      case .closed: "closed"
      }
    }
  }

  /// What went wrong.
  public let code: Code
  /// A sentence naming the key, file or limit involved.
  public let message: String
  /// The error reported by the system, the database or a coder, if any.
  public let underlying: (any Error)?

  /// Creates an error.
  public init(code: Code, message: String, underlying: (any Error)? = nil) {
    self.code = code
    self.message = message
    self.underlying = underlying
  }

  /// A sentence describing the error, for logs.
  public var description: String {
    if let underlying {
      return "PersistenceError.\(code): \(message) (underlying: \(underlying))"
    }
    return "PersistenceError.\(code): \(message)"
  }
}

extension PersistenceError.Code {
  /// The code for the `errno` of a failed write: ``noSpace`` for a full disk or quota,
  /// ``readOnly`` for a read-only file system or denied access, ``ioFailure`` otherwise.
  package init(writeErrno code: Int32) {
    switch code {
    case ENOSPC, EDQUOT: self = .noSpace
    case EROFS, EACCES, EPERM: self = .readOnly
    default: self = .ioFailure
    }
  }
}

extension PersistenceError {
  package static func undecodableKey(_ string: String, underlying: (any Error)? = nil) -> PersistenceError {
    PersistenceError(
      code: .decodingFailed, message: "the stored key \(string.debugDescription) does not decode to a key",
      underlying: underlying)
  }

  /// The error for a value that `layer`'s value coder could not encode.
  package static func unencodableValue(key: String, layer: String, underlying: any Error) -> PersistenceError {
    PersistenceError(
      code: .encodingFailed, message: "\(layer) cannot encode the value for key \(key.prefix(200).debugDescription)",
      underlying: underlying)
  }

  /// The error for an entry whose metadata `layer` refused (over a limit of ``EntryMetadata``);
  /// `underlying` names which.
  package static func unstorableMetadata(key: String, layer: String, _ underlying: EntryMetadataError)
    -> PersistenceError
  {
    PersistenceError(
      code: .encodingFailed,
      message:
        "\(layer) cannot store the metadata of the entry for key \(key.prefix(200).debugDescription): \(underlying)",
      underlying: underlying)
  }

  /// The error for a value refused because its encoded bytes alone exceed `limit`, the layer's
  /// per-entry limit (or the one `limitName` names).
  package static func valueTooLarge(
    key: String, size: Int, limit: Int, layer: String, limitName: String = "per-entry limit (maximumEntrySize)"
  ) -> PersistenceError {
    PersistenceError(
      code: .valueTooLarge,
      message: "\(layer) refused the value for key \(key.prefix(200).debugDescription): \(size) bytes, above its "
        + "\(limitName) of \(limit) bytes")
  }

  /// The error for an entry refused because its whole stored size (`size`: the value, the key
  /// and the layer's header) exceeds the layer's total size limit, although the value alone is
  /// within its per-entry limit.
  package static func entryOverSizeLimit(key: String, size: Int, limit: Int, layer: String) -> PersistenceError {
    PersistenceError(
      code: .valueTooLarge,
      message: "\(layer) refused the value for key \(key.prefix(200).debugDescription): \(size) bytes with its key "
        + "and header, above its size limit (sizeLimit) of \(limit) bytes")
  }
}
