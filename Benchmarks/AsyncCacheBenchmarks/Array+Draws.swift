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
