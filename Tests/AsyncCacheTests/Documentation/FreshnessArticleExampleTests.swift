import AsyncCache
import AsyncCacheTesting
import Testing

// The "Freshness and statistics" article's configuration and test, run as written, with a
// `FakeLayer` in place of the SQLite layer (this module does not depend on AsyncCacheSQLite).
@Suite(.timeLimit(.minutes(3))) struct FreshnessArticleExampleTests {
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
    // Requests: "ACME" missed, was served stale (a hit), then fresh (a hit); "NOPE" missed once,
    // then was a negative hit.
    #expect(statistics.hits == 2)
    #expect(statistics.misses == 2)
    #expect(statistics.hitRatio == 0.5)
    #expect(statistics.loadTime.count == 3)
    #expect(statistics.layers.map(\.name).count == 2)
  }

  /// The article's event loop, fed by a cache whose origin fails and whose memory is trimmed.
  @Test func theArticlesEventLoopSeesFailuresEvictionsAndDrops() async throws {
    let clock = ManualClock()
    let origin = GatedFetcher<String, Price> { _ in throw AsyncCacheError(code: .notFound, message: "closed") }
    let memory = try MemoryLayer<String, Price>(configuration: .init(clock: clock))
    let prices = try LoadingCache(layers: [memory], origin: origin, configuration: .init(clock: clock))
    let lines = Locked<[String]>([])

    let events = prices.events(bufferingNewest: 2)
    try memory.insert(Price(cents: 1), for: "A")
    _ = try await prices.value(for: "A")  // a hit, dropped below
    _ = try await prices.value(for: "A")  // a hit, dropped below
    let failing = Task { try await prices.value(for: "B") }
    await origin.waitForFetches(1, for: "B")
    #expect(origin.release("B") == 1)
    _ = try? await failing.value  // miss, loadStarted, loadFailed: the buffer keeps the last two
    await memory.handleMemoryPressure(.critical)  // evicts "A": the load's start is dropped too
    events.finish()

    let reader = Task {
      for await event in events {
        switch event {
        case .loadFailed(let key, let error, let attempts, let duration):
          lines.withLock { $0.append("loading \(key) failed after \(attempts) attempts, \(duration): \(error)") }
        case .eviction(let key, .memoryPressure, _):
          lines.withLock { $0.append("dropped \(key) under memory pressure") }
        case .dropped(let count):
          lines.withLock { $0.append("the event log fell behind by \(count) events") }
        default:
          break
        }
      }
    }
    await reader.value
    let error = AsyncCacheError(code: .notFound, message: "closed")
    #expect(
      lines.withLock { $0 } == [
        "the event log fell behind by 4 events",
        "loading B failed after 1 attempts, \(Duration.zero): \(error)",
        "dropped A under memory pressure",
      ])
    #expect(events.droppedCount == 4)
  }
}
