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
/// let origin = URLSessionFetcher(session: session, configuration: .init(timeLimit: .seconds(10))) { url in
///   var request = URLRequest(url: url)
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
/// failures with ``classify(_:)``, and wait as long as a 429 or 503 asks (its `Retry-After`).
///
/// ## Limits
///
/// Every fetch is bounded, whatever the server does (see ``Configuration-swift.struct``):
/// - in time, by ``Configuration-swift.struct/timeLimit`` (default 30 s) from the call to the
///   last byte. The session's `timeoutIntervalForRequest` does not do this: it starts again with
///   every byte received, so a server that trickles its body, sends header lines without end or
///   repeats `100 Continue` is never timed out by it, and on Linux `timeoutIntervalForResource`
///   is ignored;
/// - in memory, by ``Configuration-swift.struct/maximumBodySize`` (default 64 MiB): a larger body
///   fails the fetch and is never returned. On Linux it also stops the transfer as it arrives,
///   and of an error response only the first ``URLSessionFetcherError/bodyExcerptLimit`` bytes
///   are read; on Apple platforms that depends on the session handing the body to the fetcher as
///   it arrives, which is not verified (see <doc:UntrustedServers>).
///
/// ## Servers you do not trust
///
/// On Linux, `URLSession` is FoundationNetworking on libcurl, and some responses break it in ways
/// no origin built on it can prevent: a `Content-Length` close to 2^63 ends the process, an extra
/// response on a kept-alive connection answers the next request, and a waiting request keeps a
/// processor busy. <doc:UntrustedServers> tells what the fetcher defends and what it cannot;
/// for servers you do not trust, turn off ``Configuration-swift.struct/reusesConnections``, or
/// put an HTTP client you trust behind a `ClosureFetcher`.
///
/// This product links FoundationNetworking on Linux; import `AsyncCacheURLSession` only where
/// you need it.
public struct URLSessionFetcher: AsyncFetcher {
  /// A fetcher is asked for URLs.
  public typealias Key = URL
  /// A fetcher returns the bytes of the response body.
  public typealias Value = Data

  /// The session that runs the transfers, with its configuration (timeouts, cache, cookies).
  ///
  /// When ``Configuration-swift.struct/reusesConnections`` is off, each transfer runs on a session
  /// of its own made from this one's configuration instead.
  public let session: URLSession
  /// The HTTP status codes whose responses are values; any other status is an error.
  public let acceptableStatusCodes: Set<Int>
  /// The limits on every fetch: time, body size, connection reuse.
  public let configuration: Configuration
  let makeRequest: @Sendable (URL) -> URLRequest

  /// Creates a fetcher.
  ///
  /// - Parameters:
  ///   - session: The session that runs the transfers. Default `URLSession.shared`. Its
  ///     `timeoutIntervalForRequest` bounds how long a server may stay silent, not how long a
  ///     transfer takes: ``Configuration-swift.struct/timeLimit`` does that. On Linux,
  ///     swift-corelibs-foundation arms its timeouts in whole seconds: one under a second fires
  ///     at once, so use 1 s or more.
  ///   - acceptableStatusCodes: The HTTP status codes whose responses are values. Default
  ///     200...299.
  ///   - configuration: The limits on every fetch. Default: 30 s, 64 MiB, connections reused.
  ///   - makeRequest: Makes the request for a URL: headers, timeout, cache policy, method.
  ///     Called once per fetch, on the fetching task, so it must be quick. Default: a plain
  ///     `GET` with the session's settings.
  public init(
    session: URLSession = .shared,
    acceptableStatusCodes: Set<Int> = Set(200...299),
    configuration: Configuration = Configuration(),
    makeRequest: @escaping @Sendable (URL) -> URLRequest = { URLRequest(url: $0) }
  ) {
    self.session = session
    self.acceptableStatusCodes = acceptableStatusCodes
    self.configuration = configuration
    self.makeRequest = makeRequest
  }

