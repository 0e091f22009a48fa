/// How urgently the system wants memory back.
///
/// Layers receive the level through ``AsyncCacheLayer/handleMemoryPressure(_:)``:
/// a memory layer trims to a fraction of its limits on ``warning`` and empties itself on
/// ``critical``; persistent layers usually ignore it.
public enum MemoryPressureLevel: Int, Sendable, Hashable, Comparable, CaseIterable {
  /// No pressure.
  case normal
  /// Memory is getting scarce: release what is cheap to rebuild.
  case warning
  /// Memory is about to run out: release everything that can be released.
  case critical

  public static func < (lhs: MemoryPressureLevel, rhs: MemoryPressureLevel) -> Bool {
    lhs.rawValue < rhs.rawValue
  }
}
