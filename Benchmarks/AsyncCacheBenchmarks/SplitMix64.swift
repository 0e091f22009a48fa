/// SplitMix64 (Steele, Lea and Flood, 2014): a tiny seedable generator, so that every run draws the
/// same keys and two runs of the benchmark replay the same workload.
struct SplitMix64: RandomNumberGenerator {
  private var state: UInt64

  /// Creates a generator whose sequence is determined by `seed`.
  init(seed: UInt64) {
    state = seed
  }

  mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var mixed = state
    mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
    mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
    return mixed ^ (mixed >> 31)
  }
}

extension Array where Element == Int {
  /// `count` keys drawn uniformly from `keys`, with replacement.
  static func uniformDraws(
    from keys: [Int],
    count: Int,
    using generator: inout some RandomNumberGenerator
  ) -> [Int] {
    (0..<count).map { _ in keys[Int.random(in: keys.indices, using: &generator)] }
  }

  /// The same sequence started at `offset` and wrapped around, so that two tasks walk the same keys
  /// without meeting on the same key at the same moment.
  func rotated(by offset: Int) -> [Int] {
    guard !isEmpty else { return self }
    let split = offset % count
    return Array(self[split...] + self[..<split])
  }
}
