import AsyncCache
import AsyncCacheTesting
import AsyncCacheURLSession
import Foundation
import HTTPTestSupport
import Testing

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// The fetcher against servers that misbehave on purpose (issue 19, items 10 to 12): every fetch
/// ends with a typed error within its limits, and the server sees the client close the
/// connection instead of sending on for ever.
// Serialized: on Linux a waiting transfer keeps a core busy (see the article), and several at once
// would starve the rest of a test run on a small machine, under ThreadSanitizer above all.
@Suite("URLSessionFetcher against hostile servers", .serialized, .timeLimit(.minutes(3)))
struct URLSessionFetcherHostileServerTests {
  /// A way to keep a transfer going forever without ever going quiet for long.
  struct Stall: Sendable, CustomTestStringConvertible {
    var testDescription: String
    var head: Data
    var chunk: Data

    static let all = [
      Stall(
        testDescription: "a body of 100,000 bytes, one every 100 ms",
        head: LoopbackHTTPServer.head(status: 200, contentLength: 100_000), chunk: Data("x".utf8)),
      Stall(
        testDescription: "header lines without end",
        head: Data("HTTP/1.1 200 OK\r\n".utf8), chunk: Data("X-Filler: x\r\n".utf8)),
      Stall(
        testDescription: "100 Continue without end",
        head: Data(), chunk: Data("HTTP/1.1 100 Continue\r\n\r\n".utf8)),
    ]
  }

  static let huge = 200 << 20

  // MARK: Time limit

  @Test("a server that trickles its answer is stopped at the time limit on the fetcher's clock", arguments: Stall.all)
  func trickleIsTimedOut(stall: Stall) async throws {
    let route: LoopbackHTTPServer.Route = { _ in
      .trickle(head: stall.head, chunk: stall.chunk, interval: .milliseconds(100))
    }
    try await withLoopbackHTTPServer(routes: ["/slow": route]) { server in
      let clock = ManualClock()
      // The session's own timeout is long, and would never fire anyway: every byte restarts it.
      let fetcher = URLSessionFetcher(
        session: makeSession(timeout: 300), configuration: .init(timeLimit: .seconds(2), clock: clock))
      let url = server.url("/slow")
      let fetch = Task { try await fetcher.fetch(url) }
      try await server.waitFor(.held(path: "/slow"))
      // The fetch set its deadline before it sent the request: now it has passed.
      clock.advance(by: .seconds(2))

      let error = await #expect(throws: URLSessionFetcherError.self) { try await value(of: fetch) }
      #expect(error?.code == .timeLimitExceeded)
      #expect(error?.url == url)
      #expect(error?.message.contains(url.absoluteString) == true && error?.message.contains("2s") == true)
      #expect(error.map(URLSessionFetcher.classify) == .transient)
      // The transfer was stopped, not left running: the server sees the client close.
      try await server.waitFor(.clientClosed(path: "/slow"))
      #expect(clock.sleeperCount == 0)
    }
  }

  @Test("a fetch that finishes in time leaves no timer behind; without a time limit none is set")
  func timeLimitOnlyWhileFetching() async throws {
    let body = seededBytes(10_000)
    try await withLoopbackHTTPServer(routes: ["/file": { _ in .status(200, body: body) }]) { server in
      let clock = ManualClock()
      let limited = URLSessionFetcher(
        session: makeSession(), configuration: .init(timeLimit: .seconds(5), clock: clock))
      let limitedBody = try await limited.fetch(server.url("/file"))
      #expect(limitedBody == body)
      #expect(clock.sleeperCount == 0, "the time limit's sleep was cancelled")

      let unlimited = URLSessionFetcher(session: makeSession(), configuration: .init(timeLimit: nil, clock: clock))
      let unlimitedBody = try await unlimited.fetch(server.url("/file"))
      #expect(unlimitedBody == body)
      #expect(clock.sleeperCount == 0)
      #expect(URLSessionFetcher().configuration.timeLimit == .seconds(30), "on by default")
    }
  }

  @Test("a time limit of zero fails the fetch at once, without a request")
  func zeroTimeLimit() async throws {
    try await withLoopbackHTTPServer(routes: ["/file": { _ in .status(200, body: Data("x".utf8)) }]) { server in
      let fetcher = URLSessionFetcher(
        session: makeSession(), configuration: .init(timeLimit: .zero, clock: ManualClock()))
      let error = await #expect(throws: URLSessionFetcherError.self) { try await fetcher.fetch(server.url("/file")) }
      #expect(error?.code == .timeLimitExceeded)
      #expect(server.requestCount(for: "/file") == 0)
    }
  }

