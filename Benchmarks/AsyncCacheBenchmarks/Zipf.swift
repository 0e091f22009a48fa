import Foundation  // pow

/// A Zipf distribution over `count` keys: the key of rank `k` (1-based) is drawn with probability
/// proportional to `1 / k^exponent`.
///
/// Sampling inverts a precomputed cumulative distribution by binary search: O(log n) per draw and
/// exact, which is all a benchmark that precomputes its keys needs. Ranks are mapped to keys by a
/// seeded shuffle, so the hot keys are spread over the key space (and over the layer's segments)
/// instead of being the smallest integers.
struct ZipfDistribution {
  /// `cumulative[i]` is the probability of drawing one of the ranks `0...i` (0-based).
  private let cumulative: [Double]
  /// `keys[rank]` is the key of that rank.
  private let keys: [Int]

  /// Creates the distribution over the keys `0..<count`, ranked by a shuffle drawn from `generator`.
  init(count: Int, exponent: Double, using generator: inout some RandomNumberGenerator) {
    precondition(count > 0, "a Zipf distribution needs at least one key")
    var running = 0.0
    var cumulative = (1...count).map { rank -> Double in
      running += 1 / pow(Double(rank), exponent)
      return running
    }
    for index in cumulative.indices { cumulative[index] /= running }
    // Rounding may leave the last bucket a hair below 1, where a draw could fall past the end.
    cumulative[cumulative.count - 1] = 1
    self.cumulative = cumulative
    self.keys = Array(0..<count).shuffled(using: &generator)
  }

  /// Draws one key.
  func next(using generator: inout some RandomNumberGenerator) -> Int {
    let draw = Double.random(in: 0..<1, using: &generator)
    // The first rank whose cumulative probability exceeds the draw.
    var low = 0
    var high = cumulative.count - 1
    while low < high {
      let middle = (low + high) / 2
      if cumulative[middle] > draw { high = middle } else { low = middle + 1 }
    }
    return keys[low]
  }
}
