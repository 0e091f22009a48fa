import AsyncCache

/// The library's ``MemoryLayer`` replayed like a policy: a lookup, then an insert on a miss.
///
/// With one segment and ``EvictionPolicy/leastRecentlyUsed`` the layer evicts in exact LRU order,
/// so the benchmark checks that it scores exactly ``LRUSimulator``'s hits: a check of the
/// simulator and of the layer. Its other policies are replayed the same way: what is measured is
/// the code that ships, created as an application creates it (no admission seed).
struct MemoryLayerSimulator: PolicySimulator {
  private let layer: MemoryLayer<Int32, Bool>

  /// Wraps a layer with `configuration`, which must not fail validation and must have no cost.
  init(configuration: MemoryLayer<Int32, Bool>.Configuration) {
    do {
      layer = try MemoryLayer(configuration: configuration)
    } catch {
      preconditionFailure("invalid MemoryLayer configuration: \(error)")
    }
  }

  mutating func access(_ key: Int32) -> Bool {
    if layer.value(for: key) != nil { return true }
    do {
      try layer.insert(true, for: key)
    } catch {
      // Only a cost function can make an insert throw, and the configurations here have none.
      preconditionFailure("MemoryLayer refused an insert: \(error)")
    }
    return false
  }
}
