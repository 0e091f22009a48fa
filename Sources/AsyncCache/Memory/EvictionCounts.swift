/// How many entries a layer evicted, by reason.
public struct EvictionCounts: Sendable, Hashable, CustomStringConvertible {
  @usableFromInline
  var counts: (Int, Int, Int, Int, Int, Int, Int) = (0, 0, 0, 0, 0, 0, 0)

  /// No evictions.
  public init() {}

  /// The number of evictions for `reason`.
  @inlinable
  public subscript(reason: EvictionReason) -> Int {
    get {
      switch reason {
      case .countLimit: counts.0
      case .costLimit: counts.1
      case .expired: counts.2
      case .memoryPressure: counts.3
      case .oversized: counts.4
      case .expiredOnArrival: counts.5
      case .invalidated: counts.6
      }
    }
    set {
      switch reason {
      case .countLimit: counts.0 = newValue
      case .costLimit: counts.1 = newValue
      case .expired: counts.2 = newValue
      case .memoryPressure: counts.3 = newValue
      case .oversized: counts.4 = newValue
      case .expiredOnArrival: counts.5 = newValue
      case .invalidated: counts.6 = newValue
      }
    }
  }

  /// The number of evictions for all reasons.
  public var total: Int { EvictionReason.allCases.reduce(0) { $0 + self[$1] } }

  public static func == (lhs: EvictionCounts, rhs: EvictionCounts) -> Bool {
    EvictionReason.allCases.allSatisfy { lhs[$0] == rhs[$0] }
  }

  public func hash(into hasher: inout Hasher) {
    for reason in EvictionReason.allCases { hasher.combine(self[reason]) }
  }

  @usableFromInline
  static func + (lhs: EvictionCounts, rhs: EvictionCounts) -> EvictionCounts {
    var sum = lhs
    for reason in EvictionReason.allCases { sum[reason] += rhs[reason] }
    return sum
  }

  public var description: String {
    EvictionReason.allCases.map { "\($0): \(self[$0])" }.joined(separator: ", ")
  }
}
