import AsyncCache
import AsyncCacheTesting
import Foundation
import HTTPTestSupport
import Synchronization
import Testing

@testable import AsyncCacheURLSession

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// A resource on the loopback server with an entity tag and a last-modified date, answering
/// conditional requests with 304, and counting the requests and the body bytes it sent.
final class VersionedResource: Sendable {
  struct Seen: Sendable {
    var ifNoneMatch: String?
    var ifModifiedSince: String?
  }

  private let state = Locked<(version: Int, seen: [Seen], bodyBytes: Int)>((1, [], 0))
  let size: Int
  let extraFields: [(String, String)]

  init(size: Int, extraFields: [(String, String)] = []) {
    self.size = size
    self.extraFields = extraFields
  }

  func change() { state.withLock { $0.version += 1 } }
  var seen: [Seen] { state.withLock { $0.seen } }
  var bodyBytes: Int { state.withLock { $0.bodyBytes } }

  static let lastModified = "Tue, 15 Nov 1994 12:45:26 GMT"

  var route: LoopbackHTTPServer.Route {
    { [self] request in
      state.withLock { state in
        let tag = "\"v\(state.version)\""
        state.seen.append(
          Seen(ifNoneMatch: request.headers["if-none-match"], ifModifiedSince: request.headers["if-modified-since"]))
        let fields = [("ETag", tag), ("Last-Modified", Self.lastModified)] + extraFields
        if request.headers["if-none-match"] == tag { return .raw(response(status: 304, fields: fields)) }
        state.bodyBytes += size
        return .raw(response(status: 200, fields: fields, body: seededBytes(size, seed: UInt64(state.version))))
      }
    }
  }
}

/// The bytes of a response with `fields`, in order, and `body` (its `Content-Length` added).
func response(status: Int, fields: [(String, String)], body: Data = Data()) -> Data {
  let reason = status == 304 ? "Not Modified" : "OK"
  var text = "HTTP/1.1 \(status) \(reason)\r\n"
  for (name, value) in fields { text += "\(name): \(value)\r\n" }
  // A 304 has no body, and says nothing of one.
  if status != 304 { text += "Content-Length: \(body.count)\r\n" }
  return Data((text + "\r\n").utf8) + body
}

@Suite("URLSessionFetcher: validators, 304 and response freshness", .timeLimit(.minutes(3)))
struct URLSessionFetcherRevalidationTests {
  @Test("a 200's ETag and Last-Modified become the entry's validators; a conditional request gets a 304")
  func conditionalRequest() async throws {
    let resource = VersionedResource(size: 10)
    try await withLoopbackHTTPServer(routes: ["/r": resource.route]) { server in
      let fetcher = URLSessionFetcher(session: makeSession(), configuration: .untimed)
      let url = server.url("/r")
      guard case .value(let body, let metadata, let lifetime) = try await fetcher.fetchEntry(url, current: nil) else {
        Issue.record("a first fetch is a value")
        return
      }
      #expect(body.count == 10 && lifetime == nil)
      #expect(metadata.entityTag == #""v1""#)
      #expect(metadata.lastModified == CacheInstant(secondsSince1970: 784_903_526))
      let current = CacheEntry(body, expiresAt: nil, metadata: metadata)
      guard case .notModified(let kept, nil) = try await fetcher.fetchEntry(url, current: current) else {
        Issue.record("an unchanged resource is not modified")
        return
      }
      #expect(kept == metadata)
      #expect(resource.seen.last?.ifNoneMatch == #""v1""#)
      #expect(resource.seen.last?.ifModifiedSince == VersionedResource.lastModified)
      #expect(resource.bodyBytes == 10, "the 304 sent no body")
      resource.change()
      guard case .value(_, let newer, _) = try await fetcher.fetchEntry(url, current: current) else {
        Issue.record("a changed resource is a value")
        return
      }
      #expect(newer.entityTag == #""v2""#)
      // `fetch(_:)` asks unconditionally.
      #expect(try await fetcher.fetch(url).count == 10)
      #expect(resource.seen.last?.ifNoneMatch == nil)
    }
  }

