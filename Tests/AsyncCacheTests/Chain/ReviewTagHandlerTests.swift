import AsyncCacheTesting
import Testing

@testable import AsyncCache

/// Whom a layer tells of an invalidation it learnt elsewhere (from an independent review).
@Suite("Tags: whom a layer tells of an invalidation learnt elsewhere", .timeLimit(.minutes(3)))
struct ReviewTagHandlerTests {
  @Test("a chain made without a cache, then put in one, passes the invalidation up")
  func nestedChain() throws {
    let remote = try MemoryLayer<String, Int>()
    let inner = try CacheChain<String, Int>([.init(remote)])
    let cache = try LoadingCache(
      chain: CacheChain([.init(try MemoryLayer<String, Int>()), .init(inner)]), origin: ClosureFetcher { _ in 1 })
    let instant = CacheInstant(nanosecondsSince1970: 1_000)
    remote.layerEnvironment.tell(.tag("t", at: instant))
    #expect(inner.tagInvalidations.instant(for: "t") == instant)
    #expect(cache.chain.tagInvalidations.instant(for: "t") == instant)
  }
}
