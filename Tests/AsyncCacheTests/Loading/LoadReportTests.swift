import AsyncCacheTesting
import TestSupport
import Testing

@testable import AsyncCache

@Suite("Per-load reports and histogram buckets, for metrics", .timeLimit(.minutes(3)))
struct LoadReportTests {
  @Test("every load is reported once, with its key, outcome, source, duration and attempts; hits are not")
  func everyLoadOnce() async throws {
    let clock = ManualClock()
    let reports = EventLog<LoadReport<String>>()
    let origin = GatedFetcher<String, Int> { _ in 1 }
    let lower = try MemoryLayer<String, Int>()
    try lower.insert(5, for: "below")
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, Int>(), lower], origin: origin,
      configuration: .init(clock: clock, onLoadEnded: reports.handler))

    let requests = (0..<50).map { _ in Task { try await cache.value(for: "k") } }
    await cache.waitForRequests(50, for: "k")
    await origin.waitForFetches(1, for: "k")
    clock.advance(by: .milliseconds(30))
    #expect(origin.release("k") == 1)
    for request in requests { _ = try await request.value }
    for _ in 0..<10 { _ = try await cache.value(for: "k") }  // hits: no report
    #expect(try await cache.value(for: "below") == 5)

    let described = reports.all.map { "\($0.key) \($0.outcome) \($0.duration.readable) \($0.attempts) \($0.isRefresh)" }
    #expect(described == ["k loaded from origin 30ms 1 false", "below loaded from layer 1 0s 0 false"])
    #expect(reports.all.map(\.source) == [.origin, .layer(1)])
    #expect(reports.all.map(\.outcome.name) == ["loaded", "loaded"])
  }

  @Test("failures, stale values served after an error, and abandoned loads are reported as such")
  func otherOutcomes() async throws {
    let clock = ManualClock()
    let reports = EventLog<LoadReport<String>>()
    let origin = GatedFetcher<String, Int> { _ in 1 }
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, Int>()], origin: origin,
      configuration: .init(
        timeToLive: .seconds(10), staleIfError: .seconds(60), clock: clock, onLoadEnded: reports.handler))

    let failing = Task { try await cache.value(for: "f") }
    await origin.waitForFetches(1, for: "f")
    origin.release("f", throwing: TestError("down"))
    await #expect(throws: TestError.self) { try await failing.value }

    let abandoned = Task { try await cache.value(for: "a") }
    await origin.waitForFetches(1, for: "a")
    abandoned.cancel()
    _ = try? await abandoned.value
    await cache.waitUntilIdle()

    let first = Task { try await cache.value(for: "s") }
    await origin.waitForFetches(1, for: "s")
    origin.release("s")
    _ = try await first.value
    clock.advance(by: .seconds(11))  // expired, within staleIfError
    let stale = Task { try await cache.value(for: "s") }
    await origin.waitForFetches(1, for: "s")
    origin.release("s", throwing: TestError("down again"))
    #expect(try await stale.value == 1)

    #expect(reports.all.map(\.outcome.name) == ["failed", "cancelled", "loaded", "servedStale"])
    #expect(reports.all.map(\.key) == ["f", "a", "s", "s"])
  }

  @Test("a background refresh is reported as one")
  func refreshes() async throws {
    let clock = ManualClock()
    let reports = EventLog<LoadReport<String>>()
    let origin = GatedFetcher<String, Int> { _ in 1 }
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, Int>()], origin: origin,
      configuration: .init(
        timeToLive: .seconds(10), staleWhileRevalidate: .seconds(60), clock: clock, onLoadEnded: reports.handler))
    try await cache.insert(1, for: "k")
    clock.advance(by: .seconds(11))
    #expect(try await cache.value(for: "k") == 1)
    await origin.waitForFetches(1, for: "k")
    origin.release("k", returning: 2)
    await cache.waitUntilIdle()
    #expect(reports.all.map(\.isRefresh) == [true])
  }

  @Test("the histogram's buckets cover what it recorded, shortest first, with their counts")
  func buckets() {
    var histogram = LoadTimeHistogram()
    #expect(histogram.buckets.isEmpty)
    for milliseconds in [1, 1, 2, 50, 50, 50, 1_000] { histogram.record(.milliseconds(milliseconds)) }
    histogram.record(.nanoseconds(3))
    let buckets = histogram.buckets
    #expect(buckets.map(\.count).reduce(0, +) == histogram.count)
    #expect(buckets.first == .init(lowerBound: .nanoseconds(3), upperBound: .nanoseconds(3), count: 1))
    #expect(zip(buckets, buckets.dropFirst()).allSatisfy { $0.upperBound < $1.lowerBound })
    for bucket in buckets {
      #expect(bucket.lowerBound <= bucket.upperBound)
      // Each bucket is at most an eighth of its lower bound wide.
      #expect(bucket.upperBound - bucket.lowerBound <= max(bucket.lowerBound / 8, .zero) + .nanoseconds(1))
    }
    let fifty = buckets.first { $0.lowerBound <= .milliseconds(50) && .milliseconds(50) <= $0.upperBound }
    #expect(fifty?.count == 3)
    #expect(histogram.description.contains("median 2."))
  }
}
