import AsyncCache

/// The library's W-TinyLFU policy (`WTinyLFUPolicy`, count mode: every key weighs 1) replayed
/// over a trace: a hit records the access; a miss inserts the key, which the policy admits or
/// refuses against its frequency sketch.
struct WTinyLFUSimulator: PolicySimulator {
  private var policy: WTinyLFUPolicy<Int32, SplitMix64>

  /// An empty cache of at most `capacity` keys, with an adaptive window or a fixed 1% one; the
  /// rare random admissions are seeded.
  init(capacity: Int, adaptsWindow: Bool = true) {
    policy = WTinyLFUPolicy(maximumWeight: capacity, adaptsWindow: adaptsWindow, random: SplitMix64(seed: 7))
  }

  mutating func access(_ key: Int32) -> Bool {
    if policy.recordAccess(key) { return true }
    _ = policy.insert(key, weight: 1)
    return false
  }
}
