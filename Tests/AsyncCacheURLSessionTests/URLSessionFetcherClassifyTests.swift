import AsyncCache
import AsyncCacheURLSession
import Foundation
import HTTPTestSupport
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

@Suite("URLSessionFetcher.classify", .timeLimit(.minutes(3)))
struct URLSessionFetcherClassifyTests {
  static let url = URL(string: "https://example.com/thing")!

  static func status(_ code: Int) -> URLSessionFetcherError {
    URLSessionFetcherError(code: .unacceptableStatus, message: "HTTP \(code)", url: url, statusCode: code)
  }

  static func transport(_ code: URLError.Code) -> URLSessionFetcherError {
    URLSessionFetcherError(code: .transport, message: "failed", url: url, underlying: URLError(code))
  }

  @Test(
    "statuses: 408, 429 and 5xx but 501 and 505 are transient; other 4xx and anything else unacceptable are fatal",
    arguments: [
      (404, RetryPolicy.ErrorKind.fatal), (410, .fatal), (400, .fatal), (401, .fatal), (403, .fatal),
      (422, .fatal), (499, .fatal), (408, .transient), (429, .transient), (500, .transient),
      (502, .transient), (503, .transient), (504, .transient), (599, .transient), (200, .fatal),
      (204, .fatal), (304, .fatal), (100, .fatal), (501, .fatal), (505, .fatal),
    ])
  func statuses(status: Int, kind: RetryPolicy.ErrorKind) {
    #expect(URLSessionFetcher.classify(Self.status(status)) == kind)
  }

  @Test(
    "transport failures: lost, refused or slow connections and DNS are transient; bad URLs and TLS are fatal",
    arguments: [
      (URLError.Code.timedOut, RetryPolicy.ErrorKind.transient), (.networkConnectionLost, .transient),
      (.cannotConnectToHost, .transient), (.notConnectedToInternet, .transient), (.cannotFindHost, .transient),
      (.dnsLookupFailed, .transient), (.resourceUnavailable, .transient), (.badServerResponse, .transient),
      (.unknown, .transient), (.badURL, .fatal), (.unsupportedURL, .fatal), (.httpTooManyRedirects, .fatal),
      (.serverCertificateUntrusted, .fatal), (.secureConnectionFailed, .fatal), (.userAuthenticationRequired, .fatal),
      (.cannotParseResponse, .fatal), (.dataLengthExceedsMaximum, .fatal),
    ])
  func transportFailures(code: URLError.Code, kind: RetryPolicy.ErrorKind) {
    #expect(URLSessionFetcher.classify(Self.transport(code)) == kind, "wrapped")
    #expect(URLSessionFetcher.classify(URLError(code)) == kind, "bare")
    #expect(
      URLSessionFetcher.classify(NSError(domain: NSURLErrorDomain, code: code.rawValue)) == kind,
      "as an NSError, which does not cast to URLError on Linux")
  }

  @Test("a response that is not HTTP is fatal; cancellation is never retried; other errors are transient")
  func otherErrors() {
    struct Unrelated: Error {}
    let notHTTP = URLSessionFetcherError(code: .notHTTP, message: "not HTTP", url: Self.url)
    #expect(URLSessionFetcher.classify(notHTTP) == .fatal)
    #expect(URLSessionFetcher.classify(CancellationError()) == .fatal)
    #expect(URLSessionFetcher.classify(Unrelated()) == .transient, "like RetryPolicy's default")
    #expect(URLSessionFetcher.classify(NSError(domain: NSPOSIXErrorDomain, code: 1)) == .transient)
    let transform = AsyncCacheError(code: .transformFailed, message: "decoding failed", underlying: Unrelated())
    #expect(URLSessionFetcher.classify(transform) == .fatal, "the same bytes would fail again")
  }

  @Test("past the time limit is transient (the next attempt may be quicker); a body over the limit is fatal")
  func limits() {
    let late = URLSessionFetcherError(code: .timeLimitExceeded, message: "too slow", url: Self.url)
    let large = URLSessionFetcherError(code: .bodyTooLarge, message: "too large", url: Self.url, statusCode: 200)
    #expect(URLSessionFetcher.classify(late) == .transient)
    #expect(URLSessionFetcher.classify(large) == .fatal)
  }

  @Test("RetryPolicy.urlSession takes the schedule it is given and classifies with URLSessionFetcher.classify")
  func retryPolicy() {
    let policy = RetryPolicy.urlSession(
      maximumAttempts: 5, initialDelay: .seconds(1), multiplier: 3, maximumDelay: .seconds(20), jitter: 0)
    #expect(policy.maximumAttempts == 5 && policy.multiplier == 3 && policy.jitter == 0)
    #expect(policy.baseDelay(beforeRetry: 1) == .seconds(1))
    #expect(policy.baseDelay(beforeRetry: 3) == .seconds(9))
    #expect(policy.baseDelay(beforeRetry: 4) == .seconds(20))
    #expect(policy.classify(Self.status(404)) == .fatal)
    #expect(policy.classify(Self.status(503)) == .transient)
    #expect(policy.classify(URLError(.timedOut)) == .transient)
    let busy = URLSessionFetcherError(
      code: .unacceptableStatus, message: "HTTP 503", url: Self.url, statusCode: 503, retryAfter: .seconds(5))
    #expect(policy.retryAfter(busy) == .seconds(5))
    #expect(policy.retryAfter(Self.status(503)) == nil && policy.retryAfter(URLError(.timedOut)) == nil)

    let defaults = RetryPolicy.urlSession()
    let plain = RetryPolicy()
    #expect(defaults.maximumAttempts == plain.maximumAttempts && defaults.initialDelay == plain.initialDelay)
    #expect(defaults.maximumDelay == plain.maximumDelay && defaults.jitter == plain.jitter)
  }

  @Test("the error's description names the code, the message, a body excerpt and the underlying error")
  func description() {
    let error = URLSessionFetcherError(
      code: .unacceptableStatus, message: "GET \(Self.url) answered HTTP 503", url: Self.url, statusCode: 503,
      body: Data(repeating: UInt8(ascii: "a"), count: 10_000))
    #expect(error.bodyExcerpt.count == URLSessionFetcherError.bodyExcerptLimit)
    #expect(error.description.hasPrefix("URLSessionFetcherError.unacceptableStatus: GET \(Self.url) answered HTTP 503"))
    #expect(error.description.contains(String(repeating: "a", count: 512)))
    #expect(!error.description.contains(String(repeating: "a", count: 513)))
    let transport = Self.transport(.timedOut)
    #expect(transport.description.contains("underlying:") && transport.bodyExcerpt.isEmpty)
    #expect(!error.description.contains("retry after"))
    let busy = URLSessionFetcherError(
      code: .unacceptableStatus, message: "HTTP 429", url: Self.url, statusCode: 429, retryAfter: .seconds(30))
    #expect(busy.description.contains("(retry after: 30s)"))
    #expect(
      [URLSessionFetcherError.Code.unacceptableStatus, .notHTTP, .transport, .timeLimitExceeded, .bodyTooLarge].map(
        \.description) == ["unacceptableStatus", "notHTTP", "transport", "timeLimitExceeded", "bodyTooLarge"])
  }
}
