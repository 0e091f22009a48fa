import AsyncCache
import Foundation

/// What more memory would buy: a browsing session's requests through a small memory layer, and
/// the hit-ratio curve the layer estimates of itself, drawn as bars.
enum CurveSection {
  /// Requests over `products` products, most of them for a popular few (Zipf, exponent 0.9),
  /// through a loading cache whose memory layer holds `capacity` of them; then the layer's
  /// estimate of its hit ratio at ¼× to 4× that capacity.
  static func present(requests: Int = 300_000, products: Int = 20_000, capacity: Int = 1_000) async throws {
    let memory = try MemoryLayer<Int, String>(configuration: .init(countLimit: capacity))
    // An origin that answers at once: the section measures the cache, not a service.
    let catalogue = try LoadingCache(layers: [memory], origin: ClosureFetcher { (id: Int) in "Product #\(id)" })
    // The library's SplitMix64: the same requests on every run.
    var draws = SplitMix64(seed: 0xDE_5C0)
    let popularity = Popularity(count: products, exponent: 0.9)
    for _ in 0..<requests { _ = try await catalogue.value(for: popularity.draw(using: &draws)) }

    let statistics = memory.statistics
    // The requests' hit ratio: the layer's own counts each miss twice (the load looks again).
    let requestHitRatio = catalogue.statistics.hitRatio
    print(
      """

      What more memory would buy: \(requests.formatted) requests over \(products.formatted) products, \
      the popular ones asked for most, through a memory layer of \(capacity.formatted) entries. \
      The layer's estimate of LRU's hit ratio at other sizes, from \
      \((statistics.hitRatioCurve?.sampledLookups ?? 0).formatted) requests it sampled:
      """)
    guard let curve = statistics.hitRatioCurve else {
      print("  (no estimate: the layer sampled no request)")
      return
    }
    let width = 30
    for point in curve.points {
      let filled = Int((point.hitRatio * Double(width)).rounded())
      let bar = String(repeating: "█", count: filled) + String(repeating: "░", count: width - filled)
      let label = point.scale == 1 ? "  ← its size; its own policy hit \(percent(requestHitRatio))" : ""
      let entries = point.capacity.formatted
      print(
        "  \(String(repeating: " ", count: max(0, 7 - entries.count)))\(entries) entries \(bar) "
          + "\(percent(point.hitRatio))\(label)")
    }
  }

  static func percent(_ ratio: Double) -> String { "\(Int((ratio * 100).rounded()))%" }
}

/// Draws ranks `0..<count` with probability proportional to `1 / (rank + 1)^exponent`.
struct Popularity {
  /// The cumulative weights, normalized to end at 1.
  let cumulative: [Double]

  init(count: Int, exponent: Double) {
    var sum = 0.0
    var cumulative: [Double] = []
    cumulative.reserveCapacity(count)
    for rank in 0..<count {
      sum += 1 / pow(Double(rank + 1), exponent)
      cumulative.append(sum)
    }
    self.cumulative = cumulative.map { $0 / sum }
  }

  func draw(using generator: inout some RandomNumberGenerator) -> Int {
    let target = Double.random(in: 0..<1, using: &generator)
    var low = 0
    var high = cumulative.count - 1
    while low < high {
      let middle = (low + high) / 2
      if cumulative[middle] < target { low = middle + 1 } else { high = middle }
    }
    return low
  }
}

extension Int {
  /// With thousands separated by commas: `20,000`.
  var formatted: String {
    let digits = String(self.magnitude)
    var grouped = ""
    for (index, digit) in digits.enumerated() {
      if index > 0, (digits.count - index) % 3 == 0 { grouped.append(",") }
      grouped.append(digit)
    }
    return (self < 0 ? "-" : "") + grouped
  }
}