  @Test("cancelling a fetch within its time limit throws CancellationError and closes the connection")
  func cancellationWithinTheTimeLimit() async throws {
    let route: LoopbackHTTPServer.Route = { _ in
      .trickle(
        head: LoopbackHTTPServer.head(status: 200, contentLength: 100_000), chunk: Data("x".utf8),
        interval: .milliseconds(100))
    }
    try await withLoopbackHTTPServer(routes: ["/slow": route]) { server in
      let clock = ManualClock()
      let fetcher = URLSessionFetcher(
        session: makeSession(timeout: 300), configuration: .init(timeLimit: .seconds(2), clock: clock))
      let url = server.url("/slow")
      let fetch = Task { try await fetcher.fetch(url) }
      try await server.waitFor(.held(path: "/slow"))
      clock.advance(by: .seconds(1))
      fetch.cancel()
      await #expect(throws: CancellationError.self) { try await fetch.value }
      try await server.waitFor(.clientClosed(path: "/slow"))
      #expect(clock.sleeperCount == 0)
    }
  }

  // MARK: Body size

  @Test("a declared body over the default limit stops the transfer at once: bodyTooLarge, fatal, naming URL and limit")
  func declaredBodyTooLarge() async throws {
    // The server sends 64 KiB of the 200 MiB it announces, then waits: only a client that stops
    // by itself ends the transfer.
    let route: LoopbackHTTPServer.Route = { _ in
      .flood(
        head: LoopbackHTTPServer.head(status: 200, contentLength: Self.huge), bodySize: Self.huge,
        pausingAfter: 64 << 10)
    }
    try await withLoopbackHTTPServer(routes: ["/huge": route]) { server in
      let fetcher = URLSessionFetcher(session: makeSession(timeout: 300), configuration: .untimed)
      #expect(fetcher.configuration.maximumBodySize == 64 << 20, "on by default")
      let url = server.url("/huge")
      let error = await #expect(throws: URLSessionFetcherError.self) { try await fetcher.fetch(url) }
      #expect(error?.code == .bodyTooLarge)
      #expect(error?.url == url && error?.statusCode == 200)
      #expect(error?.message.contains(url.absoluteString) == true)
      #expect(error?.message.contains("\(Self.huge) bytes (its Content-Length)") == true)
      #expect(error?.message.contains("maximumBodySize of \(64 << 20) bytes") == true)
      #expect(error.map(URLSessionFetcher.classify) == .fatal)
      try await server.waitFor(.clientClosed(path: "/huge"))
    }
  }

  @Test("a body without a Content-Length is stopped once the bytes received pass the limit")
  func undeclaredBodyTooLarge() async throws {
    // 2 MiB of a body that never ends, then a pause: only a client that counts stops.
    let route: LoopbackHTTPServer.Route = { _ in
      .flood(
        head: LoopbackHTTPServer.head(status: 200, fields: ["Connection": "close"], contentLength: nil),
        bodySize: Self.huge, pausingAfter: 2 << 20)
    }
    try await withLoopbackHTTPServer(routes: ["/huge": route]) { server in
      let fetcher = URLSessionFetcher(
        session: makeSession(timeout: 300), configuration: .init(timeLimit: nil, maximumBodySize: 1 << 20))
      let url = server.url("/huge")
      let error = await #expect(throws: URLSessionFetcherError.self) { try await fetcher.fetch(url) }
      #expect(error?.code == .bodyTooLarge)
      #expect(error?.message.contains("a body of more than \(1 << 20) bytes") == true)
      #expect(error?.message.contains("maximumBodySize of \(1 << 20) bytes") == true)
      try await server.waitFor(.clientClosed(path: "/huge"))
    }
  }

  @Test("a body sent as fast as loopback allows fails with bodyTooLarge too, never a value")
  func floodedBodyTooLarge() async throws {
    // On Linux the session takes the stop request only between its reads, so it may take in much
    // more than the limit first (see the article); what it took in is refused all the same.
    let route: LoopbackHTTPServer.Route = { _ in
      .flood(
        head: LoopbackHTTPServer.head(status: 200, fields: ["Connection": "close"], contentLength: nil),
        bodySize: 16 << 20)
    }
    try await withLoopbackHTTPServer(routes: ["/huge": route]) { server in
      let fetcher = URLSessionFetcher(
        session: makeSession(), configuration: .init(timeLimit: nil, maximumBodySize: 256 << 10))
      let error = await #expect(throws: URLSessionFetcherError.self) { try await fetcher.fetch(server.url("/huge")) }
      #expect(error?.code == .bodyTooLarge)
    }
  }

