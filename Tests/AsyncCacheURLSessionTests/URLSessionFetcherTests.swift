import AsyncCacheURLSession
import Foundation
import HTTPTestSupport
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

@Suite("URLSessionFetcher", .timeLimit(.minutes(3)))
struct URLSessionFetcherTests {
  @Test("a 200's body arrives byte for byte, empty, small or of several megabytes", arguments: [0, 11, 4_194_311])
  func body(size: Int) async throws {
    let body = seededBytes(size)
    try await withLoopbackHTTPServer(routes: ["/file": { _ in .status(200, body: body) }]) { server in
      let fetcher = URLSessionFetcher(session: makeSession(), configuration: .untimed)
      let data = try await fetcher.fetch(server.url("/file"))
      #expect(data.count == size)
      #expect(data == body)
      #expect(server.requestCount(for: "/file") == 1)
    }
  }

  @Test(
    "an unacceptable status is a typed error with the status, the URL and the start of the body",
    arguments: [404, 410, 500, 503])
  func unacceptableStatus(status: Int) async throws {
    let body = Data("status \(status): ".utf8) + seededBytes(2_000)
    try await withLoopbackHTTPServer(routes: ["/thing": { _ in .status(status, body: body) }]) { server in
      let url = server.url("/thing")
      let error = await #expect(throws: URLSessionFetcherError.self) {
        try await URLSessionFetcher(session: makeSession(), configuration: .untimed).fetch(url)
      }
      #expect(error?.code == .unacceptableStatus)
      #expect(error?.statusCode == status)
      #expect(error?.url == url)
      #expect(error?.bodyExcerpt == body.prefix(URLSessionFetcherError.bodyExcerptLimit))
      #expect(error?.bodyExcerpt.count == 512)
      #expect(error?.message.contains(url.absoluteString) == true)
      #expect(error?.message.contains("HTTP \(status)") == true)
      #expect(error?.underlying == nil)
      #expect(String(describing: error).contains("status \(status): "), "the description shows the body")
    }
  }

  @Test("the request builder's headers reach the server, and the acceptable statuses are the fetcher's")
  func requestBuilderAndAcceptableStatuses() async throws {
    let routes: [String: LoopbackHTTPServer.Route] = [
      "/echo": { request in .status(200, body: Data("\(request.method) \(request.headers["x-token"] ?? "none")".utf8))
      },
      "/missing": { _ in .status(404, body: Data("not here".utf8)) },
      "/fine": { _ in .status(200, body: Data("fine".utf8)) },
    ]
    try await withLoopbackHTTPServer(routes: routes) { server in
      let fetcher = URLSessionFetcher(
        session: makeSession(), acceptableStatusCodes: [200, 404], configuration: .untimed
      ) { url in
        var request = URLRequest(url: url)
        request.setValue("secret", forHTTPHeaderField: "X-Token")
        return request
      }
      let echoed = try await fetcher.fetch(server.url("/echo"))
      #expect(echoed == Data("GET secret".utf8))
      let missing = try await fetcher.fetch(server.url("/missing"))
      #expect(missing == Data("not here".utf8), "404 is acceptable here")

      let strict = URLSessionFetcher(session: makeSession(), acceptableStatusCodes: [204], configuration: .untimed)
      let error = await #expect(throws: URLSessionFetcherError.self) { try await strict.fetch(server.url("/fine")) }
      #expect(error?.statusCode == 200)
      #expect(error.map(URLSessionFetcher.classify) == .fatal, "the same answer would come again")
    }
  }

  @Test("a server that never answers times out: a transport error with URLError.timedOut, transient")
  func timeout() async throws {
    try await withLoopbackHTTPServer(routes: ["/slow": { _ in .noAnswer }]) { server in
      // A real timeout takes real time: a second of it. Not less: on Linux a timeout under a
      // second fires at once (swift-corelibs-foundation arms it with whole seconds).
      let fetcher = URLSessionFetcher(session: makeSession(timeout: 1), configuration: .untimed)
      let error = await #expect(throws: URLSessionFetcherError.self) { try await fetcher.fetch(server.url("/slow")) }
      #expect(error?.code == .transport)
      #expect((error?.underlying as? URLError)?.code == .timedOut)
      #expect(error?.message.contains("(URLError -1001)") == true)
      #expect(error?.statusCode == nil)
      #expect(error.map(URLSessionFetcher.classify) == .transient)
      try await server.waitFor(.clientClosed(path: "/slow"))
    }
  }

  @Test("cancelling the task mid-download cancels the transfer and throws CancellationError, not URLError")
  func cancellationMidDownload() async throws {
    let partial = seededBytes(4_096)
    try await withLoopbackHTTPServer(routes: ["/big": { _ in .partial(declaredLength: 1 << 20, sent: partial) }]) {
      server in
      // A timeout longer than the time limit: if cancelling did not reach the transfer, the client
      // would keep the connection open, the wait below would end at the time limit and throw.
      let fetcher = URLSessionFetcher(session: makeSession(timeout: 300), configuration: .untimed)
      let url = server.url("/big")
      let download = Task { try await fetcher.fetch(url) }
      try await server.waitFor(.held(path: "/big"))
      download.cancel()
      // The server sees the client close the connection: the transfer itself was cancelled.
      try await server.waitFor(.clientClosed(path: "/big"))
      let result = await download.result
      #expect(throws: CancellationError.self) { try result.get() }
      #expect(server.requestCount(for: "/big") == 1)
    }
  }

  @Test("a transfer cancelled while its task is not (an invalidated session) is a transport error, not a cancellation")
  func sessionCancelledUnderneath() async throws {
    let partial = seededBytes(1_024)
    try await withLoopbackHTTPServer(routes: ["/big": { _ in .partial(declaredLength: 1 << 20, sent: partial) }]) {
      server in
      let session = makeSession(timeout: 300)
      let fetcher = URLSessionFetcher(session: session, configuration: .untimed)
      let url = server.url("/big")
      let download = Task { try await fetcher.fetch(url) }
      try await server.waitFor(.held(path: "/big"))
      session.invalidateAndCancel()
      let result = await download.result
      let error = #expect(throws: URLSessionFetcherError.self) { try result.get() }
      #expect(error?.code == .transport)
      #expect((error?.underlying as? URLError)?.code == .cancelled)
      #expect(error.map(URLSessionFetcher.classify) == .fatal)
      try await server.waitFor(.clientClosed(path: "/big"))
    }
  }

  @Test("a task cancelled before it fetches throws CancellationError and sends no request")
  func cancelledBeforeFetching() async throws {
    try await withLoopbackHTTPServer(routes: ["/file": { _ in .status(200, body: Data("x".utf8)) }]) { server in
      let fetcher = URLSessionFetcher(session: makeSession(), configuration: .untimed)
      let url = server.url("/file")
      let download = Task {
        withUnsafeCurrentTask { $0?.cancel() }
        return try await fetcher.fetch(url)
      }
      await #expect(throws: CancellationError.self) { try await download.value }
      #expect(server.requestCount(for: "/file") == 0)
    }
  }

  @Test("a refused connection is a transport error naming the URL, transient")
  func refusedConnection() async throws {
    try await withRefusingLoopbackPort { port in
      let url = URL(string: "http://127.0.0.1:\(port)/nobody")!
      let error = await #expect(throws: URLSessionFetcherError.self) {
        try await URLSessionFetcher(session: makeSession(), configuration: .untimed).fetch(url)
      }
      #expect(error?.code == .transport)
      #expect((error?.underlying as? URLError)?.code == .cannotConnectToHost)
      #expect(error?.url == url && error?.message.contains(url.absoluteString) == true)
      #expect(error.map(URLSessionFetcher.classify) == .transient)
    }
  }

  @Test("a connection the server drops without an answer is a transport error, transient")
  func droppedConnection() async throws {
    try await withLoopbackHTTPServer(routes: ["/drop": { _ in .noAnswer }]) { server in
      let fetcher = URLSessionFetcher(session: makeSession(timeout: 300), configuration: .untimed)
      let url = server.url("/drop")
      let download = Task { try await fetcher.fetch(url) }
      try await server.waitFor(.held(path: "/drop"))
      await server.stop()  // closes the held connection
      let error = await #expect(throws: URLSessionFetcherError.self) { try await download.value }
      #expect(error?.code == .transport)
      // "Empty reply from server" on Linux (libcurl), "network connection lost" on Apple platforms.
      let code = (error?.underlying as? URLError)?.code
      #expect(code == .badServerResponse || code == .networkConnectionLost)
      #expect(error.map(URLSessionFetcher.classify) == .transient)
    }
  }

  @Test("an unsupported URL is a transport error, fatal")
  func unsupportedURL() async throws {
    let url = URL(string: "unsupported-scheme://example/thing")!
    let error = await #expect(throws: URLSessionFetcherError.self) {
      try await URLSessionFetcher(session: makeSession(), configuration: .untimed).fetch(url)
    }
    #expect(error?.code == .transport)
    #expect((error?.underlying as? URLError)?.code == .unsupportedURL)
    #expect(error.map(URLSessionFetcher.classify) == .fatal)
  }

  @Test("a response that is not HTTP is a typed error, fatal")
  func notHTTP() async throws {
    let configuration = URLSessionConfiguration.ephemeral
    configuration.protocolClasses = [NotHTTPURLProtocol.self]
    let url = URL(string: "not-http://example/thing")!
    let error = await #expect(throws: URLSessionFetcherError.self) {
      try await URLSessionFetcher(session: URLSession(configuration: configuration), configuration: .untimed).fetch(url)
    }
    #expect(error?.code == .notHTTP)
    #expect(error?.statusCode == nil && error?.url == url)
    #expect(error?.bodyExcerpt == Data("not http".utf8))
    #expect(error.map(URLSessionFetcher.classify) == .fatal)
  }
}

/// Answers `not-http:` URLs with a plain `URLResponse`, as a `file:` or `data:` URL would on Apple
/// platforms (URLSession on Linux does not load `file:` URLs).
final class NotHTTPURLProtocol: URLProtocol {
  override class func canInit(with request: URLRequest) -> Bool { request.url?.scheme == "not-http" }

  override class func canonicalRequest(for request: URLRequest) -> URLRequest { request }

  override func startLoading() {
    let body = Data("not http".utf8)
    let response = URLResponse(
      url: request.url!, mimeType: "text/plain", expectedContentLength: body.count, textEncodingName: nil)
    client?.urlProtocol(self, didReceive: response, cacheStoragePolicy: .notAllowed)
    client?.urlProtocol(self, didLoad: body)
    client?.urlProtocolDidFinishLoading(self)
  }

  override func stopLoading() {}
}
