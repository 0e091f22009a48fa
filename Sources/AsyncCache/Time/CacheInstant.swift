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

  public var description: String {
    let seconds = nanosecondsSince1970 / 1_000_000_000
    let fraction = abs(nanosecondsSince1970 % 1_000_000_000)
    let padded = String(fraction)
    return "CacheInstant(\(seconds).\(String(repeating: "0", count: 9 - padded.count))\(padded)s since 1970)"
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
