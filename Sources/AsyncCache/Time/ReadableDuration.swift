extension Duration {
  /// This duration as a person reads it in a log line or an error message: the largest unit that
  /// keeps the number at 1 or more, with at most three decimals and no trailing zeros (`250ms`,
  /// `1.5s`, `12.5µs`, `3ns`); a minute or more in hours, minutes and seconds (`1m 30s`,
  /// `2h 5s`, `3d 4h`). Negative durations get a minus sign.
  package var readable: String {
    let (seconds, attoseconds) = components
    // Duration's components share a sign; count in nanoseconds of the magnitude.
    let negative = seconds < 0 || attoseconds < 0
    let wholeSeconds = seconds.magnitude
    let nanoseconds = UInt64(attoseconds.magnitude / 1_000_000_000)
    let sign = negative ? "-" : ""
    if wholeSeconds == 0 {
      switch nanoseconds {
      case 0: return "0s"
      case ..<1_000: return sign + "\(nanoseconds)ns"
      case ..<1_000_000: return sign + Self.decimal(nanoseconds, per: 1_000) + "µs"
      default: return sign + Self.decimal(nanoseconds, per: 1_000_000) + "ms"
      }
    }
    if wholeSeconds < 60 {
      return sign + Self.decimal(wholeSeconds * 1_000_000_000 + nanoseconds, per: 1_000_000_000) + "s"
    }
    let parts: [(UInt64, String)] = [
      (wholeSeconds / 86_400, "d"), (wholeSeconds / 3_600 % 24, "h"), (wholeSeconds / 60 % 60, "m"),
    ]
    var words = parts.filter { $0.0 != 0 }.map { "\($0.0)\($0.1)" }
    let secondOfMinute = wholeSeconds % 60
    if secondOfMinute != 0 || nanoseconds != 0 {
      words.append(Self.decimal(secondOfMinute * 1_000_000_000 + nanoseconds, per: 1_000_000_000) + "s")
    }
    return sign + words.joined(separator: " ")
  }

  /// `value / unit` rounded to three decimals, without trailing zeros.
  private static func decimal(_ value: UInt64, per unit: UInt64) -> String {
    let (quotient, remainder) = unit.dividingFullWidth(value.multipliedFullWidth(by: 1_000))
    let rounded = quotient + (remainder * 2 >= unit ? 1 : 0)
    let whole = rounded / 1_000
    var fraction = String(rounded % 1_000)
    guard fraction != "0" else { return String(whole) }
    fraction = String(repeating: "0", count: 3 - fraction.count) + fraction
    while fraction.hasSuffix("0") { fraction.removeLast() }
    return "\(whole).\(fraction)"
  }
}
