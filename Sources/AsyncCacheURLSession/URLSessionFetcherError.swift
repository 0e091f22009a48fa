internal import AsyncCache
public import Foundation

/// An error of a ``URLSessionFetcher``: a response with an unacceptable status, a response that
/// is not HTTP, a failed transfer, one that ran past the fetcher's time limit, or a body larger
/// than it accepts.
///
/// Match on ``code``; new codes may be added without breaking existing `switch`es over it,
/// because `Code` is a struct. ``URLSessionFetcher/classify(_:)`` sorts these errors into fatal
/// and transient ones for a `RetryPolicy`.
public struct URLSessionFetcherError: Error, Sendable, CustomStringConvertible {
  /// A stable identifier of what went wrong.
  public struct Code: Hashable, Sendable, CustomStringConvertible {
    private enum Base: Hashable, Sendable {
      case unacceptableStatus
      case notHTTP
      case transport
      case timeLimitExceeded
      case bodyTooLarge
    }

    private let base: Base

    private init(_ base: Base) { self.base = base }

    /// The server answered with a status code the fetcher does not accept (a 404, a 503, …);
    /// ``URLSessionFetcherError/statusCode`` holds it and ``URLSessionFetcherError/bodyExcerpt``
    /// the start of the body.
    public static let unacceptableStatus = Code(.unacceptableStatus)
    /// The response is not an HTTP response (a `file:` or `data:` URL, say), so it has no status
    /// to check.
    public static let notHTTP = Code(.notHTTP)
    /// The transfer failed: no connection, a timeout, a dropped connection, a bad URL;
    /// ``URLSessionFetcherError/underlying`` holds the `URLError`.
    public static let transport = Code(.transport)
    /// The fetch did not finish within the fetcher's
    /// ``URLSessionFetcher/Configuration-swift.struct/timeLimit``: a server that answers too
    /// slowly, or one that trickles its headers or body to keep the session's own timeouts from
    /// firing. The transfer was cancelled. Transient: the next attempt may be quicker.
    public static let timeLimitExceeded = Code(.timeLimitExceeded)
    /// The response body is larger than the fetcher's
    /// ``URLSessionFetcher/Configuration-swift.struct/maximumBodySize``, as declared by its
    /// `Content-Length` or as received (decoded bytes when the body is compressed). The transfer
    /// was stopped. Fatal: the same URL would send the same body again.
    public static let bodyTooLarge = Code(.bodyTooLarge)

    public var description: String {
      switch base {
      case .unacceptableStatus: "unacceptableStatus"
      case .notHTTP: "notHTTP"
      case .transport: "transport"
      case .timeLimitExceeded: "timeLimitExceeded"
      case .bodyTooLarge: "bodyTooLarge"
      }
    }
  }

  /// The most bytes of a response body that ``bodyExcerpt`` keeps.
  public static let bodyExcerptLimit = 512

  /// What went wrong.
  public let code: Code
  /// A sentence that names the URL and, for a response, its status.
  public let message: String
  /// The URL that was fetched.
  public let url: URL
  /// The HTTP status code of the response; `nil` when there was no HTTP response.
  public let statusCode: Int?
  /// The first ``bodyExcerptLimit`` bytes of the response body (empty when there was none), to
  /// log what the server said.
  public let bodyExcerpt: Data
  /// The error that caused this one: the `URLError` of a failed transfer.
  public let underlying: (any Error)?
  /// How long the server asked the client to wait before asking again: the `Retry-After` header
  /// of a 429 (Too Many Requests) or 503 (Service Unavailable), in delta-seconds or as an
  /// HTTP-date (counted from the response's `Date`); `nil` when there was none or it could not be
  /// read. A policy made by `RetryPolicy.urlSession()` waits at least this long before the next
  /// attempt (see ``URLSessionFetcher/retryAfter(_:)``).
  public let retryAfter: Duration?

  /// Creates an error.
  ///
  /// - Parameters:
  ///   - code: What went wrong.
  ///   - message: A sentence that names the URL and, for a response, its status.
  ///   - url: The URL that was fetched.
  ///   - statusCode: The HTTP status of the response, if there was one.
  ///   - body: The response body; only its first ``bodyExcerptLimit`` bytes are kept.
  ///   - underlying: The error that caused this one, if any.
  ///   - retryAfter: How long the server asked the client to wait, if it did.
  public init(
    code: Code,
    message: String,
    url: URL,
    statusCode: Int? = nil,
    body: Data = Data(),
    underlying: (any Error)? = nil,
    retryAfter: Duration? = nil
  ) {
    self.code = code
    self.message = message
    self.url = url
    self.statusCode = statusCode
    self.bodyExcerpt = Data(body.prefix(Self.bodyExcerptLimit))
    self.underlying = underlying
    self.retryAfter = retryAfter
  }

  public var description: String {
    var text = "URLSessionFetcherError.\(code): \(message)"
    if !bodyExcerpt.isEmpty {
      // Lossy on purpose: a body is for a human reading a log, and may be binary or cut mid-character.
      text += " (body: \(String(decoding: bodyExcerpt, as: UTF8.self).debugDescription))"
    }
    if let retryAfter {
      text += " (retry after: \(retryAfter.readable))"
    }
    if let underlying {
      text += " (underlying: \(underlying))"
    }
    return text
  }
}