  /// Downloads the body of `url` and checks the response's status and size.
  ///
  /// Safe from any context. Suspends for the whole transfer without blocking a thread: the
  /// session runs it on its own threads. The body is held in memory, up to
  /// ``Configuration-swift.struct/maximumBodySize``; of an error response, only its excerpt is
  /// kept.
  ///
  /// - Parameter url: The URL to download.
  /// - Returns: The response body, when the status is one of ``acceptableStatusCodes``.
  /// - Throws: `CancellationError` when the calling task is cancelled before or during the
  ///   transfer (the transfer is cancelled too); otherwise a ``URLSessionFetcherError``:
  ///   ``URLSessionFetcherError/Code/unacceptableStatus``, ``URLSessionFetcherError/Code/notHTTP``,
  ///   ``URLSessionFetcherError/Code/transport`` (with the `URLError`),
  ///   ``URLSessionFetcherError/Code/timeLimitExceeded`` or
  ///   ``URLSessionFetcherError/Code/bodyTooLarge``.
  public func fetch(_ url: URL) async throws -> Data {
    try Task.checkCancellation()
    return try await run(makeRequest(url), url: url, accepting: acceptableStatusCodes).body
  }

  /// Runs the transfer of `request`, within the time limit if there is one; `accepting` are the
  /// statuses that are answers, not errors.
  func run(
    _ request: URLRequest, url: URL, accepting statuses: Set<Int>
  ) async throws -> (body: Data, response: HTTPURLResponse) {
    guard let timeLimit = configuration.timeLimit else {
      return try await transfer(request, url: url, accepting: statuses)
    }
    return try await transfer(request, url: url, accepting: statuses, within: timeLimit)
  }

  /// Runs the transfer of `request` against the time limit on the configuration's clock: the
  /// first to finish wins, and the other is cancelled. Returns or throws only once the transfer
  /// has ended, so a transfer past its time limit is stopped, not left running.
  private func transfer(
    _ request: URLRequest, url: URL, accepting statuses: Set<Int>, within timeLimit: Duration
  ) async throws -> (body: Data, response: HTTPURLResponse) {
    guard timeLimit > .zero else { throw timeLimitExceeded(timeLimit, request: request, url: url) }
    enum Outcome: Sendable {
      case transferred(Result<(body: Data, response: HTTPURLResponse), any Error>)
      case timeLimitReached
      case sleepCancelled
    }
    let clock = configuration.clock
    let deadline = clock.now.advanced(by: timeLimit)
    let first = await withTaskGroup(of: Outcome.self) { group in
      group.addTask {
        do {
          return .transferred(.success(try await transfer(request, url: url, accepting: statuses)))
        } catch {
          return .transferred(.failure(error))
        }
      }
      group.addTask {
        do {
          try await clock.sleep(until: deadline, tolerance: nil)
          return .timeLimitReached
        } catch {
          return .sleepCancelled
        }
      }
      let first = await group.next()!
      // The group awaits the other child before it returns: a cancelled transfer has ended.
      group.cancelAll()
      return first
    }
    switch first {
    case .transferred(let result):
      return try result.get()
    case .timeLimitReached where !Task.isCancelled:
      throw timeLimitExceeded(timeLimit, request: request, url: url)
    case .timeLimitReached, .sleepCancelled:
      // Only the caller's cancellation cancels the sleep before the group has an outcome.
      throw CancellationError()
    }
  }