  @Test("a 304 to a request that was not conditional is an unacceptable status, as before")
  func unconditional304() async throws {
    try await withLoopbackHTTPServer(routes: ["/r": { _ in .status(304) }]) { server in
      let fetcher = URLSessionFetcher(session: makeSession(), configuration: .untimed)
      let error = await #expect(throws: URLSessionFetcherError.self) {
        try await fetcher.fetchEntry(server.url("/r"), current: CacheEntry(Data()))
      }
      #expect(error?.code == .unacceptableStatus && error?.statusCode == 304)
    }
  }

  @Test("a refresh of an unchanged 1 MB resource moves under 1% of its bytes, and the cache counts a revalidation")
  func cacheRevalidates() async throws {
    let resource = VersionedResource(size: 1 << 20)
    try await withLoopbackHTTPServer(routes: ["/big": resource.route]) { server in
      let clock = ManualClock()
      let cache = try LoadingCache(
        layers: [MemoryLayer<URL, Data>(configuration: .init(clock: clock))],
        origin: URLSessionFetcher(session: makeSession(), configuration: .untimed),
        configuration: .init(timeToLive: .seconds(60), staleWhileRevalidate: .seconds(60), clock: clock))
      let url = server.url("/big")
      let first = try await cache.value(for: url)
      #expect(first.count == 1 << 20)
      clock.advance(by: .seconds(61))
      #expect(try await cache.value(for: url) == first)
      await cache.waitUntilIdle()
      #expect(resource.seen.count == 2)
      #expect(resource.bodyBytes == 1 << 20, "the refresh brought no body")
      #expect(cache.statistics.revalidations == 1)
      #expect(cache.cachedValue(for: url) == first)
    }
  }

  @Test(
    "a response's freshness sets the entry's lifetime, as a private or a shared cache reads it",
    arguments: [
      (URLSessionFetcher.ResponseFreshness.privateCache, 100), (.sharedCache, 40), (.ignored, 3_600),
    ])
  func responseFreshness(freshness: URLSessionFetcher.ResponseFreshness, lifetime: Int) async throws {
    let resource = VersionedResource(
      size: 3, extraFields: [("Cache-Control", "public, max-age=120, s-maxage=\"60\""), ("Age", "20")])
    try await withLoopbackHTTPServer(routes: ["/r": resource.route]) { server in
      let clock = ManualClock()
      let (cache, memory) = try Self.cache(on: clock, freshness: freshness)
      _ = try await cache.value(for: server.url("/r"))
      #expect(memory.entry(for: server.url("/r"))?.expiresAt == clock.now.advanced(by: .seconds(lifetime)))
    }
  }

  @Test("a no-store response answers its request and is stored nowhere; the next request asks again")
  func noStore() async throws {
    let resource = VersionedResource(size: 5, extraFields: [("Cache-Control", "no-store")])
    try await withLoopbackHTTPServer(routes: ["/r": resource.route]) { server in
      let clock = ManualClock()
      let (cache, memory) = try Self.cache(on: clock)
      let url = server.url("/r")
      #expect(try await cache.value(for: url).count == 5)
      #expect(memory.entry(for: url) == nil)
      #expect(try await cache.value(for: url).count == 5)
      #expect(resource.seen.count == 2)
      #expect(memory.statistics.evictions[.expiredOnArrival] == 0, "not stored, rather than refused")
    }
  }

  @Test("Cache-Control, Age, Date and Expires are read as RFC 9111 says")
  func freshnessArithmetic() {
    let now = CacheInstant(secondsSince1970: 1_000_000)
    func lifetime(
      _ fields: [String: String], _ freshness: URLSessionFetcher.ResponseFreshness = .privateCache
    ) -> Duration? {
      let lowercased = Dictionary(uniqueKeysWithValues: fields.map { ($0.key.lowercased(), $0.value) })
      return HTTPCaching(field: { lowercased[$0.lowercased()] }, freshness: freshness, now: now).lifetime
    }
    let date = HTTPCaching.imfFixdate(now.advanced(by: .seconds(-30)))
    #expect(lifetime(["Cache-Control": "max-age=100"]) == .seconds(100))
    #expect(lifetime(["Cache-Control": "MAX-AGE=100, max-age=50"]) == .seconds(50), "the smaller of two")
    #expect(lifetime(["Cache-Control": "max-age=100", "Date": date]) == .seconds(70), "dated 30 s ago")
    #expect(lifetime(["Cache-Control": "max-age=100", "Date": date, "Age": "45"]) == .seconds(55), "Age is more")
    #expect(lifetime(["Cache-Control": "max-age=10", "Age": "45"]) == .zero, "spent")
    #expect(lifetime(["Cache-Control": "max-age=ten"]) == .zero, "unreadable: no freshness")
    #expect(lifetime(["Cache-Control": "s-maxage=5, max-age=100"]) == .seconds(100), "a private cache")
    #expect(lifetime(["Cache-Control": "s-maxage=5, max-age=100"], .sharedCache) == .seconds(5))
    let expires = HTTPCaching.imfFixdate(now.advanced(by: .seconds(600)))
    #expect(lifetime(["Expires": expires]) == .seconds(600))
    #expect(lifetime(["Expires": expires, "Date": date]) == .seconds(600), "from the Date, less the age")
    #expect(lifetime(["Expires": "0"]) == .zero, "an Expires that is no date has expired")
    #expect(lifetime(["Expires": expires, "Cache-Control": "max-age=5"]) == .seconds(5), "max-age wins")
    #expect(lifetime(["Cache-Control": "no-transform"]) == nil, "no freshness stated")
    #expect(lifetime(["Cache-Control": "max-age=100"], .ignored) == nil)
    #expect(lifetime(["Cache-Control": "max-age=99999999999999999999"]) == .seconds(100 * 366 * 86_400))
    // Not to be kept: a lifetime of zero, whatever else the response says.
    #expect(lifetime(["Cache-Control": "max-age=100, no-store"]) == .zero)
    #expect(lifetime(["Cache-Control": "No-Cache", "Expires": expires]) == .zero)
    #expect(lifetime(["Cache-Control": "private, max-age=100"], .sharedCache) == .zero)
    #expect(lifetime(["Cache-Control": "private, max-age=100"]) == .seconds(100), "a private cache keeps it")
    #expect(lifetime(["Cache-Control": "no-store"], .ignored) == nil)
  }

  @Test("IMF-fixdates are written as HTTP-date readers read them, across centuries and leap days")
  func imfFixdates() throws {
    #expect(HTTPCaching.imfFixdate(CacheInstant(secondsSince1970: 784_111_777)) == "Sun, 06 Nov 1994 08:49:37 GMT")
    #expect(HTTPCaching.imfFixdate(CacheInstant(secondsSince1970: 0)) == "Thu, 01 Jan 1970 00:00:00 GMT")
    #expect(HTTPCaching.imfFixdate(CacheInstant(secondsSince1970: 951_782_400)) == "Tue, 29 Feb 2000 00:00:00 GMT")
    // A fixed walk over two centuries and a half, in uneven steps (seconds, days and years).
    var seconds: Int64 = -2_000_000_000
    while seconds < 8_000_000_000 {
      seconds += 4_999_999 + seconds % 86_413
      let text = HTTPCaching.imfFixdate(CacheInstant(secondsSince1970: seconds))
      #expect(RetryAfter.secondsSince1970(httpDate: text, now: 0) == seconds, "\(text)")
      if RetryAfter.secondsSince1970(httpDate: text, now: 0) != seconds { return }
    }
  }
  @Test("a 304 without freshness headers keeps the entry as it was, never extends it for ever")
  func notModifiedWithoutFreshness() async throws {
    let calls = Locked(0)
    let route: LoopbackHTTPServer.Route = { request in
      calls.withLock { $0 += 1 }
      if request.headers["if-none-match"] == #""v1""# {
        return .raw(response(status: 304, fields: [("ETag", #""v1""#)]))
      }
      return .raw(
        response(status: 200, fields: [("ETag", #""v1""#), ("Cache-Control", "max-age=60")], body: Data("x".utf8)))
    }
    try await withLoopbackHTTPServer(routes: ["/r": route]) { server in
      let clock = ManualClock()
      let (cache, memory) = try Self.cache(on: clock, timeToLive: nil, staleWhileRevalidate: .seconds(60))
      let url = server.url("/r")
      _ = try await cache.value(for: url)
      #expect(memory.entry(for: url)?.expiresAt == clock.now.advanced(by: .seconds(120)))
      clock.advance(by: .seconds(70))
      _ = try await cache.value(for: url)
      await cache.waitUntilIdle()
      #expect(cache.statistics.revalidations == 1)
      #expect(memory.entry(for: url)?.expiresAt == clock.now.advanced(by: .seconds(50)), "kept as it was, not for ever")
    }
  }

  @Test("a 304 naming another entity tag than the one held does not relabel the held body")
  func notModifiedWithAnotherTag() async throws {
    try await withLoopbackHTTPServer(routes: ["/r": { _ in .raw(response(status: 304, fields: [("ETag", #""v2""#)])) }])
    {
      server in
      let fetcher = URLSessionFetcher(session: makeSession(), configuration: .untimed)
      let current = CacheEntry(Data("one".utf8), expiresAt: nil, metadata: EntryMetadata(entityTag: #""v1""#))
      // The fetcher asks again without validators; this server answers 304 to that too, which
      // is no acceptable status.
      await Self.expectUnacceptable304(fetcher, server.url("/r"), current: current)
    }
  }

  @Test("a 304 answering the request builder's own If-None-Match does not keep the held entry")
  func buildersOwnValidator() async throws {
    let route: LoopbackHTTPServer.Route = { request in
      request.headers["if-none-match"] == #""builder""#
        ? .raw(response(status: 304, fields: [("ETag", #""builder""#)]))
        : .raw(response(status: 200, fields: [("ETag", #""new""#)], body: Data("new".utf8)))
    }
    try await withLoopbackHTTPServer(routes: ["/r": route]) { server in
      let fetcher = URLSessionFetcher(session: makeSession(), configuration: .untimed) { url in
        var request = URLRequest(url: url)
        request.setValue(#""builder""#, forHTTPHeaderField: "If-None-Match")
        return request
      }
      let current = CacheEntry(
        Data("old".utf8), expiresAt: nil,
        metadata: EntryMetadata(entityTag: #""old""#, lastModified: CacheInstant(secondsSince1970: 784_903_526)))
      // Not conditional on the entry: the builder's 304 is not an acceptable status.
      await Self.expectUnacceptable304(fetcher, server.url("/r"), current: current)
    }
  }

  @Test("validators are only sent on GET and HEAD")
  func conditionalPost() async throws {
    let route: LoopbackHTTPServer.Route = { request in
      if request.method == "POST", request.headers["if-none-match"] == #""v1""# {
        return .raw(response(status: 412, fields: []))
      }
      return .raw(response(status: 200, fields: [("ETag", #""v1""#)], body: Data("result".utf8)))
    }
    try await withLoopbackHTTPServer(routes: ["/graphql": route]) { server in
      let clock = ManualClock()
      let fetcher = URLSessionFetcher(session: makeSession(), configuration: .untimed) { url in
        var request = URLRequest(url: url)
        request.httpMethod = "POST"
        request.httpBody = Data("{}".utf8)
        return request
      }
      let cache = try LoadingCache(
        layers: [MemoryLayer<URL, Data>(configuration: .init(clock: clock))], origin: fetcher,
        configuration: .init(timeToLive: .seconds(60), staleWhileRevalidate: .seconds(60), clock: clock))
      let url = server.url("/graphql")
      _ = try await cache.value(for: url)
      clock.advance(by: .seconds(70))
      _ = try await cache.value(for: url)
      await cache.waitUntilIdle()
      #expect(cache.statistics.refreshFailures == 0, "the refresh's POST carried If-None-Match and got a 412")
    }
  }

  @Test("Age overflow, far Expires, two ETag fields, IMF-fixdates of negative sub-second instants")
  func edgeArithmetic() {
    let now = CacheInstant(secondsSince1970: 1_000_000)
    func caching(_ fields: [String: String]) -> HTTPCaching {
      let lowercased = Dictionary(uniqueKeysWithValues: fields.map { ($0.key.lowercased(), $0.value) })
      return HTTPCaching(field: { lowercased[$0.lowercased()] }, freshness: .privateCache, now: now)
    }
    #expect(caching(["Cache-Control": "max-age=100", "Age": "99999999999999999999"]).lifetime == .zero)
    #expect(caching(["Expires": "Fri, 31 Dec 9999 23:59:59 GMT"]).lifetime == .seconds(HTTPCaching.century))
    #expect(caching(["ETag": #""a", "b""#]).entityTag == nil, "two ETag fields joined are not one tag")
    #expect(caching(["ETag": #"W/"a""#]).entityTag == #"W/"a""#)
    #expect(HTTPCaching.weaklyEqual(#"W/"a""#, #""a""#) && !HTTPCaching.weaklyEqual(#""a""#, #""b""#))
    #expect(HTTPCaching.imfFixdate(CacheInstant(nanosecondsSince1970: -500_000_000)) == "Wed, 31 Dec 1969 23:59:59 GMT")
  }

  /// A loading cache of one memory layer over a `URLSessionFetcher`, all on `clock`: entries
  /// live `timeToLive` by the cache's rule (bounding what servers ask for), served stale for
  /// `staleWhileRevalidate` past it.
  static func cache(
    on clock: ManualClock, freshness: URLSessionFetcher.ResponseFreshness = .privateCache,
    timeToLive: Duration? = .seconds(3_600), staleWhileRevalidate: Duration = .zero
  ) throws -> (LoadingCache<URL, Data>, MemoryLayer<URL, Data>) {
    let memory = try MemoryLayer<URL, Data>(configuration: .init(clock: clock))
    let cache = try LoadingCache(
      layers: [memory],
      origin: URLSessionFetcher(
        session: makeSession(), configuration: .init(timeLimit: nil, clock: clock, responseFreshness: freshness)),
      configuration: .init(timeToLive: timeToLive, staleWhileRevalidate: staleWhileRevalidate, clock: clock))
    return (cache, memory)
  }

  /// Expects `fetchEntry` of `url` with `current` to fail on a 304 that is not an answer.
  static func expectUnacceptable304(_ fetcher: URLSessionFetcher, _ url: URL, current: CacheEntry<Data>) async {
    let error = await #expect(throws: URLSessionFetcherError.self) {
      try await fetcher.fetchEntry(url, current: current)
    }
    #expect(error?.statusCode == 304 && error?.code == .unacceptableStatus)
  }
}

extension URLSessionFetcherRevalidationTests {
  @Test("must-revalidate, proxy-revalidate, stale-while-revalidate, stale-if-error and no-cache bound stale serving")
  func staleDirectives() {
    let now = CacheInstant(secondsSince1970: 1_000_000)
    func caching(_ control: String, _ freshness: URLSessionFetcher.ResponseFreshness = .privateCache) -> HTTPCaching {
      HTTPCaching(field: { $0 == "Cache-Control" ? control : nil }, freshness: freshness, now: now)
    }
    func limits(_ control: String, _ freshness: URLSessionFetcher.ResponseFreshness = .privateCache) -> [Duration?] {
      let read = caching(control, freshness)
      return [read.staleWhileRevalidateLimit, read.staleIfErrorLimit]
    }
    #expect(limits("max-age=60") == [nil, nil], "nothing said: the cache's rules")
    #expect(limits("max-age=60, stale-while-revalidate=30, stale-if-error=600") == [.seconds(30), .seconds(600)])
    #expect(limits("max-age=60, must-revalidate, stale-while-revalidate=30") == [.zero, .zero], "must-revalidate wins")
    #expect(limits("max-age=60, proxy-revalidate") == [nil, nil], "proxy-revalidate is for shared caches")
    #expect(limits("max-age=60, proxy-revalidate", .sharedCache) == [.zero, .zero])
    #expect(limits("max-age=60, must-revalidate", .ignored) == [nil, nil], "freshness ignored: the cache's rules")
    let noCache = caching("no-cache, max-age=60")
    #expect(
      noCache.lifetime == .zero && noCache.staleWhileRevalidateLimit == .zero && noCache.staleIfErrorLimit == .zero)
    #expect(caching("no-store, must-revalidate").staleWhileRevalidateLimit == nil, "no-store: nothing kept")
  }

  @Test("a no-cache response is kept to be revalidated: the next request asks the server first, and a 304 answers it")
  func noCacheRevalidates() async throws {
    let resource = VersionedResource(size: 1_000, extraFields: [("Cache-Control", "no-cache")])
    try await withLoopbackHTTPServer(routes: ["/r": resource.route]) { server in
      let clock = ManualClock()
      let (cache, memory) = try Self.cache(on: clock, staleWhileRevalidate: .seconds(60))
      let url = server.url("/r")
      #expect(try await cache.value(for: url).count == 1_000)
      #expect(memory.entry(for: url) != nil, "kept, to be revalidated")
      #expect(cache.cachedValue(for: url) == nil, "but never served without asking the server")
      #expect(try await cache.value(for: url).count == 1_000)
      #expect(resource.seen.count == 2)
      #expect(resource.seen.last?.ifNoneMatch == "\"v1\"", "the second request was conditional")
      #expect(resource.bodyBytes == 1_000, "and answered by a 304")
      #expect(cache.statistics.revalidations == 1)
    }
  }

  @Test("without a grace to keep stale entries, a no-cache response is stored nowhere")
  func noCacheWithoutGrace() async throws {
    let resource = VersionedResource(size: 5, extraFields: [("Cache-Control", "no-cache")])
    try await withLoopbackHTTPServer(routes: ["/r": resource.route]) { server in
      let clock = ManualClock()
      let (cache, memory) = try Self.cache(on: clock)
      let url = server.url("/r")
      #expect(try await cache.value(for: url).count == 5)
      #expect(memory.entry(for: url) == nil)
      #expect(memory.statistics.evictions[.expiredOnArrival] == 0)
    }
  }
}
