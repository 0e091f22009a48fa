import AsyncCache
import Testing

@testable import AsyncCacheURLSession

@Suite("RetryAfter")
struct RetryAfterTests {
  /// 2026-01-01 00:00:00 UTC.
  static let now = CacheInstant(secondsSince1970: 1_767_225_600)

  @Test(
    "delta-seconds: digits only, surrounding whitespace allowed, huge values cut to a year",
    arguments: [
      ("0", Duration?.some(.zero)), ("7", .seconds(7)), (" 120\t", .seconds(120)), ("007", .seconds(7)),
      ("99999999999999999999999", RetryAfter.longest), ("31622401", RetryAfter.longest), ("-5", nil), ("1.5", nil),
      ("", nil), ("  ", nil), ("soon", nil), ("5 s", nil),
    ])
  func deltaSeconds(value: String, expected: Duration?) {
    #expect(RetryAfter.delay(value, responseDate: nil, now: Self.now) == expected)
  }

  @Test(
    "the three HTTP-date formats name the same instant",
    arguments: ["Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994"])
  func httpDateFormats(value: String) {
    #expect(RetryAfter.secondsSince1970(httpDate: value, now: 1_767_225_600) == 784_111_777)
  }

  @Test(
    "malformed HTTP-dates are not read",
    arguments: [
      "Sun, 06 Nov 1994 08:49:37 UTC", "Sun, 06 Foo 1994 08:49:37 GMT", "Sun, 32 Nov 1994 08:49:37 GMT",
      "Sun, 06 Nov 1994 24:00:00 GMT", "Sun, 06 Nov 94 08:49:37 GMT", "Sun, 06 Nov 1994 8:49:37 GMT",
      "Sunday, 06-Nov-1994 08:49:37 GMT", "Sun Nov 6 08:49:37", "Sun, 06 Nov 1994", "",
    ])
  func malformedDates(value: String) {
    #expect(RetryAfter.secondsSince1970(httpDate: value, now: 1_767_225_600) == nil)
    #expect(RetryAfter.delay(value, responseDate: nil, now: Self.now) == nil)
  }

  @Test("an RFC 850 two-digit year more than 50 years ahead is from the century before")
  func twoDigitYears() {
    let now: Int64 = 1_767_225_600  // in 2026
    // 2076: 50 years ahead, not more.
    #expect(RetryAfter.secondsSince1970(httpDate: "Wednesday, 01-Jan-76 00:00:00 GMT", now: now) == 3_345_062_400)
    // 1977, not 2077.
    #expect(RetryAfter.secondsSince1970(httpDate: "Saturday, 01-Jan-77 00:00:00 GMT", now: now) == 220_924_800)
  }

  @Test("an HTTP-date counts from the response's Date when it has one, else from now; the past is zero")
  func dates() {
    let later = "Thu, 01 Jan 2026 00:01:30 GMT"
    #expect(RetryAfter.delay(later, responseDate: nil, now: Self.now) == .seconds(90))
    #expect(RetryAfter.delay(later, responseDate: "Thu, 01 Jan 2026 00:01:00 GMT", now: Self.now) == .seconds(30))
    #expect(RetryAfter.delay(later, responseDate: "not a date", now: Self.now) == .seconds(90))
    #expect(RetryAfter.delay("Wed, 31 Dec 2025 23:59:00 GMT", responseDate: nil, now: Self.now) == .zero)
    #expect(RetryAfter.delay("Fri, 01 Jan 2100 00:00:00 GMT", responseDate: nil, now: Self.now) == RetryAfter.longest)
  }

  @Test("days since 1970 agree with the calendar across leap years and centuries")
  func calendar() {
    #expect(RetryAfter.daysSince1970(year: 1970, month: 1, day: 1) == 0)
    #expect(RetryAfter.daysSince1970(year: 2000, month: 3, day: 1) == 11_017)
    #expect(RetryAfter.daysSince1970(year: 1969, month: 12, day: 31) == -1)
    #expect(RetryAfter.daysSince1970(year: 2026, month: 1, day: 1) == 20_454)
    for days: Int64 in [-1, 0, 365, 11_016, 11_017, 20_453, 20_454, 47_481] {
      let year = RetryAfter.civilYear(daysSince1970: days)
      #expect(RetryAfter.daysSince1970(year: year, month: 1, day: 1) <= days)
      #expect(RetryAfter.daysSince1970(year: year + 1, month: 1, day: 1) > days)
    }
  }
}
