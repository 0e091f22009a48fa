extension Duration {
  /// This duration as a person reads it in a log line or an error message: the largest unit that
  /// keeps the number at 1 or more, with at most three decimals and no trailing zeros (`250ms`,
  /// `1.5s`, `12.5µs`, `3ns`); a minute or more in hours, minutes and seconds (`1m 30s`,
  /// `2h 5s`, `3d 4h`). Negative durations get a minus sign.
  package var readable: String {
    let (seconds, attoseconds) = components
    // Duration's components share a sign; count in nanoseconds of the magnitude.
    let negative = seconds < 0 || attoseconds < 0
    let sign = negative ? "-" : ""
    let wholeSeconds = seconds.magnitude
    let nanoseconds = UInt64(attoseconds.magnitude / 1_000_000_000)
    if wholeSeconds == 0 {
      // Each unit shows three decimals, so a value is rounded to the unit below; one that rounds
      // up to 1,000 of its unit is shown in the next one (999.9996 ms is 1s, not 1000ms).
      if nanoseconds == 0 { return "0s" }
      if nanoseconds < 1_000 { return sign + "\(nanoseconds)ns" }
      if nanoseconds < 1_000_000 { return sign + Self.decimal(nanoseconds, per: 1_000) + "µs" }
      let microseconds = Self.rounded(nanoseconds, to: 1_000)
      if microseconds < 1_000_000 { return sign + Self.decimal(microseconds, per: 1_000) + "ms" }
    }
    // Seconds and more: milliseconds, rounded, carried into seconds, minutes, hours and days.
    var totalSeconds = wholeSeconds
    var milliseconds = Self.rounded(nanoseconds, to: 1_000_000)
    if milliseconds == 1_000 { (totalSeconds, milliseconds) = (totalSeconds + 1, 0) }
    if totalSeconds < 60 { return sign + Self.decimal(totalSeconds * 1_000 + milliseconds, per: 1_000) + "s" }
    let parts: [(UInt64, String)] = [
      (totalSeconds / 86_400, "d"), (totalSeconds / 3_600 % 24, "h"), (totalSeconds / 60 % 60, "m"),
    ]
    var words = parts.filter { $0.0 != 0 }.map { "\($0.0)\($0.1)" }
    let secondOfMinute = totalSeconds % 60 * 1_000 + milliseconds
    if secondOfMinute != 0 { words.append(Self.decimal(secondOfMinute, per: 1_000) + "s") }
    return sign + words.joined(separator: " ")
  }

  /// `value / unit`, rounded half up.
  private static func rounded(_ value: UInt64, to unit: UInt64) -> UInt64 {
    value / unit + (value % unit * 2 >= unit ? 1 : 0)
  }

  /// `value / unit` exactly, with at most three decimals (the caller rounded `value` so that
  /// three suffice), without trailing zeros.
  private static func decimal(_ value: UInt64, per unit: UInt64) -> String {
    let thousandths = rounded(value.multipliedFullWidth(by: 1_000).low, to: unit)
    let whole = thousandths / 1_000
    var fraction = String(thousandths % 1_000)
    guard fraction != "0" else { return String(whole) }
    fraction = String(repeating: "0", count: 3 - fraction.count) + fraction
    while fraction.hasSuffix("0") { fraction.removeLast() }
    return "\(whole).\(fraction)"
  }
}
