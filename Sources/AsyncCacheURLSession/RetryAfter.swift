import AsyncCache

/// Reads an HTTP `Retry-After` value (RFC 9110, section 10.2.3): delta-seconds, or an HTTP-date
/// in any of the three formats a recipient must accept.
///
/// Pure and O(length of the value); no `DateFormatter`, so no locale or time zone can change it.
enum RetryAfter {
  /// The longest delay read, in seconds; a longer one is cut to it (a year: past any retry
  /// policy's cap).
  static let longestSeconds: Int64 = 366 * 24 * 60 * 60
  /// The longest delay read.
  static let longest = Duration.seconds(longestSeconds)

  /// The delay `value` asks for; `nil` when it is neither delta-seconds nor an HTTP-date.
  ///
  /// - Parameters:
  ///   - value: The header's value.
  ///   - responseDate: The response's `Date` header, if any: an HTTP-date counts from it, so the
  ///     delay does not depend on how far the server's clock is from ours.
  ///   - now: The time to count from when the response has no readable `Date`.
  /// - Returns: The delay, zero for a date in the past.
  static func delay(_ value: String, responseDate: String?, now: CacheInstant) -> Duration? {
    let value = value.trimmingSpaces
    if !value.isEmpty, value.utf8.allSatisfy({ $0 >= UInt8(ascii: "0") && $0 <= UInt8(ascii: "9") }) {
      // Digits only: delta-seconds, however many of them.
      guard let seconds = Int64(value), seconds <= longestSeconds else { return longest }
      return .seconds(seconds)
    }
    let nowSeconds = now.nanosecondsSince1970 / 1_000_000_000
    guard let date = secondsSince1970(httpDate: value, now: nowSeconds) else { return nil }
    let reference = responseDate.flatMap { secondsSince1970(httpDate: $0, now: nowSeconds) } ?? nowSeconds
    return Swift.min(.seconds(Swift.max(date - reference, 0)), longest)
  }

  /// The seconds since 1970 of an HTTP-date: IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`), the
  /// obsolete RFC 850 form (`Sunday, 06-Nov-94 08:49:37 GMT`) or C's asctime form
  /// (`Sun Nov  6 08:49:37 1994`); `nil` for anything else.
  ///
  /// - Parameter now: Seconds since 1970 now, to place an RFC 850 two-digit year: one more than
  ///   50 years ahead is taken from the century before.
  static func secondsSince1970(httpDate value: String, now: Int64) -> Int64? {
    let fields: [Substring]
    let day: Substring
    let month: Substring
    let year: Substring
    let time: Substring
    if let comma = value.firstIndex(of: ",") {
      fields = value[value.index(after: comma)...].split(separator: " ")
      guard let last = fields.last, last == "GMT" else { return nil }
      switch fields.count {
      case 5:  // IMF-fixdate: 06 Nov 1994 08:49:37 GMT
        (day, month, year, time) = (fields[0], fields[1], fields[2], fields[3])
        guard year.count == 4 else { return nil }
      case 3:  // RFC 850: 06-Nov-94 08:49:37 GMT
        let parts = fields[0].split(separator: "-", omittingEmptySubsequences: false)
        guard parts.count == 3, parts[2].count == 2 else { return nil }
        (day, month, year, time) = (parts[0], parts[1], parts[2], fields[1])
      default:
        return nil
      }
    } else {
      // asctime: Sun Nov  6 08:49:37 1994 (a one-digit day is padded with a space)
      fields = value.split(separator: " ")
      guard fields.count == 5, fields[4].count == 4 else { return nil }
      (month, day, time, year) = (fields[1], fields[2], fields[3], fields[4])
    }
    guard day.count <= 2, let day = Int64(day), (1...31).contains(day),
      let month = months.firstIndex(of: String(month)).map({ Int64($0) + 1 }),
      var year = Int64(year), year >= 0
    else { return nil }
    if year < 100 {
      let currentYear = civilYear(daysSince1970: now.floorDivided(by: 86_400))
      year += currentYear - currentYear % 100
      if year > currentYear + 50 { year -= 100 }
    }
    let clock = time.split(separator: ":", omittingEmptySubsequences: false)
    guard clock.count == 3, clock.allSatisfy({ $0.count == 2 }),
      let hour = Int64(clock[0]), let minute = Int64(clock[1]), let second = Int64(clock[2]),
      (0...23).contains(hour), (0...59).contains(minute), (0...60).contains(second)
    else { return nil }
    let days = daysSince1970(year: year, month: month, day: day)
    return days * 86_400 + hour * 3_600 + minute * 60 + second
  }

  private static let months = ["Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"]

  /// Days from 1970-01-01 to a date of the proleptic Gregorian calendar (Howard Hinnant's
  /// `days_from_civil`).
  static func daysSince1970(year: Int64, month: Int64, day: Int64) -> Int64 {
    let year = month <= 2 ? year - 1 : year
    let era = year.floorDivided(by: 400)
    let yearOfEra = year - era * 400
    let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
    let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
    return era * 146_097 + dayOfEra - 719_468
  }

  /// The year of the day `days` after 1970-01-01 (the year part of Hinnant's `civil_from_days`).
  static func civilYear(daysSince1970 days: Int64) -> Int64 {
    let shifted = days + 719_468
    let era = shifted.floorDivided(by: 146_097)
    let dayOfEra = shifted - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let monthIndex = (5 * dayOfYear + 2) / 153
    return yearOfEra + era * 400 + (monthIndex >= 10 ? 1 : 0)
  }
}

extension Int64 {
  /// The quotient rounded towards minus infinity.
  fileprivate func floorDivided(by divisor: Int64) -> Int64 {
    let quotient = self / divisor
    return (self % divisor != 0 && (self < 0) != (divisor < 0)) ? quotient - 1 : quotient
  }
}

extension StringProtocol {
  /// The text without leading and trailing spaces and tabs (HTTP's optional
  /// whitespace): for field values here and in `HTTPCaching`.
  var trimmingSpaces: String {
    let isSpace: (Character) -> Bool = { $0 == " " || $0 == "\t" }
    guard let first = firstIndex(where: { !isSpace($0) }), let last = lastIndex(where: { !isSpace($0) }) else {
      return ""
    }
    return String(self[first...last])
  }
}