  @Test(
    "a body of exactly the limit arrives; one byte more is refused, declared or not",
    arguments: [(100_000, true), (100_001, true), (100_000, false), (100_001, false)])
  func limitIsInclusive(size: Int, declared: Bool) async throws {
    let body = seededBytes(size)
    let bytes =
      declared
      ? LoopbackHTTPServer.response(status: 200, body: body)
      : LoopbackHTTPServer.head(status: 200, fields: ["Connection": "close"], contentLength: nil) + body
    try await withLoopbackHTTPServer(routes: ["/file": { _ in .raw(bytes) }]) { server in
      let fetcher = URLSessionFetcher(
        session: makeSession(), configuration: .init(timeLimit: nil, maximumBodySize: 100_000))
      if size <= 100_000 {
        let fetched = try await fetcher.fetch(server.url("/file"))
        #expect(fetched == body)
      } else {
        let error = await #expect(throws: URLSessionFetcherError.self) { try await fetcher.fetch(server.url("/file")) }
        #expect(error?.code == .bodyTooLarge)
      }
    }
  }

  @Test(
    "a compressed body counts in decoded bytes: a small gzip under the limit decodes, one that inflates past it fails")
  func gzipCountsDecodedBytes() async throws {
    let small = gzippedZeros(512 << 10)
    let large = gzippedZeros(2 << 20)
    #expect(large.count < 1 << 20, "the compressed body alone is under the limit")
    let routes: [String: LoopbackHTTPServer.Route] = [
      "/small": { _ in .raw(LoopbackHTTPServer.response(status: 200, fields: ["Content-Encoding": "gzip"], body: small))
      },
      "/large": { _ in .raw(LoopbackHTTPServer.response(status: 200, fields: ["Content-Encoding": "gzip"], body: large))
      },
    ]
    try await withLoopbackHTTPServer(routes: routes) { server in
      let fetcher = URLSessionFetcher(
        session: makeSession(), configuration: .init(timeLimit: nil, maximumBodySize: 1 << 20))
      let decoded = try await fetcher.fetch(server.url("/small"))
      #expect(decoded == Data(count: 512 << 10))
      let error = await #expect(throws: URLSessionFetcherError.self) { try await fetcher.fetch(server.url("/large")) }
      #expect(error?.code == .bodyTooLarge)
    }
  }

  // At the default limit, the bomb would be 200 MiB inflated: the same defence, at a cost a test
  // run under ThreadSanitizer on a small machine can afford.
  @Test("a gzip bomb (210 KB that inflates to 32 MiB, 32 times the limit) is refused")
  func gzipBomb() async throws {
    let bomb = gzippedZeros(32 << 20)
    #expect(bomb.count < 256 << 10)
    let bytes = LoopbackHTTPServer.response(status: 200, fields: ["Content-Encoding": "gzip"], body: bomb)
    try await withLoopbackHTTPServer(routes: ["/bomb": { _ in .raw(bytes) }]) { server in
      let fetcher = URLSessionFetcher(
        session: makeSession(), configuration: .init(timeLimit: nil, maximumBodySize: 1 << 20))
      let url = server.url("/bomb")
      let error = await #expect(throws: URLSessionFetcherError.self) { try await fetcher.fetch(url) }
      #expect(error?.code == .bodyTooLarge && error?.url == url)
      #expect(error.map(URLSessionFetcher.classify) == .fatal)
    }
  }

  @Test(
    "of an error response only the excerpt is read: a 503 with a huge body stops after 512 bytes",
    arguments: [true, false])
  func errorBodyIsCutShort(declared: Bool) async throws {
    let head =
      declared
      ? LoopbackHTTPServer.head(status: 503, contentLength: Self.huge)
      : LoopbackHTTPServer.head(status: 503, fields: ["Connection": "close"], contentLength: nil)
    let route: LoopbackHTTPServer.Route = { _ in .flood(head: head, bodySize: Self.huge, pausingAfter: 64 << 10) }
    try await withLoopbackHTTPServer(routes: ["/busy": route]) { server in
      let fetcher = URLSessionFetcher(session: makeSession(timeout: 300), configuration: .untimed)
      let error = await #expect(throws: URLSessionFetcherError.self) { try await fetcher.fetch(server.url("/busy")) }
      #expect(error?.code == .unacceptableStatus, "the status, not the size, is what went wrong")
      #expect(error?.statusCode == 503)
      #expect(error?.bodyExcerpt == Data(repeating: UInt8(ascii: "z"), count: URLSessionFetcherError.bodyExcerptLimit))
      #expect(error.map(URLSessionFetcher.classify) == .transient)
      try await server.waitFor(.clientClosed(path: "/busy"))
    }
  }

