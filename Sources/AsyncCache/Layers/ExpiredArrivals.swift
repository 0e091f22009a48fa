import Synchronization

/// How a layer reports the entries that arrive already expired by its clock, which it does not
/// store: most often the sign that the layer reads another clock than the one that computed the
/// expiry. The first report of a layer is a warning; the next ones are debug records, so that a
/// clock set wrong logs once, not once per write. Safe from any context.
package final class ExpiredArrivals: Sendable {
  private let reported = Atomic<Bool>(false)

  package init() {}

  /// The level to log the next report at: ``CacheLogLevel/warning`` the first time, then
  /// ``CacheLogLevel/debug``.
  package func nextLevel() -> CacheLogLevel {
    reported.exchange(true, ordering: .relaxed) ? .debug : .warning
  }

  /// The sentence that explains an entry that expired at `expiresAt` arriving at a layer whose
  /// clock reads `now`.
  package static func describe(expiresAt: CacheInstant, now: CacheInstant) -> String {
    "arrived already expired by the layer's clock and was not stored: it expired at \(expiresAt), "
      + "\(expiresAt.duration(to: now).readable) before the layer's now (\(now)). Its writer reads "
      + "another clock: give the layer and its cache one clock (a layer follows the first cache it is put in)"
  }
}
