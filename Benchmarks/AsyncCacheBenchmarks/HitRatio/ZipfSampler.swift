import Foundation  // log, exp, log1p, expm1

/// A Zipf distribution over the ranks `1...count` (rank `k` drawn with probability proportional to
/// `1 / k^exponent`), sampled in O(1) time and memory per draw by rejection-inversion.
///
/// The method of Hörmann and Derflinger ("Rejection-inversion to generate variates from monotone
/// discrete distributions", 1996), as Apache Commons implements it: invert the integral of a
/// continuous hat function, round to the nearest rank, and accept unless the draw fell in the sliver
/// between the hat and the step function. Exact (no truncation, no table), and fast enough for the
/// millions of draws over a million ranks that the hit-ratio traces need, where
/// ``ZipfDistribution``'s table would take 8 MB and a 20-step binary search per draw.
struct ZipfSampler {
  /// The number of ranks.
  let count: Int
  /// The exponent `s`; any positive value, `1` included.
  let exponent: Double
  private let hIntegralX1: Double
  private let hIntegralCount: Double
  private let squeeze: Double

  /// Creates the distribution over the ranks `1...count`.
  init(count: Int, exponent: Double) {
    precondition(count > 0, "a Zipf distribution needs at least one rank")
    precondition(exponent > 0, "the Zipf exponent must be positive")
    self.count = count
    self.exponent = exponent
    hIntegralX1 = Self.hIntegral(1.5, exponent) - 1
    hIntegralCount = Self.hIntegral(Double(count) + 0.5, exponent)
    squeeze = 2 - Self.hIntegralInverse(Self.hIntegral(2.5, exponent) - Self.h(2, exponent), exponent)
  }

  /// Draws one rank in `1...count`.
  @inline(__always)
  func next(using generator: inout some RandomNumberGenerator) -> Int {
    while true {
      // Uniform in (hIntegralX1, hIntegralCount]: 53 random bits, as Double.random(in:) would use.
      let uniform = Double(generator.next() >> 11) * 0x1p-53
      let u = hIntegralCount + uniform * (hIntegralX1 - hIntegralCount)
      let x = Self.hIntegralInverse(u, exponent)
      let rank = min(max(Int(x + 0.5), 1), count)
      // Accept at once inside the squeeze; otherwise test against the step function.
      if Double(rank) - x <= squeeze
        || u >= Self.hIntegral(Double(rank) + 0.5, exponent) - Self.h(Double(rank), exponent)
      {
        return rank
      }
    }
  }

  /// The probability of `rank`, computed directly (O(count)): for checking the sampler.
  static func probabilities(count: Int, exponent: Double) -> [Double] {
    let weights = (1...count).map { 1 / pow(Double($0), exponent) }
    let total = weights.reduce(0, +)
    return weights.map { $0 / total }
  }

  /// `H(x)`, the integral of the hat `h` from 1 to `x`, shifted: `(x^(1-s) - 1) / (1 - s)`, or
  /// `log x` at `s = 1`, written to stay accurate near `s = 1`.
  private static func hIntegral(_ x: Double, _ exponent: Double) -> Double {
    let logX = log(x)
    return helper2((1 - exponent) * logX) * logX
  }

  /// The hat function `h(x) = x^-s`.
  private static func h(_ x: Double, _ exponent: Double) -> Double {
    exp(-exponent * log(x))
  }

  /// The inverse of ``hIntegral(_:_:)``.
  private static func hIntegralInverse(_ x: Double, _ exponent: Double) -> Double {
    // Rounding can push t a hair below -1, outside log1p's domain.
    let t = max(x * (1 - exponent), -1)
    return exp(helper1(t) * x)
  }

  /// `log1p(x) / x`, and its series near 0.
  private static func helper1(_ x: Double) -> Double {
    abs(x) > 1e-8 ? log1p(x) / x : 1 - x * (1 / 2 - x * (1 / 3 - x * (1 / 4)))
  }

  /// `expm1(x) / x`, and its series near 0.
  private static func helper2(_ x: Double) -> Double {
    abs(x) > 1e-8 ? expm1(x) / x : 1 + x * (1 / 2) * (1 + x * (1 / 3) * (1 + x * (1 / 4)))
  }
}
