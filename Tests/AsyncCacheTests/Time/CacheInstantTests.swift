import AsyncCache
import Foundation
import Testing

@Suite struct CacheInstantTests {
  @Test func anInstantPrintsAsAnISO8601DateInUTC() {
    #expect(CacheInstant(secondsSince1970: 0).description == "1970-01-01T00:00:00Z")
    #expect(
      CacheInstant(nanosecondsSince1970: 1_795_606_691_320_998_313).description == "2026-11-25T11:38:11.320998313Z")
    #expect(CacheInstant(nanosecondsSince1970: 1_795_606_691_250_000_000).description == "2026-11-25T11:38:11.250Z")
    #expect(CacheInstant(nanosecondsSince1970: 951_782_400_000_001_000).description == "2000-02-29T00:00:00.000001Z")
    #expect(CacheInstant(nanosecondsSince1970: -1).description == "1969-12-31T23:59:59.999999999Z")
    #expect(CacheInstant.distantFuture.description == "distantFuture")
    #expect(CacheInstant.distantPast.description == "distantPast")
    // Agrees with Foundation's formatter on whole seconds, from 1900 to 2200.
    let formatter = ISO8601DateFormatter()
    formatter.timeZone = TimeZone(identifier: "UTC")
    var random = SystemRandomNumberGenerator()
    for _ in 0..<2_000 {
      let seconds = Int64.random(in: -2_208_988_800...7_258_118_400, using: &random)
      let expected = formatter.string(from: Date(timeIntervalSince1970: TimeInterval(seconds)))
      #expect(CacheInstant(secondsSince1970: seconds).description == expected)
    }
  }

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
