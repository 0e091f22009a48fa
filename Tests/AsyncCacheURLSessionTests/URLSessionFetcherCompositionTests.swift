import AsyncCache
import AsyncCacheTesting
import AsyncCacheURLSession
import Foundation
import HTTPTestSupport
import TestSupport
import Testing

@Suite("URLSessionFetcher with operators and LoadingCache", .timeLimit(.minutes(3)))
struct URLSessionFetcherCompositionTests {
  struct User: Codable, Hashable, Sendable {
    var id: Int
    var name: String
  }

  struct UserID: Hashable, Sendable {
    var rawValue: Int
  }

  /// Observes a cache's events.
  final class Events: Sendable {
    private let sequence = Locked<CacheEvents<URL>?>(nil)
    func observe(_ cache: LoadingCache<URL, Data>) { sequence.withLock { $0 = cache.events() } }
    /// Ends the observation; the events it saw.
    func all() async -> [CacheEvent<URL>] { await sequence.withLock({ $0 })?.drained() ?? [] }
  }

  static func json(_ user: User) -> Data { try! JSONEncoder().encode(user) }

  static func cache(
    clock: ManualClock, events: Events, maximumAttempts: Int = 3
  ) throws -> LoadingCache<URL, Data> {
    let cache = try LoadingCache(
      layers: [MemoryLayer<URL, Data>()], origin: URLSessionFetcher(session: makeSession(), configuration: .untimed),
      configuration: .init(
        clock: clock, retryPolicy: .urlSession(maximumAttempts: maximumAttempts, initialDelay: .seconds(1), jitter: 0)))
    events.observe(cache)
    return cache
  }

  // MARK: Operators

