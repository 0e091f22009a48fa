public import AsyncCache
public import Foundation

#if canImport(FoundationNetworking)
  public import FoundationNetworking
#endif

/// An origin that downloads the body of a URL with a `URLSession`.
///
/// A response whose status is not acceptable (by default anything outside 200...299) is an
/// error, not a value: ``URLSessionFetcherError`` with code
/// ``URLSessionFetcherError/Code/unacceptableStatus``, the status, the URL and the start of the
/// body. On Linux, where `URLSession` does not throw for a 404 either, this holds the same.
///
/// ```swift
/// let origin = URLSessionFetcher(session: session) { url in
///   var request = URLRequest(url: url, timeoutInterval: 10)
///   request.setValue("application/json", forHTTPHeaderField: "Accept")
///   return request
/// }
/// let users = try LoadingCache(
///   layers: [MemoryLayer<Int, User>()],
///   origin: origin
///     .mappingKeys { (id: Int) in api.appending(path: "users/\(id)") }
///     .mappingValues { data in try JSONDecoder().decode(User.self, from: data) },
///   configuration: .init(retryPolicy: .urlSession()))
/// ```
///
/// Cancelling the task that awaits ``fetch(_:)`` cancels the transfer, and the fetch throws
/// `CancellationError`, never `URLError.cancelled`. Retry policies tell fatal from transient
/// failures with ``classify(_:)``.
///
/// This product links FoundationNetworking on Linux; import `AsyncCacheURLSession` only where
/// you need it.
public struct URLSessionFetcher: AsyncFetcher {
  /// A fetcher is asked for URLs.
  public typealias Key = URL
  /// A fetcher returns the bytes of the response body.
  public typealias Value = Data

  /// The session that runs the transfers, with its configuration (timeouts, cache, cookies).
  public let session: URLSession
  /// The HTTP status codes whose responses are values; any other status is an error.
  public let acceptableStatusCodes: Set<Int>
  private let makeRequest: @Sendable (URL) -> URLRequest

  /// Creates a fetcher.
  ///
  /// - Parameters:
  ///   - session: The session that runs the transfers. Default `URLSession.shared`; pass one
  ///     whose configuration sets `timeoutIntervalForRequest` to bound slow servers. On Linux,
  ///     swift-corelibs-foundation arms its timeouts in whole seconds: one under a second fires
  ///     at once, so use 1 s or more.
  ///   - acceptableStatusCodes: The HTTP status codes whose responses are values. Default
  ///     200...299.
  ///   - makeRequest: Makes the request for a URL: headers, timeout, cache policy, method.
  ///     Called once per fetch, on the fetching task, so it must be quick. Default: a plain
  ///     `GET` with the session's settings.
  public init(
    session: URLSession = .shared,
    acceptableStatusCodes: Set<Int> = Set(200...299),
    makeRequest: @escaping @Sendable (URL) -> URLRequest = { URLRequest(url: $0) }
  ) {
    self.session = session
    self.acceptableStatusCodes = acceptableStatusCodes
    self.makeRequest = makeRequest
  }

  /// Downloads the body of `url` and checks the response's status.
  ///
  /// Safe from any context. Suspends for the whole transfer without blocking a thread: the
  /// session runs it on its own threads. The whole body is held in memory, error bodies
  /// included.
  ///
  /// - Parameter url: The URL to download.
  /// - Returns: The response body, when the status is one of ``acceptableStatusCodes``.
  /// - Throws: `CancellationError` when the calling task is cancelled before or during the
  ///   transfer (the transfer is cancelled too); otherwise a ``URLSessionFetcherError``:
  ///   ``URLSessionFetcherError/Code/unacceptableStatus``, ``URLSessionFetcherError/Code/notHTTP``
  ///   or ``URLSessionFetcherError/Code/transport`` (with the `URLError`).
  public func fetch(_ url: URL) async throws -> Data {
    try Task.checkCancellation()
    let request = makeRequest(url)
    let data: Data
    let response: URLResponse
    do {
      (data, response) = try await session.data(for: request)
    } catch {
      throw Self.transportFailure(error, url: url, method: request.httpMethod)
    }
    guard let http = response as? HTTPURLResponse else {
      throw URLSessionFetcherError(
        code: .notHTTP,
        message: "\(Self.describe(request.httpMethod, url)) answered with a response that is not HTTP",
        url: url, body: data)
    }
    guard acceptableStatusCodes.contains(http.statusCode) else {
      let reason = HTTPURLResponse.localizedString(forStatusCode: http.statusCode)
      throw URLSessionFetcherError(
        code: .unacceptableStatus,
        message: "\(Self.describe(request.httpMethod, url)) answered HTTP \(http.statusCode) (\(reason))",
        url: url, statusCode: http.statusCode, body: data)
    }
    return data
  }

  /// The error to throw for an error of the session: `CancellationError` when the task was
  /// cancelled (whatever the session threw then: `URLError.cancelled`, usually), a
  /// ``URLSessionFetcherError/Code/transport`` error otherwise.
  static func transportFailure(_ error: any Error, url: URL, method: String?) -> any Error {
    if Task.isCancelled || error is CancellationError { return CancellationError() }
    guard let urlError = urlError(error) else {
      return URLSessionFetcherError(
        code: .transport, message: "\(describe(method, url)) failed: \(error)", url: url, underlying: error)
    }
    // A transfer cancelled while the task was not (an invalidated session, a cancelled
    // authentication challenge) is a failure the waiters must see, not a cancellation.
    // The session's own words ("Empty reply from server") when it gave some.
    let reason = (urlError.userInfo[NSLocalizedDescriptionKey] as? String).map { ": \($0)" } ?? ""
    return URLSessionFetcherError(
      code: .transport, message: "\(describe(method, url)) failed\(reason) (URLError \(urlError.code.rawValue))",
      url: url, underlying: urlError)
  }

  /// `error` as a `URLError`, also when it is an `NSError` of `NSURLErrorDomain`: on Linux such
  /// an error does not cast to `URLError`.
  static func urlError(_ error: any Error) -> URLError? {
    if let urlError = error as? URLError { return urlError }
    let nsError = error as NSError
    // Typed as an optional because the initializer is failable on Linux only.
    let code: URLError.Code? = URLError.Code(rawValue: nsError.code)
    guard nsError.domain == NSURLErrorDomain, let code else { return nil }
    return URLError(code, userInfo: nsError.userInfo)
  }

  static func describe(_ method: String?, _ url: URL) -> String {
    "\(method ?? "GET") \(url.absoluteString)"
  }
}
