/// An error raised by the cache itself, as opposed to an error of an origin or a layer that
/// the cache passes through.
///
/// Match on ``code``; new codes may be added without breaking existing `switch`es over it,
/// because `Code` is a struct.
public struct AsyncCacheError: Error, Sendable, CustomStringConvertible {
  /// A stable identifier of what went wrong.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    private enum Base: Hashable, Sendable {
      case invalidConfiguration
      case invalidCost
      case layerFailure
      case invalidState
      case notFound
      case transformFailed
      case conditionFailed
      case recursiveLoad
      case timedOut
      case closed
      case duplicateKey
      case failedElsewhere
    }

    private let base: Base

    private init(_ base: Base) { self.base = base }

    /// A configuration value is out of range; the message names it.
    public static let invalidConfiguration = Code(.invalidConfiguration)
    /// A cost function returned a cost outside `0..<2^43`: negative, or too large for the memory
    /// layer to hold.
    public static let invalidCost = Code(.invalidCost)
    /// A layer of a ``CacheChain`` failed and its ``LayerFailurePolicy`` is
    /// ``LayerFailurePolicy/propagate``; ``AsyncCacheError/underlying`` holds the layer's error.
    public static let layerFailure = Code(.layerFailure)
    /// An operation is not allowed in the object's current state (for example, running an
    /// ``AsyncPrefetcher`` that already ran); the message says which.
    public static let invalidState = Code(.invalidState)
    /// An origin had no value for a key: an ``AsyncBatchFetcher``'s result left it out. The
    /// message names the key.
    public static let notFound = Code(.notFound)
    /// A key or value transform of an operator failed (``AsyncCacheLayer/mappingKeys(_:)-39ac1``,
    /// ``AsyncCacheLayer/mappingValues(_:)``, …); ``AsyncCacheError/underlying`` holds its
    /// error. A ``CacheChain`` records it and skips the layer, whatever its failure policy.
    public static let transformFailed = Code(.transformFailed)
    /// The predicate of a condition (``AsyncCacheLayer/onlyIf(_:)-7sup4``) failed;
    /// ``AsyncCacheError/underlying`` holds its error. A ``CacheChain`` passes it to the caller,
    /// whatever the layer's failure policy.
    public static let conditionFailed = Code(.conditionFailed)
    /// A request would wait for its own load: a ``LoadingCache``'s origin (or a layer below it),
    /// while loading a key, asked a cache for that key again, directly or through loads of other
    /// keys (A loads B, B loads A), in this cache or another. The request fails at once instead of
    /// waiting for ever; the message names the key. Never retried.
    public static let recursiveLoad = Code(.recursiveLoad)
    /// A request waited for its load longer than its hard timeout (``LoadTimeouts/hard``); the
    /// message names the key and the timeout. The load goes on while other requests wait for
    /// it. Never retried by the cache.
    public static let timedOut = Code(.timedOut)
    /// The cache or chain was closed (``LoadingCache/close()``, ``CacheChain/close()``) before
    /// the request was made; the message names it. Never retried.
    public static let closed = Code(.closed)
    /// ``CodableCacheStore/create(key:value:expires:)`` found the key holding a value; the
    /// message names the key.
    public static let duplicateKey = Code(.duplicateKey)
    /// Another process loaded the key for this one (a ``LoadCoordinator``: one load per key for
    /// the instances of a service) and its origin failed; the message names the key, the process
    /// and the error, as text. Not retried here: the process that loaded retried per its own
    /// policy, and the next request loads again. (An origin's ``notFound`` keeps its code: the
    /// other processes' negative caching remembers it.)
    public static let failedElsewhere = Code(.failedElsewhere)

    public var description: String {
      switch base {
      case .invalidConfiguration: "invalidConfiguration"
      case .invalidCost: "invalidCost"
      case .layerFailure: "layerFailure"
      case .invalidState: "invalidState"
      case .notFound: "notFound"
      case .transformFailed: "transformFailed"
      case .conditionFailed: "conditionFailed"
      case .recursiveLoad: "recursiveLoad"
      case .timedOut: "timedOut"
      case .closed: "closed"
      case .duplicateKey: "duplicateKey"
      case .failedElsewhere: "failedElsewhere"
      }
    }
  }

  /// What went wrong.
  public let code: Code
  /// A sentence that names the offending input or component.
  public let message: String
  /// The error that caused this one, if any.
  public let underlying: (any Error)?

  /// Creates an error.
  public init(code: Code, message: String, underlying: (any Error)? = nil) {
    self.code = code
    self.message = message
    self.underlying = underlying
  }

  public var description: String {
    if let underlying {
      return "AsyncCacheError.\(code): \(message) (underlying: \(underlying))"
    }
    return "AsyncCacheError.\(code): \(message)"
  }
}

extension AsyncCacheError {
  package static func invalidConfiguration(_ message: String) -> AsyncCacheError {
    AsyncCacheError(code: .invalidConfiguration, message: message)
  }

  package static func invalidState(_ message: String) -> AsyncCacheError {
    AsyncCacheError(code: .invalidState, message: message)
  }

  /// The error of a create of `key`, which holds a value.
  package static func duplicateKey(_ key: String) -> AsyncCacheError {
    AsyncCacheError(
      code: .duplicateKey, message: "the key \(CacheLogger.describe(key).debugDescription) holds a value already")
  }

  /// The error of an operation on `component` after it was closed.
  package static func closed(_ component: String, operation: String) -> AsyncCacheError {
    AsyncCacheError(code: .closed, message: "\(operation) on a \(component) that was closed")
  }

  /// The error of a request for `key` that waited `timeout` for its load.
  package static func timedOut(_ key: some Sendable, after timeout: Duration) -> AsyncCacheError {
    AsyncCacheError(
      code: .timedOut,
      message: "the request for key \(CacheLogger.describe(key)) waited \(timeout.readable) for its load (hard timeout)"
    )
  }
}