  @Test("a domain key becomes a URL (mappingKeys) and the Data a model (mappingValues); the next read is a hit")
  func mappingKeysAndValues() async throws {
    let ada = User(id: 1, name: "Ada")
    let routes: [String: LoopbackHTTPServer.Route] = [
      "/users/1": { _ in .status(200, body: Self.json(ada)) },
      "/users/2": { _ in .status(200, body: Data("<html>not json</html>".utf8)) },
      "/users/3": { _ in .status(404, body: Data("no such user".utf8)) },
    ]
    try await withLoopbackHTTPServer(routes: routes) { server in
      let origin = URLSessionFetcher(session: makeSession(), configuration: .untimed)
        .mappingKeys { (id: UserID) in server.url("/users/\(id.rawValue)") }
        .mappingValues { data in try JSONDecoder().decode(User.self, from: data) }
      let cache = try LoadingCache(layers: [MemoryLayer<UserID, User>()], origin: origin)

      let first = try await cache.value(for: UserID(rawValue: 1))
      let second = try await cache.value(for: UserID(rawValue: 1))
      #expect(first == ada && second == ada)
      #expect(server.requestCount(for: "/users/1") == 1, "the second read came from memory")

      let undecodable = await #expect(throws: AsyncCacheError.self) { try await cache.value(for: UserID(rawValue: 2)) }
      #expect(undecodable?.code == .transformFailed && undecodable?.underlying is DecodingError)

      let missing = await #expect(throws: URLSessionFetcherError.self, "passes through the operators untouched") {
        try await cache.value(for: UserID(rawValue: 3))
      }
      #expect(missing?.statusCode == 404 && missing?.url == server.url("/users/3"))
      #expect(missing?.bodyExcerpt == Data("no such user".utf8))
    }
  }

  @Test("postProcessing sees the URL and the downloaded bytes")
  func postProcessing() async throws {
    try await withLoopbackHTTPServer(routes: ["/greeting": { _ in .status(200, body: Data("hello".utf8)) }]) {
      server in
      let origin = URLSessionFetcher(session: makeSession(), configuration: .untimed)
        .postProcessing { url, data in data + Data(" from \(url.lastPathComponent)".utf8) }
      let data = try await origin.fetch(server.url("/greeting"))
      #expect(String(decoding: data, as: UTF8.self) == "hello from greeting")
    }
  }

  // MARK: Retries

  @Test("a LoadingCache retries a 503 after its delay on the cache's clock, then gets the value: two origin calls")
  func retriesATransientStatus() async throws {
    let body = seededBytes(1_000)
    let route: LoopbackHTTPServer.Route = { request in
      request.number == 1 ? .status(503, body: Data("busy".utf8)) : .status(200, body: body)
    }
    try await withLoopbackHTTPServer(routes: ["/flaky": route]) { server in
      let clock = ManualClock()
      let events = Events()
      let cache = try Self.cache(clock: clock, events: events)
      let url = server.url("/flaky")
      let request = Task { try await cache.value(for: url) }

      await clock.waitForSleepers(1)
      #expect(server.requestCount(for: "/flaky") == 1)
      clock.advance(by: .seconds(1))
      let value = try await request.value
      #expect(value == body)
      #expect(server.requestCount(for: "/flaky") == 2)

      let retries = await events.all().compactMap { event -> (Int, Int?, Duration)? in
        guard case .retrying(_, let attempt, let error, let delay) = event else { return nil }
        return (attempt, (error as? URLSessionFetcherError)?.statusCode, delay)
      }
      #expect(retries.count == 1)
      #expect(retries.first?.0 == 1 && retries.first?.1 == 503 && retries.first?.2 == .seconds(1))
    }
  }

  @Test(
    "a LoadingCache does not retry a 404 or a 410: one origin call, a fatal failure, nothing stored",
    arguments: [404, 410])
  func doesNotRetryAFatalStatus(status: Int) async throws {
    try await withLoopbackHTTPServer(routes: ["/gone": { _ in .status(status, body: Data("gone".utf8)) }]) { server in
      let clock = ManualClock()
      let events = Events()
      let cache = try Self.cache(clock: clock, events: events)
      let url = server.url("/gone")

      let error = await #expect(throws: URLSessionFetcherError.self) { try await cache.value(for: url) }
      #expect(error?.statusCode == status)
      #expect(server.requestCount(for: "/gone") == 1)
      #expect(clock.sleeperCount == 0, "no retry is waiting")
      let all = await events.all()
      guard case .loadFailed(_, let error, let attempts, _) = all.last else {
        Issue.record("no failure event: \(all)")
        return
      }
      let isFatal = RetryPolicy.urlSession().classify(error) == .fatal
      #expect(attempts == 1 && isFatal)

      await #expect(throws: URLSessionFetcherError.self) { try await cache.value(for: url) }
      #expect(server.requestCount(for: "/gone") == 2, "the error was not stored: the next request asks again")
    }
  }

  @Test("a LoadingCache gives up on a 503 after its last attempt, with the last error")
  func exhaustsItsAttempts() async throws {
    try await withLoopbackHTTPServer(routes: ["/down": { _ in .status(503, body: Data("down".utf8)) }]) { server in
      let clock = ManualClock()
      let events = Events()
      let cache = try Self.cache(clock: clock, events: events, maximumAttempts: 3)
      let url = server.url("/down")
      let request = Task { try await cache.value(for: url) }

      for (attempt, delay) in [(1, Duration.seconds(1)), (2, .seconds(2))] {
        await clock.waitForSleepers(1)
        #expect(server.requestCount(for: "/down") == attempt)
        clock.advance(by: delay)
      }
      await #expect(throws: URLSessionFetcherError.self) { try await request.value }
      #expect(server.requestCount(for: "/down") == 3)
      let all = await events.all()
      guard case .loadFailed(_, let error, let attempts, _) = all.last else {
        Issue.record("no failure event: \(all)")
        return
      }
      let isFatal = RetryPolicy.urlSession().classify(error) == .fatal
      #expect(attempts == 3 && !isFatal)
    }
  }

  @Test("a 503's Retry-After makes the retry wait that long on the cache's clock, longer than the policy's delay")
  func honoursRetryAfter() async throws {
    let body = seededBytes(1_000)
    let busy = LoopbackHTTPServer.response(status: 503, fields: ["Retry-After": "5"], body: Data("busy".utf8))
    let route: LoopbackHTTPServer.Route = { request in request.number == 1 ? .raw(busy) : .status(200, body: body) }
    try await withLoopbackHTTPServer(routes: ["/busy": route]) { server in
      let clock = ManualClock()
      let events = Events()
      let cache = try Self.cache(clock: clock, events: events)
      let url = server.url("/busy")
      let request = Task { try await cache.value(for: url) }

      await clock.waitForSleepers(1)
      #expect(clock.nextDeadline == ManualClock.defaultStart.advanced(by: .seconds(5)), "not after the policy's 1 s")
      clock.advance(by: .seconds(5))
      #expect(try await request.value == body)
      #expect(server.requestCount(for: "/busy") == 2)
      let delays = await events.all().compactMap { event -> Duration? in
        guard case .retrying(_, _, _, let delay) = event else { return nil }
        return delay
      }
      #expect(delays == [.seconds(5)])
    }
  }

  @Test("a Retry-After longer than the policy's maximum delay ends the retries at once, with the error")
  func retryAfterPastTheMaximumDelay() async throws {
    let busy = LoopbackHTTPServer.response(status: 429, fields: ["Retry-After": "120"], body: Data("later".utf8))
    try await withLoopbackHTTPServer(routes: ["/busy": { _ in .raw(busy) }]) { server in
      let clock = ManualClock()
      let events = Events()
      let cache = try Self.cache(clock: clock, events: events)
      let url = server.url("/busy")
      let error = await #expect(throws: URLSessionFetcherError.self) { try await cache.value(for: url) }
      #expect(error?.statusCode == 429 && error?.retryAfter == .seconds(120))
      #expect(server.requestCount(for: "/busy") == 1)
      #expect(clock.sleeperCount == 0, "no retry is waiting")
      let all = await events.all()
      guard case .loadFailed(_, let error, let attempts, _) = all.last else {
        Issue.record("no failure event: \(all)")
        return
      }
      let isFatal = RetryPolicy.urlSession().classify(error) == .fatal
      #expect(attempts == 1 && !isFatal)
    }
  }

  // MARK: Cancellation

  @Test("cancelling the only request of a LoadingCache cancels the download: the server sees the client leave")
  func cancellationThroughTheCache() async throws {
    let route: LoopbackHTTPServer.Route = { _ in .partial(declaredLength: 1 << 20, sent: seededBytes(4_096)) }
    try await withLoopbackHTTPServer(routes: ["/big": route]) { server in
      let cache = try LoadingCache(
        layers: [MemoryLayer<URL, Data>()],
        origin: URLSessionFetcher(session: makeSession(timeout: 300), configuration: .untimed),
        configuration: .init(retryPolicy: .urlSession()))
      let url = server.url("/big")
      let request = Task { try await cache.value(for: url) }
      try await server.waitFor(.held(path: "/big"))
      request.cancel()
      await #expect(throws: CancellationError.self) { try await request.value }
      try await server.waitFor(.clientClosed(path: "/big"))
      #expect(server.requestCount(for: "/big") == 1, "a cancelled load is not retried")
    }
  }
}