  // MARK: Connection reuse

  /// A first response and, once the client has read it, a second one on the same kept-alive
  /// connection.
  static let twoResponses = LoopbackHTTPServer.Response.keepAlive(
    first: LoopbackHTTPServer.response(status: 200, body: Data("first".utf8)),
    second: LoopbackHTTPServer.response(status: 200, body: Data("smuggled".utf8)))

  @Test("with reusesConnections off, an extra response on a kept-alive connection cannot answer the next URL")
  func noReuseStopsTheDesync() async throws {
    let routes: [String: LoopbackHTTPServer.Route] = [
      "/double": { _ in Self.twoResponses },
      "/next": { _ in .status(200, body: Data("honest".utf8)) },
    ]
    try await withLoopbackHTTPServer(routes: routes) { server in
      let fetcher = URLSessionFetcher(
        session: makeSession(), configuration: .init(timeLimit: nil, reusesConnections: false))
      let first = try await fetcher.fetch(server.url("/double"))
      #expect(first == Data("first".utf8))
      server.release("/double")
      // The fetch's own session was invalidated: its connection is closed.
      try await server.waitFor(.clientClosed(path: "/double"))
      let next = try await fetcher.fetch(server.url("/next"))
      #expect(next == Data("honest".utf8))
      #expect(server.requestCount(for: "/next") == 1)
      #expect(server.connectionCount == 2)
    }
  }

  #if canImport(FoundationNetworking)
    @Test("with connections reused (the default), libcurl takes the extra response for the next URL's answer")
    func reuseDesyncsOnLinux() async throws {
      let routes: [String: LoopbackHTTPServer.Route] = [
        "/double": { _ in Self.twoResponses },
        "/next": { _ in .status(200, body: Data("honest".utf8)) },
      ]
      try await withLoopbackHTTPServer(routes: routes) { server in
        let fetcher = URLSessionFetcher(session: makeSession(), configuration: .untimed)
        let first = try await fetcher.fetch(server.url("/double"))
        #expect(first == Data("first".utf8))
        server.release("/double")
        try await server.waitFor(.secondResponseSent(path: "/double"))
        let next = try await fetcher.fetch(server.url("/next"))
        // A hazard of FoundationNetworking on libcurl 7.88 that the fetcher documents; this
        // records when a toolchain stops it.
        withKnownIssue("libcurl reuses a connection with an unread response on it") {
          #expect(next == Data("honest".utf8))
        }
      }
    }
  #endif

  // MARK: Retry-After

  @Test(
    "a 429 or 503 carries its Retry-After, in seconds or as an HTTP-date; other statuses carry none",
    arguments: [
      (503, ["Retry-After": "7"], Duration?.some(.seconds(7))),
      (429, ["Retry-After": "Thu, 01 Jan 2026 00:01:30 GMT", "Date": "Thu, 01 Jan 2026 00:00:00 GMT"], .seconds(90)),
      (503, ["Retry-After": "soon"], nil),
      (503, [:], nil),
      (500, ["Retry-After": "7"], nil),
    ])
  func retryAfterIsCarried(status: Int, fields: [String: String], expected: Duration?) async throws {
    var head = "HTTP/1.1 \(status) Status\r\nContent-Length: 4\r\n"
    for (name, value) in fields { head += "\(name): \(value)\r\n" }
    let bytes = Data((head + "\r\nbusy").utf8)
    try await withLoopbackHTTPServer(routes: ["/busy": { _ in .raw(bytes) }]) { server in
      let fetcher = URLSessionFetcher(session: makeSession(), configuration: .untimed)
      let error = await #expect(throws: URLSessionFetcherError.self) { try await fetcher.fetch(server.url("/busy")) }
      #expect(error?.statusCode == status)
      #expect(error?.retryAfter == expected)
      #expect(error.flatMap(URLSessionFetcher.retryAfter) == expected)
    }
  }
}
