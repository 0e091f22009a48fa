import AsyncCache

/// A sequence of key accesses that cache policies are replayed over, generated from a seed so that
/// every run replays the same accesses.
///
/// Keys are dense, in `0..<keySpace`, so that simulators can index arrays by key instead of hashing;
/// stored as `Int32` to halve the memory of the 4M-access traces.
struct Trace: Sendable {
  /// A short name for row labels, e.g. `zipf099`.
  var name: String
  /// What the trace is, for the reader, e.g. `Zipf(0.99), 1M keys, 4M accesses`.
  var summary: String
  /// The accesses, in order.
  var keys: [Int32]
  /// Every key is in `0..<keySpace`.
  var keySpace: Int

  /// Draws `accesses` keys from a Zipf distribution over `keyCount` keys.
  ///
  /// Ranks map to keys through a seeded shuffle, so the hot keys are not the smallest integers
  /// (a policy that hashes keys must not get an easy or a pathological hash by accident).
  static func zipf(exponent: Double, keyCount: Int, accesses: Int, seed: UInt64) -> Trace {
    var generator = SplitMix64(seed: seed)
    let draws = ZipfDraws(exponent: exponent, keyCount: keyCount, using: &generator)
    let keys = (0..<accesses).map { _ in draws.next(using: &generator) }
    return Trace(
      name: "zipf\(exponentLabel(exponent))",
      summary: "Zipf(\(exponent)), \(abbreviated(keyCount)) keys, \(abbreviated(accesses)) accesses",
      keys: keys,
      keySpace: keyCount
    )
  }

  /// Walks `keyCount` keys in one fixed (seeded, shuffled) order, `passes` times over.
  ///
  /// LRU misses every access once the loop is longer than the cache; the optimal policy keeps a
  /// fixed subset and hits it on every pass.
  static func loop(keyCount: Int, passes: Int, seed: UInt64) -> Trace {
    var generator = SplitMix64(seed: seed)
    let order = (0..<Int32(keyCount)).shuffled(using: &generator)
    return Trace(
      name: "loop",
      summary: "loop over \(abbreviated(keyCount)) keys, \(passes) passes (\(abbreviated(keyCount * passes)) accesses)",
      keys: Array((0..<passes).map { _ in order }.joined()),
      keySpace: keyCount
    )
  }

  /// Zipf traffic over `keyCount` keys, interrupted after every `accessesBetweenScans` draws by a
  /// scan of `scanLength` sequential keys that are never seen before or again; `accesses` in all.
  ///
  /// The scans flush an LRU cache smaller than a scan; a scan-resistant policy keeps its hot set,
  /// and the optimal policy bypasses every scanned key.
  static func zipfWithScans(
    exponent: Double,
    keyCount: Int,
    accesses: Int,
    accessesBetweenScans: Int,
    scanLength: Int,
    seed: UInt64
  ) -> Trace {
    var generator = SplitMix64(seed: seed)
    let draws = ZipfDraws(exponent: exponent, keyCount: keyCount, using: &generator)
    var keys: [Int32] = []
    keys.reserveCapacity(accesses)
    // Scanned keys follow the Zipf key space, so they never collide with it or with each other.
    var nextScanKey = Int32(keyCount)
    while keys.count < accesses {
      for _ in 0..<min(accessesBetweenScans, accesses - keys.count) { keys.append(draws.next(using: &generator)) }
      for _ in 0..<min(scanLength, accesses - keys.count) {
        keys.append(nextScanKey)
        nextScanKey += 1
      }
    }
    let scanShare = Double(scanLength) / Double(accessesBetweenScans + scanLength) * 100
    return Trace(
      name: "zipf\(exponentLabel(exponent))scans",
      summary: "Zipf(\(exponent)), \(abbreviated(keyCount)) keys, \(abbreviated(accesses)) accesses: "
        + "every \(abbreviated(accessesBetweenScans)) draws, a scan of \(abbreviated(scanLength)) new keys "
        + "(\(format(scanShare, decimals: 0))% scans)",
      keys: keys,
      keySpace: Int(nextScanKey)
    )
  }

  /// `0.99` as `099`, `0.8` as `080`: a label without a dot.
  private static func exponentLabel(_ exponent: Double) -> String {
    let hundredths = Int((exponent * 100).rounded())
    return "\(hundredths / 100)\(hundredths % 100 < 10 ? "0" : "")\(hundredths % 100)"
  }
}

/// Zipf draws mapped from ranks to keys by a seeded permutation.
private struct ZipfDraws {
  let sampler: ZipfSampler
  /// `keyOfRank[rank - 1]` is the key of that rank.
  let keyOfRank: [Int32]

  init(exponent: Double, keyCount: Int, using generator: inout SplitMix64) {
    sampler = ZipfSampler(count: keyCount, exponent: exponent)
    keyOfRank = (0..<Int32(keyCount)).shuffled(using: &generator)
  }

  func next(using generator: inout SplitMix64) -> Int32 {
    keyOfRank[sampler.next(using: &generator) - 1]
  }
}
