/// A cache eviction policy replayed over a ``Trace`` one access at a time, to count its hits.
///
/// Simulators hold keys only, no values: the hit ratio depends on which keys a policy keeps, not on
/// what it stores. Keys are in the trace's `0..<keySpace`.
protocol PolicySimulator: SendableMetatype {
  /// Records an access to `key`: a lookup, and on a miss whatever the policy does (insert, evict,
  /// or refuse the key). Returns whether the lookup hit.
  mutating func access(_ key: Int32) -> Bool
}

/// A policy under comparison: its name in the report and how to build its simulator for a trace
/// and a cache size (the most keys it may hold).
struct SimulatedPolicy: Sendable {
  /// The policy's name in the report.
  var name: String
  /// Replays a trace through a fresh simulator holding at most `capacity` keys; returns the hits.
  var hits: @Sendable (_ trace: Trace, _ capacity: Int) -> Int

  /// A policy whose simulator `make` builds for a trace and a capacity.
  init<Simulator: PolicySimulator>(
    _ name: String,
    _ make: @escaping @Sendable (_ trace: Trace, _ capacity: Int) -> Simulator
  ) {
    self.name = name
    self.hits = { trace, capacity in
      var simulator = make(trace, capacity)
      return replay(trace.keys, through: &simulator)
    }
  }
}

/// Feeds every key to `simulator`, in order, and returns the hits. Generic, so each simulator gets
/// a specialized loop with its `access(_:)` inlined.
func replay<Simulator: PolicySimulator>(_ keys: [Int32], through simulator: inout Simulator) -> Int {
  var hits = 0
  for key in keys where simulator.access(key) { hits &+= 1 }
  return hits
}
