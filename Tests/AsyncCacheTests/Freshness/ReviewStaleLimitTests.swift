import AsyncCacheTesting
import Testing

@testable import AsyncCache

/// Review probes for 4da1b0f: per-entry limits of stale serving.
@Suite("Freshness: stale limits, from a review", .timeLimit(.minutes(3)))
struct ReviewStaleLimitTests {
  let clock = ManualClock()

  /// R1. A soft timeout answers with the stale entry its load found, checked only against the
  /// entry's expiry (the grace), not against its stale-if-error limit: an entry whose limit ran out
  /// while the request waited is served.
  /// R2. "Never widen": a stale-if-error limit longer than the cache's should act as no limit. With
  /// staleWhileRevalidate longer than staleIfError, `nil` keeps the entry servable after an error
  /// for the whole grace while a long limit ends it at the cache's staleIfError.
  @Test("a stale-if-error limit longer than the cache's acts as none")
  func longLimitIsNoLimit() {
    let rules = FreshnessRules(staleWhileRevalidate: .seconds(600), staleIfError: .seconds(60), refreshAhead: nil)
    let base: Int64 = 1_000_000_000_000
    let expiry = base + rules.grace
    func state(_ limits: FreshnessRules.StaleLimits) -> FreshnessRules.State {
      rules.state(expiry: expiry, now: base + 100 * 1_000_000_000, lead: { _ in nil }, limits: limits)
    }
    let unbounded = state(.init(EntryMetadata(staleWhileRevalidateLimit: .seconds(10))))
    let long = state(.init(EntryMetadata(staleWhileRevalidateLimit: .seconds(10), staleIfErrorLimit: .seconds(86_400))))
    #expect(unbounded == long, "nil gives \(unbounded), a day gives \(long)")
  }
}