  /// Runs the transfer of `request`, stopped early by a ``TransferMonitor`` when its body is too
  /// large or its status is an error whose excerpt has arrived, and checks what it got.
  private func transfer(
    _ request: URLRequest, url: URL, accepting statuses: Set<Int>
  ) async throws -> (body: Data, response: HTTPURLResponse) {
    let monitor = TransferMonitor(maximumBodySize: configuration.maximumBodySize, acceptableStatusCodes: statuses)
    let session = configuration.reusesConnections ? session : URLSession(configuration: session.configuration)
    // Invalidating a session of the fetch's own closes its connections once the transfer is over.
    defer { if !configuration.reusesConnections { session.finishTasksAndInvalidate() } }
    let data: Data
    let response: URLResponse
    do {
      (data, response) = try await session.data(for: request, delegate: monitor)
    } catch {
      if !Task.isCancelled, let stop = monitor.stop { throw failure(stop, request: request, url: url) }
      throw Self.transportFailure(error, url: url, method: request.httpMethod)
    }
    guard let http = response as? HTTPURLResponse else {
      throw URLSessionFetcherError(
        code: .notHTTP,
        message: "\(Self.describe(request.httpMethod, url)) answered with a response that is not HTTP",
        url: url, body: data)
    }
    guard statuses.contains(http.statusCode) else {
      throw unacceptableStatus(TransferMonitor.ResponseHead(http), body: data, request: request, url: url)
    }
    // The monitor's cancellation may come too late to stop the session (a compressed body is
    // decoded in large steps): what it returned is checked as well.
    if case .bodyTooLarge(_, let declared, _) = monitor.stop {
      throw bodyTooLarge(http.statusCode, declared: declared, received: data.count, request: request, url: url)
    }
    guard data.count <= Swift.max(configuration.maximumBodySize, 0) else {
      throw bodyTooLarge(http.statusCode, declared: nil, received: data.count, request: request, url: url)
    }
    return (data, http)
  }

  /// The error for a transfer the monitor stopped.
  private func failure(_ stop: TransferMonitor.Stop, request: URLRequest, url: URL) -> URLSessionFetcherError {
    switch stop {
    case .bodyTooLarge(let statusCode, let declared, let received):
      return bodyTooLarge(statusCode, declared: declared, received: received, request: request, url: url)
    case .errorExcerpt(let response, let excerpt):
      return unacceptableStatus(response, body: excerpt, request: request, url: url)
    }
  }

  private func unacceptableStatus(
    _ http: TransferMonitor.ResponseHead, body: Data, request: URLRequest, url: URL
  ) -> URLSessionFetcherError {
    let reason = HTTPURLResponse.localizedString(forStatusCode: http.statusCode)
    // Only these two statuses say "come back later"; a 3xx's Retry-After means something else.
    let retryAfter =
      [429, 503].contains(http.statusCode)
      ? http.retryAfter.flatMap { RetryAfter.delay($0, responseDate: http.date, now: configuration.clock.now) } : nil
    return URLSessionFetcherError(
      code: .unacceptableStatus,
      message: "\(Self.describe(request.httpMethod, url)) answered HTTP \(http.statusCode) (\(reason))",
      url: url, statusCode: http.statusCode, body: body, retryAfter: retryAfter)
  }

  private func bodyTooLarge(
    _ statusCode: Int?, declared: Int64?, received: Int, request: URLRequest, url: URL
  ) -> URLSessionFetcherError {
    let limit = Swift.max(configuration.maximumBodySize, 0)
    let size =
      if let declared { "a body of \(declared) bytes (its Content-Length)" } else {
        "a body of more than \(limit) bytes (\(received) received)"
      }
    return URLSessionFetcherError(
      code: .bodyTooLarge,
      message: "\(Self.describe(request.httpMethod, url)) answered with \(size), over the fetcher's "
        + "maximumBodySize of \(limit) bytes",
      url: url, statusCode: statusCode)
  }

  private func timeLimitExceeded(_ timeLimit: Duration, request: URLRequest, url: URL) -> URLSessionFetcherError {
    URLSessionFetcherError(
      code: .timeLimitExceeded,
      message:
        "\(Self.describe(request.httpMethod, url)) did not finish within the fetcher's timeLimit of \(timeLimit.readable)",
      url: url)
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
