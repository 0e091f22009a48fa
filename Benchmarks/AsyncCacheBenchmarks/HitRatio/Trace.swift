import AsyncCache
import Foundation

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
      name: "loop\(abbreviated(keyCount))",
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

  /// A recency-biased trace: each new key is read `reads` times, each read a log-uniform gap of
  /// 1 to `maximumGap` accesses after the one before, and never again; an access is a new key
  /// whenever no read of an earlier key is due.
  ///
  /// What was read recently is read again soon, and what was read often is not read again, so
  /// recency is everything: LRU is nearly optimal, and a policy that admits by frequency turns
  /// new keys away in favour of keys whose reads are over (Caffeine's known loss on such traces,
  /// e.g. "scarab").
  static func recencyBiased(accesses: Int, reads: Int, maximumGap: Int, seed: UInt64) -> Trace {
    var generator = SplitMix64(seed: seed)
    let logMaximumGap = log(Double(maximumGap))
    var due = DueReads()
    var keys: [Int32] = []
    keys.reserveCapacity(accesses)
    var nextKey: Int32 = 0
    for time in 0..<accesses {
      var read: DueReads.Read
      if let next = due.popDue(at: time) {
        read = next
      } else {
        read = DueReads.Read(due: time, key: nextKey, remaining: reads)
        nextKey += 1
      }
      keys.append(read.key)
      read.remaining -= 1
      if read.remaining > 0 {
        let unit = Double(generator.next() >> 11) / Double(1 << 53)
        read.due = time + max(1, Int(exp(unit * logMaximumGap)))
        due.push(read)
      }
    }
    return Trace(
      name: "recency",
      summary: "recency-biased: every new key read \(reads) times, log-uniform gaps of 1 to "
        + "\(abbreviated(maximumGap)) accesses, then never; \(abbreviated(accesses)) accesses",
      keys: keys,
      keySpace: Int(nextKey)
    )
  }

  /// Zipf traffic whose hot set moves: every `shiftEvery` accesses, the ranks map to
  /// `keyCount` keys never seen before, so the popular keys of the last phase go cold at once.
  ///
  /// Frequency learnt in one phase misleads in the next: a policy must forget fast enough to
  /// admit the new hot set.
  static func shiftingHotSet(exponent: Double, keyCount: Int, accesses: Int, shiftEvery: Int, seed: UInt64) -> Trace {
    var generator = SplitMix64(seed: seed)
    let draws = ZipfDraws(exponent: exponent, keyCount: keyCount, using: &generator)
    var keys: [Int32] = []
    keys.reserveCapacity(accesses)
    for access in 0..<accesses {
      let phase = Int32(access / shiftEvery)
      keys.append(phase * Int32(keyCount) + draws.next(using: &generator))
    }
    let phases = (accesses + shiftEvery - 1) / shiftEvery
    return Trace(
      name: "shifting\(exponentLabel(exponent))",
      summary: "Zipf(\(exponent)) over \(abbreviated(keyCount)) keys whose hot set moves to new keys every "
        + "\(abbreviated(shiftEvery)) accesses; \(abbreviated(accesses)) accesses",
      keys: keys,
      keySpace: phases * keyCount
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

/// The reads of a ``Trace/recencyBiased(accesses:reads:maximumGap:seed:)`` trace that are due,
/// earliest first: a binary min-heap on the due time, ties broken by key.
private struct DueReads {
  struct Read {
    var due: Int
    var key: Int32
    var remaining: Int

    func precedes(_ other: Read) -> Bool { (due, key) < (other.due, other.key) }
  }

  private var heap: [Read] = []

  /// Removes and returns the earliest read if it is due at `time`.
  mutating func popDue(at time: Int) -> Read? {
    guard let first = heap.first, first.due <= time else { return nil }
    let last = heap.removeLast()
    guard !heap.isEmpty else { return first }
    heap[0] = last
    var parent = 0
    while true {
      let left = 2 * parent + 1
      guard left < heap.count else { break }
      var child = left
      if left + 1 < heap.count, heap[left + 1].precedes(heap[left]) { child = left + 1 }
      guard heap[child].precedes(heap[parent]) else { break }
      heap.swapAt(child, parent)
      parent = child
    }
    return first
  }

  mutating func push(_ read: Read) {
    heap.append(read)
    var child = heap.count - 1
    while child > 0 {
      let parent = (child - 1) / 2
      guard heap[child].precedes(heap[parent]) else { break }
      heap.swapAt(child, parent)
      child = parent
    }
  }
}
