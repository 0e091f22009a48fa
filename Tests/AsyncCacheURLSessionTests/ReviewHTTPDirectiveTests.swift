import AsyncCache
import Testing

@testable import AsyncCacheURLSession

/// Review probes for 4da1b0f: the HTTP directives of stale serving.
@Suite("Review: HTTP stale directives")
struct ReviewHTTPDirectiveTests {
  let now = CacheInstant(secondsSince1970: 1_000_000)

  func caching(_ control: String, _ freshness: URLSessionFetcher.ResponseFreshness) -> HTTPCaching {
    HTTPCaching(field: { $0 == "Cache-Control" ? control : nil }, freshness: freshness, now: now)
  }

  /// R4. RFC 9111, 5.2.2.10: "The s-maxage directive incorporates the semantics of the
  /// proxy-revalidate response directive for a shared cache." Read as a shared cache, an entry
  /// whose lifetime came from s-maxage must not be served stale.
  @Test("s-maxage, read as a shared cache, forbids serving stale (proxy-revalidate semantics)")
  func sharedMaxAgeImpliesProxyRevalidate() {
    let read = caching("s-maxage=60", .sharedCache)
    #expect(read.lifetime == .seconds(60))
    #expect(read.staleWhileRevalidateLimit == .zero)
    #expect(read.staleIfErrorLimit == .zero)
  }
}
