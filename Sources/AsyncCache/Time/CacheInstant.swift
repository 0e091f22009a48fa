/// A point in wall-clock time, with nanosecond precision, at which cached entries expire.
///
/// Expiry is wall-clock time (nanoseconds since 1970-01-01 00:00 UTC) rather than a monotonic
/// instant, so that an expiry stays meaningful when an entry moves between layers, between
/// processes and across restarts of a persistent layer. Arithmetic saturates instead of
/// trapping: ``distantFuture`` advanced by any duration is still ``distantFuture``.
public struct CacheInstant: InstantProtocol, Hashable, Sendable, CustomStringConvertible {
  /// Nanoseconds since 1970-01-01 00:00:00 UTC.
  public var nanosecondsSince1970: Int64

  /// Creates an instant from nanoseconds since 1970-01-01 00:00:00 UTC.
  @inlinable
  public init(nanosecondsSince1970: Int64) {
    self.nanosecondsSince1970 = nanosecondsSince1970
  }

  /// Creates an instant from seconds since 1970-01-01 00:00:00 UTC.
  @inlinable
  public init(secondsSince1970 seconds: Int64) {
    let (product, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
    self.init(nanosecondsSince1970: overflow ? (seconds < 0 ? .min : .max) : product)
  }

  /// An instant later than any instant a clock reports; an entry that expires then never expires.
  public static let distantFuture = CacheInstant(nanosecondsSince1970: .max)

  /// An instant earlier than any instant a clock reports.
  public static let distantPast = CacheInstant(nanosecondsSince1970: .min)

  /// Returns this instant moved by `duration`, saturating at ``distantPast`` and ``distantFuture``.
  @inlinable
  public func advanced(by duration: Duration) -> CacheInstant {
    let (sum, overflow) = nanosecondsSince1970.addingReportingOverflow(duration.saturatingNanoseconds)
    guard !overflow else { return duration < .zero ? .distantPast : .distantFuture }
    return CacheInstant(nanosecondsSince1970: sum)
  }

  /// Returns the duration from this instant to `other` (negative when `other` is earlier).
  @inlinable
  public func duration(to other: CacheInstant) -> Duration {
    let (difference, overflow) = other.nanosecondsSince1970.subtractingReportingOverflow(nanosecondsSince1970)
    guard !overflow else {
      return other.nanosecondsSince1970 > nanosecondsSince1970 ? .nanoseconds(Int64.max) : .nanoseconds(Int64.min)
    }
    return .nanoseconds(difference)
  }

  @inlinable
  public static func < (lhs: CacheInstant, rhs: CacheInstant) -> Bool {
    lhs.nanosecondsSince1970 < rhs.nanosecondsSince1970
  }

  /// The instant in UTC, ISO 8601 with as many fraction digits as it needs (none, 3, 6 or 9),
  /// such as `2026-11-27T04:53:10.250Z`; `distantFuture` and `distantPast` by name. For logs.
  public var description: String {
    if self == .distantFuture { return "distantFuture" }
    if self == .distantPast { return "distantPast" }
    // Floor division, so that instants before 1970 print the calendar's date too.
    var seconds = nanosecondsSince1970 / 1_000_000_000
    var nanoseconds = nanosecondsSince1970 % 1_000_000_000
    if nanoseconds < 0 {
      seconds -= 1
      nanoseconds += 1_000_000_000
    }
    var days = seconds / 86_400
    var secondOfDay = seconds % 86_400
    if secondOfDay < 0 {
      days -= 1
      secondOfDay += 86_400
    }
    let (year, month, day) = Self.civilDate(daysSince1970: days)
    func padded(_ value: Int64, _ width: Int) -> String {
      let digits = String(value)
      return String(repeating: "0", count: Swift.max(width - digits.count, 0)) + digits
    }
    var text =
      "\(padded(year, 4))-\(padded(month, 2))-\(padded(day, 2))T"
      + "\(padded(secondOfDay / 3_600, 2)):\(padded(secondOfDay / 60 % 60, 2)):\(padded(secondOfDay % 60, 2))"
    if nanoseconds != 0 {
      var fraction = padded(nanoseconds, 9)
      while fraction.count > 3, fraction.hasSuffix("000") { fraction.removeLast(3) }
      text += "." + fraction
    }
    return text + "Z"
  }

  /// The proleptic Gregorian date of a day counted from 1970-01-01 (Howard Hinnant's
  /// `civil_from_days`).
  package static func civilDate(daysSince1970 days: Int64) -> (year: Int64, month: Int64, day: Int64) {
    let shifted = days + 719_468
    let era = (shifted >= 0 ? shifted : shifted - 146_096) / 146_097
    let dayOfEra = shifted - era * 146_097
    let yearOfEra = (dayOfEra - dayOfEra / 1_460 + dayOfEra / 36_524 - dayOfEra / 146_096) / 365
    let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
    let monthIndex = (5 * dayOfYear + 2) / 153
    let day = dayOfYear - (153 * monthIndex + 2) / 5 + 1
    let month = monthIndex < 10 ? monthIndex + 3 : monthIndex - 9
    return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
  }
}

extension Duration {
  /// This duration in whole nanoseconds, saturating at the bounds of `Int64`.
  @inlinable
  var saturatingNanoseconds: Int64 {
    let (seconds, attoseconds) = components
    let (secondsPart, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
    guard !overflow else { return seconds < 0 ? .min : .max }
    let (total, overflow2) = secondsPart.addingReportingOverflow(attoseconds / 1_000_000_000)
    guard !overflow2 else { return secondsPart < 0 ? .min : .max }
    return total
  }
}
