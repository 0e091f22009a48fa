/// Why a layer dropped an entry it was holding (or refused one it was given).
public enum EvictionReason: Int, Sendable, Hashable, CaseIterable, CustomStringConvertible {
  /// The layer held more entries than its count limit.
  case countLimit
  /// The layer's entries cost more than its cost limit.
  case costLimit
  /// The entry's expiry passed.
  case expired
  /// The layer trimmed or emptied itself under memory pressure.
  case memoryPressure
  /// The entry alone cost more than the layer's cost limit, so it was refused (and any
  /// previous entry for its key removed).
  case oversized
  /// The entry arrived already expired by the layer's clock, so it was refused (and any
  /// previous entry for its key removed): most often the layer reads another clock than the
  /// one that computed the expiry. Logged as a warning the first time, then at debug.
  case expiredOnArrival
  /// A tag the entry was filed under was invalidated after it was produced (see
  /// ``LoadingCache/invalidate(tag:)``): the layer removed it when a lookup came to it.
  case invalidated

  public var description: String {
    switch self {
    case .countLimit: "countLimit"
    case .costLimit: "costLimit"
    case .expired: "expired"
    case .memoryPressure: "memoryPressure"
    case .oversized: "oversized"
    case .expiredOnArrival: "expiredOnArrival"
    case .invalidated: "invalidated"
    }
  }
}
