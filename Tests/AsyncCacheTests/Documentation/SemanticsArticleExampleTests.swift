import AsyncCache
import AsyncCacheTesting
import Testing

// The "Coalescing, cancellation and consistency" article's timeout example, run as written on a
// manual clock, with a gated origin for `pricing`.
@Suite(.timeLimit(.minutes(3))) struct SemanticsArticleExampleTests {
  struct Price: Equatable, Sendable { var cents: Int }

  @Test func theTimeoutExampleServesStaleAtTheSoftTimeoutAndFailsAtTheHardOne() async throws {
    let clock = ManualClock()
    let pricing = GatedFetcher<String, Price> { _ in Price(cents: 100) }

    // From the article (with a manual clock):
    let prices = try LoadingCache(
      layers: [MemoryLayer<String, Price>(configuration: .init(clock: clock))],
      origin: pricing,
      configuration: .init(
        timeToLive: .seconds(60), staleIfError: .seconds(600),
        clock: clock,
        loadTimeouts: LoadTimeouts(soft: .milliseconds(200), hard: .seconds(2))))

    // A cached price, gone stale.
    let first = Task { try await prices.value(for: "AAPL") }
    await pricing.waitForFetches(1, for: "AAPL")
    pricing.release("AAPL")
    #expect(try await first.value == Price(cents: 100))
    clock.advance(by: .seconds(61))

    // From the article: stale after 200 ms if need be.
    let stale = Task { try await prices.value(for: "AAPL") }
    await pricing.waitForFetches(1, for: "AAPL")
    await clock.waitForSleepers(1)
    clock.advance(by: .milliseconds(200))
    #expect(try await stale.value == Price(cents: 100))
    pricing.release("AAPL", returning: Price(cents: 105))  // the load went on, and stores its value
    await prices.waitUntilIdle()
    #expect(try await prices.value(for: "AAPL") == Price(cents: 105))

    // From the article: a request with its own timeout; nothing stale to serve, so it fails.
    let urgent = Task { try await prices.value(for: "MSFT", timeouts: LoadTimeouts(hard: .milliseconds(500))) }
    await pricing.waitForFetches(1, for: "MSFT")
    await clock.waitForSleepers(1)
    clock.advance(by: .milliseconds(500))
    let error = await #expect(throws: AsyncCacheError.self) { try await urgent.value }
    #expect(error?.code == .timedOut)
    #expect(pricing.wasCancelled("MSFT"), "no other request waited: the load was cancelled")

    let statistics = prices.statistics
    #expect(statistics.softTimeouts == 1 && statistics.hardTimeouts == 1)
  }
}
