import AsyncCache
import AsyncCacheTesting
import Testing

// The "Freshness and statistics" article's configuration and test, run as written, with a
// `FakeLayer` in place of the SQLite layer (this module does not depend on AsyncCacheSQLite).
@Suite(.timeLimit(.minutes(1))) struct FreshnessArticleExampleTests {
  struct Price: Equatable, Sendable { var cents: Int }

  @Test func theArticlesConfigurationServesStaleWhileRevalidatingAndRemembersNotFound() async throws {
    let clock = ManualClock()
    let origin = GatedFetcher<String, Price> { symbol in
      guard symbol == "ACME" else { throw AsyncCacheError(code: .notFound, message: "no \(symbol)") }
      return Price(cents: 100)
    }
    let memory = try MemoryLayer<String, Price>(configuration: .init(clock: clock))
    let database = FakeLayer<String, Price>(clock: clock)
    let prices = try LoadingCache(
      layers: [memory, database],
      origin: origin,
      configuration: .init(
        timeToLive: .seconds(30),
        staleWhileRevalidate: .seconds(30),
        staleIfError: .seconds(600),
        timeToLiveJitter: 0.1,
        negativeCaching: .notFound(timeToLive: .seconds(5)),
        clock: clock))

    let first = Task { try await prices.value(for: "ACME") }
    await origin.waitForFetches(1, for: "ACME")
    #expect(origin.release("ACME") == 1)
    let old = try await first.value
    let expiry = try #require(database.storedEntries["ACME"]?.expiresAt)
    // 27 to 30 s fresh, then 10 min of grace, the same in every layer.
    #expect(expiry >= clock.now.advanced(by: .seconds(627)) && expiry <= clock.now.advanced(by: .seconds(630)))
    #expect(memory.entry(for: "ACME")?.expiresAt == expiry)

    // The article's test.
    let new = Price(cents: 101)
    clock.advance(by: .seconds(31))  // stale
    #expect(try await prices.value(for: "ACME") == old)  // served at once; one refresh starts
    await origin.waitForFetches(1, for: "ACME")
    origin.release("ACME", returning: new)
    await prices.waitUntilIdle()
    #expect(try await prices.value(for: "ACME") == new)

    // "Not found" is remembered for 5 s.
    let missing = Task { try await prices.value(for: "NOPE") }
    await origin.waitForFetches(1, for: "NOPE")
    #expect(origin.release("NOPE") == 1)
    await #expect(throws: AsyncCacheError.self) { try await missing.value }
    await #expect(throws: AsyncCacheError.self) { try await prices.value(for: "NOPE") }
    #expect(origin.callCount(for: "NOPE") == 1)

    let statistics = prices.statistics
    #expect(statistics.loads == 3)
    #expect(statistics.refreshes == 1)
    #expect(statistics.staleServed == 1)
    #expect(statistics.loadFailures == 1)
    #expect(statistics.negativeHits == 1)
  }
}
