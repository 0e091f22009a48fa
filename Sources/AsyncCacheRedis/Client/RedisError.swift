/// An error from the Redis layer's client: a server that cannot be reached, does not answer in
/// time or refuses a command.
///
/// Values the layer refuses before anything is sent (too large, not encodable) are
/// `PersistenceError`s, as in every persistent layer. Match on ``code``; ``message`` names the
/// server, the command and the limit involved.
public struct RedisError: Error, Sendable, CustomStringConvertible {
  /// What went wrong, stable across releases.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    private enum Base: Hashable, Sendable {
      case connectionFailed
      case connectionClosed
      case timedOut
      case unavailable
      case protocolError
      case authenticationFailed
      case outOfMemory
      case serverError
      case routingFailed
      case shutDown
    }

    private let base: Base

    private init(_ base: Base) { self.base = base }

    /// No connection could be made: the name did not resolve, the server refused or did not
    /// answer within the connect timeout, or the handshake (`SELECT`, `HELLO`) failed.
    public static let connectionFailed = Code(.connectionFailed)
    /// The connection broke while the command was in flight (the server closed it or was
    /// killed). The command may or may not have run.
    public static let connectionClosed = Code(.connectionClosed)
    /// The server did not answer within the operation timeout. The connection was discarded,
    /// so that its late reply cannot answer another command. The command may or may not have
    /// run.
    public static let timedOut = Code(.timedOut)
    /// The circuit breaker is open after repeated failures: nothing was sent. It lets a probe
    /// through after a delay; see ``RedisError/retryAfter``.
    public static let unavailable = Code(.unavailable)
    /// The server sent bytes that are not the Redis protocol; the connection was discarded.
    public static let protocolError = Code(.protocolError)
    /// `AUTH` was refused (`WRONGPASS`), or the server requires it and none was configured
    /// (`NOAUTH`).
    public static let authenticationFailed = Code(.authenticationFailed)
    /// The server is at its `maxmemory` and its eviction policy refused the write (`OOM`).
    public static let outOfMemory = Code(.outOfMemory)
    /// The server answered with any other error reply; ``RedisError/message`` quotes it.
    public static let serverError = Code(.serverError)
    /// A Redis Cluster could not route the command: no master serves its slot (the cluster is
    /// down or being set up), no node answered with the topology, or the command was
    /// redirected (`MOVED`, `ASK`) more times than the layer follows.
    public static let routingFailed = Code(.routingFailed)
    /// The layer was shut down.
    public static let shutDown = Code(.shutDown)

    /// The code's name, such as `timedOut`.
    public var description: String {
      switch base {
      case .connectionFailed: "connectionFailed"
      case .connectionClosed: "connectionClosed"
      case .timedOut: "timedOut"
      case .unavailable: "unavailable"
      case .protocolError: "protocolError"
      case .authenticationFailed: "authenticationFailed"
      case .outOfMemory: "outOfMemory"
      case .serverError: "serverError"
      case .routingFailed: "routingFailed"
      case .shutDown: "shutDown"
      }
    }
  }

  /// What went wrong.
  public let code: Code
  /// A sentence naming the server and what failed.
  public let message: String
  /// When the circuit breaker lets the next attempt through, for ``Code/unavailable``.
  public let retryAfter: Duration?
  /// The error behind this one (the last failure, for ``Code/unavailable``), if any.
  public let underlying: (any Error)?

  /// Creates an error.
  public init(code: Code, message: String, retryAfter: Duration? = nil, underlying: (any Error)? = nil) {
    self.code = code
    self.message = message
    self.retryAfter = retryAfter
    self.underlying = underlying
  }

  /// A sentence describing the error, for logs.
  public var description: String {
    var text = "RedisError.\(code): \(message)"
    if let underlying { text += " (underlying: \(underlying))" }
    return text
  }

  /// Whether the failure says something about the server's health (it counts toward the
  /// circuit breaker), as opposed to a refusal of one command.
  var countsAsFailure: Bool {
    switch code {
    case .connectionFailed, .connectionClosed, .timedOut, .protocolError: true
    default: false
    }
  }

  /// The error for an error reply to `command`.
  static func reply(_ text: String, to command: String, server: String) -> RedisError {
    let word = text.prefix { $0 != " " }
    let code: Code =
      switch word {
      case "OOM": .outOfMemory
      case "NOAUTH", "WRONGPASS", "NOPERM": .authenticationFailed
      default: .serverError
      }
    return RedisError(code: code, message: "\(server) refused \(command): \(text.prefix(500))")
  }
}
