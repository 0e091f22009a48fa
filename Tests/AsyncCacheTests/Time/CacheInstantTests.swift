import AsyncCache
import Testing

@Suite struct CacheInstantTests {
  @Test func advancingAndMeasuringAreInverse() {
    let start = CacheInstant(secondsSince1970: 1_700_000_000)
    let later = start.advanced(by: .milliseconds(1500))
    #expect(later.nanosecondsSince1970 == 1_700_000_001_500_000_000)
    #expect(start.duration(to: later) == .milliseconds(1500))
    #expect(later.duration(to: start) == .milliseconds(-1500))
  }

  @Test func arithmeticSaturatesInsteadOfTrapping() {
    #expect(CacheInstant.distantFuture.advanced(by: .seconds(1)) == .distantFuture)
    #expect(CacheInstant.distantPast.advanced(by: .seconds(-1)) == .distantPast)
    #expect(CacheInstant(secondsSince1970: 0).advanced(by: .seconds(Int64.max)) == .distantFuture)
    #expect(CacheInstant(secondsSince1970: .max) == .distantFuture)
    #expect(CacheInstant.distantPast.duration(to: .distantFuture) == .nanoseconds(Int64.max))
  }

  @Test func wallClockReadsTheCurrentTime() async throws {
    let clock = WallClock()
    let before = clock.now
    // 2024-01-01 as a sanity floor for the wall clock.
    #expect(before > CacheInstant(secondsSince1970: 1_704_067_200))
    try await clock.sleep(until: before)  // a past deadline returns at once
    #expect(clock.now >= before)
  }

  @Test func entryExpiryIsInclusiveOfTheDeadline() {
    let deadline = CacheInstant(secondsSince1970: 100)
    let entry = CacheEntry(1, expiresAt: deadline)
    #expect(!entry.isExpired(at: CacheInstant(secondsSince1970: 99)))
    #expect(entry.isExpired(at: deadline))
    #expect(!CacheEntry(1).isExpired(at: .distantFuture))
    #expect(
      entry.expiring(noLaterThan: CacheInstant(secondsSince1970: 50)).expiresAt == CacheInstant(secondsSince1970: 50))
    #expect(entry.expiring(noLaterThan: CacheInstant(secondsSince1970: 500)).expiresAt == deadline)
    #expect(CacheEntry(1).expiring(noLaterThan: deadline).expiresAt == deadline)
  }
}
