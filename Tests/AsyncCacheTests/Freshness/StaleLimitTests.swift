import AsyncCacheTesting
import Testing

@testable import AsyncCache

@Suite("Freshness: an entry's limits on stale serving", .timeLimit(.minutes(3)))
struct StaleLimitTests {
  let clock = ManualClock()

  func cache(
    origin: ClosureEntryFetcher<String, Int>, staleWhileRevalidate: Duration = .seconds(60),
    staleIfError: Duration = .seconds(600)
  ) throws -> (LoadingCache<String, Int>, MemoryLayer<String, Int>) {
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let cache = try LoadingCache(
      layers: [memory], origin: origin,
      configuration: .init(
        timeToLive: .seconds(10), staleWhileRevalidate: staleWhileRevalidate, staleIfError: staleIfError, clock: clock))
    return (cache, memory)
  }

  @Test("the rules' state narrows to an entry's limits, and never widens")
  func rules() {
    let rules = FreshnessRules(staleWhileRevalidate: .seconds(60), staleIfError: .seconds(600), refreshAhead: nil)
    let expiry: Int64 = 1_000_000_000_000 + rules.grace
    func state(after seconds: Int64, _ limits: FreshnessRules.StaleLimits = .none) -> FreshnessRules.State {
      rules.state(expiry: expiry, now: 1_000_000_000_000 + seconds * 1_000_000_000, lead: { _ in nil }, limits: limits)
    }
    let mustRevalidate = FreshnessRules.StaleLimits(
      EntryMetadata(staleWhileRevalidateLimit: .zero, staleIfErrorLimit: .zero))
    let short = FreshnessRules.StaleLimits(
      EntryMetadata(staleWhileRevalidateLimit: .seconds(5), staleIfErrorLimit: .seconds(30)))
    let long = FreshnessRules.StaleLimits(EntryMetadata(staleWhileRevalidateLimit: .seconds(6_000)))
    #expect(state(after: -1) == .fresh)
    #expect(state(after: 1) == .stale)
    #expect(state(after: 100) == .staleIfError)
    #expect(state(after: 1, mustRevalidate) == .expired)
    #expect(state(after: 1, short) == .stale)
    #expect(state(after: 10, short) == .staleIfError)
    #expect(state(after: 100, short) == .expired)
    #expect(state(after: 100, long) == .staleIfError, "never wider than the cache's")
  }

  @Test("must-revalidate: past its lifetime the entry is not served at once, nor after an error")
  func mustRevalidate() async throws {
    struct Down: Error {}
    let answers = Locked<[Result<FetchedEntry<Int>, any Error>]>([
      .success(
        .value(1, metadata: EntryMetadata(entityTag: "a", staleWhileRevalidateLimit: .zero, staleIfErrorLimit: .zero))),
      .failure(Down()),
    ])
    let (cache, _) = try cache(origin: ClosureEntryFetcher { _, _ in try answers.withLock { $0.removeFirst() }.get() })
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(by: .seconds(15))
    #expect(cache.cachedValue(for: "k") == nil, "not served stale at once")
    await #expect(throws: Down.self, "nor instead of the error") { try await cache.value(for: "k") }
  }

  @Test("stale-while-revalidate narrowed: served stale within the entry's limit, then loaded first")
  func narrowedStaleWhileRevalidate() async throws {
    let loads = Locked(0)
    let origin = ClosureEntryFetcher<String, Int> { _, _ in
      let load = loads.withLock {
        $0 += 1
        return $0
      }
      return .value(load, metadata: EntryMetadata(staleWhileRevalidateLimit: .seconds(5)))
    }
    let (cache, _) = try cache(origin: origin)
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(by: .seconds(12))
    #expect(cache.cachedValue(for: "k") == 1, "2 s stale: within the entry's 5 s")
    await cache.waitUntilIdle()
    clock.advance(by: .seconds(18))
    #expect(cache.cachedValue(for: "k") == nil, "8 s stale: past it, though the cache allows 60 s")
    #expect(try await cache.value(for: "k") == 3)
  }

  @Test("the limits are stored with the entry and read back")
  func storedForm() throws {
    let metadata = EntryMetadata(entityTag: "e", staleWhileRevalidateLimit: .seconds(30), staleIfErrorLimit: .zero)
    let bytes = try metadata.encoded()
    let decoded = try bytes.withUnsafeBytes { try EntryMetadata(decoding: $0) }
    #expect(decoded == metadata)
    #expect(throws: EntryMetadataError.negativeLimit("stale-if-error limit")) {
      try EntryMetadata(staleIfErrorLimit: .seconds(-1)).validate()
    }
  }

  @Test("a soft timeout serves a stale entry within its stale-if-error limit")
  func softTimeouts() async throws {
    let origin = GatedFetcher<String, Int> { _ in 0 }
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let cache = try LoadingCache(
      layers: [memory], origin: origin,
      configuration: .init(
        timeToLive: .seconds(60), staleIfError: .seconds(600), clock: clock,
        loadTimeouts: LoadTimeouts(soft: .seconds(1), hard: .seconds(30))))
    try await cache.insert(1, for: "k", metadata: EntryMetadata(staleIfErrorLimit: .seconds(5)))
    clock.advance(by: .seconds(61))
    // 1 s stale: at the soft timeout, 2 s stale, within the entry's 5 s.
    let within = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    #expect(try await within.value == 1)
    #expect(cache.statistics.softTimeouts == 1)
    #expect(origin.release("k", returning: 2) == 1)
    await cache.waitUntilIdle()
  }

  @Test("what soft timeouts ask (isServable) follows the entry's limits")
  func servability() throws {
    let (cache, _) = try cache(origin: ClosureEntryFetcher { _, _ in .value(0) })
    // Turned stale 10 s ago; the cache keeps it 600 s past that.
    let expiresAt = clock.now.advanced(by: .seconds(590))
    func entry(_ limit: Duration?) -> CacheEntry<Int> {
      CacheEntry(
        1, expiresAt: expiresAt, metadata: EntryMetadata(staleWhileRevalidateLimit: .zero, staleIfErrorLimit: limit))
    }
    #expect(cache.isServable(entry(nil), at: clock.now))
    #expect(cache.isServable(entry(.seconds(30)), at: clock.now))
    #expect(!cache.isServable(entry(.seconds(5)), at: clock.now), "past its limit")
  }
}
