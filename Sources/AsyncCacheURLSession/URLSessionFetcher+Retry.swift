public import AsyncCache
import Foundation

extension URLSessionFetcher {
  /// Sorts the errors of a ``URLSessionFetcher`` into fatal and transient ones, for a
  /// `RetryPolicy`'s `classify`.
  ///
  /// | Error | Kind |
  /// |---|---|
  /// | status 408 (Request Timeout), 429 (Too Many Requests) | transient |
  /// | any other status 400...499 (404, 410, 401, …) | fatal |
  /// | status 501 (Not Implemented), 505 (HTTP Version Not Supported) | fatal |
  /// | any other status 500...599 | transient |
  /// | any other unacceptable status (a 3xx that was not followed, a 2xx left out of the acceptable codes) | fatal |
  /// | a response that is not HTTP | fatal |
  /// | ``URLSessionFetcherError/Code/timeLimitExceeded`` (the fetcher's time limit) | transient |
  /// | ``URLSessionFetcherError/Code/bodyTooLarge`` (over the fetcher's maximum body size) | fatal |
  /// | `URLError` timed out, network connection lost, cannot connect to host, not connected to the internet, cannot find host, DNS lookup failed, cannot load from network, resource unavailable, international roaming off, call is active, data not allowed, background session disconnected, bad server response | transient |
  /// | `URLError` bad URL, unsupported URL, too many redirects, redirect to a missing location, authentication required or cancelled, TLS and certificate failures, App Transport Security, cannot decode or parse the response, data length exceeds maximum, file does not exist, no permission to read a file, zero byte resource | fatal |
  /// | any other `URLError` | transient |
  /// | `CancellationError` | fatal (a retry loop never retries it anyway) |
  /// | `AsyncCacheError` with code `transformFailed` (a `mappingKeys` or `mappingValues` conversion that failed: the same bytes would fail again) | fatal |
  /// | any other error (your own errors) | transient, like `RetryPolicy`'s default |
  ///
  /// `URLError`s count both bare and as the ``URLSessionFetcherError/underlying`` error of a
  /// ``URLSessionFetcherError/Code/transport`` error. To decide otherwise for some errors, wrap
  /// this function:
  ///
  /// ```swift
  /// classify: { error in error is QuotaError ? .transient : URLSessionFetcher.classify(error) }
  /// ```
  ///
  /// Safe from any context; pure and O(1).
  ///
  /// - Parameter error: An error thrown by ``fetch(_:)``, directly or through operators such as
  ///   `mappingKeys(_:)` and `mappingValues(_:)`.
  /// - Returns: Whether asking the origin again may help.
  public static func classify(_ error: any Error) -> RetryPolicy.ErrorKind {
    if error is CancellationError { return .fatal }
    if let error = error as? AsyncCacheError, error.code == .transformFailed { return .fatal }
    if let error = error as? URLSessionFetcherError {
      switch error.code {
      case .unacceptableStatus: return classify(statusCode: error.statusCode ?? 0)
      case .notHTTP, .bodyTooLarge: return .fatal
      case .timeLimitExceeded: return .transient
      case .transport:
        guard let underlying = error.underlying, let urlError = urlError(underlying) else { return .transient }
        return classify(urlError.code)
      default: return .transient
      }
    }
    if let urlError = urlError(error) { return classify(urlError.code) }
    return .transient
  }

  /// The delay a ``URLSessionFetcher`` error asks for before the next attempt: the
  /// ``URLSessionFetcherError/retryAfter`` of a 429 or 503, for a `RetryPolicy`'s `retryAfter`.
  ///
  /// Safe from any context; pure and O(1).
  ///
  /// - Parameter error: An error thrown by ``fetch(_:)``, directly or through operators.
  /// - Returns: The server's `Retry-After`, or `nil` when the error carries none.
  public static func retryAfter(_ error: any Error) -> Duration? {
    (error as? URLSessionFetcherError)?.retryAfter
  }

  static func classify(statusCode: Int) -> RetryPolicy.ErrorKind {
    switch statusCode {
    case 408, 429: .transient
    case 400...499, 501, 505: .fatal
    case 500...599: .transient
    default: .fatal
    }
  }

  static func classify(_ code: URLError.Code) -> RetryPolicy.ErrorKind {
    fatalURLErrorCodes.contains(code) ? .fatal : .transient
  }

  /// The `URLError` codes that asking again cannot fix; the others (timeouts, lost or refused
  /// connections, DNS, no network) may go away.
  static let fatalURLErrorCodes: Set<URLError.Code> = [
    .cancelled,
    .badURL, .unsupportedURL,
    .httpTooManyRedirects, .redirectToNonExistentLocation,
    .userAuthenticationRequired, .userCancelledAuthentication,
    .secureConnectionFailed, .serverCertificateHasBadDate, .serverCertificateUntrusted,
    .serverCertificateHasUnknownRoot, .serverCertificateNotYetValid, .clientCertificateRejected,
    .clientCertificateRequired, .appTransportSecurityRequiresSecureConnection,
    .cannotDecodeRawData, .cannotDecodeContentData, .cannotParseResponse, .dataLengthExceedsMaximum,
    .fileDoesNotExist, .noPermissionsToReadFile, .zeroByteResource,
  ]
}
