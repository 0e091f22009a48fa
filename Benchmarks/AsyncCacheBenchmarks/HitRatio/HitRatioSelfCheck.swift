import AsyncCache

/// Checks, before the hit-ratio benchmark measures anything, that its simulators and its Zipf
/// sampler compute what they claim, on inputs small enough to know the answer.
enum HitRatioSelfCheck {
  /// The reference string of Silberschatz's *Operating System Concepts* (figures 9.12 to 9.15).
  static let textbookTrace: [Int32] = [7, 0, 1, 2, 0, 3, 0, 4, 2, 3, 0, 3, 2, 1, 2, 0, 1, 7, 0, 1]

  /// Runs every check.
  ///
  /// - Throws: ``BenchmarkFailure`` naming the first check that fails.
  static func run() throws {
    try checkTextbookExample()
    try checkAgainstReferenceImplementations()
    try checkTraceFileParser()
    try checkLIRSParser()
    for exponent in [0.8, 0.99] { try checkZipfSampler(exponent: exponent) }
  }

  /// With 3 frames the book counts 12 LRU faults (8 hits) and 9 faults for OPT without bypass.
  /// With bypass, OPT also skips 4 (position 7, never used again: the book's OPT evicts 0 for it
  /// and faults on 0 at position 10) and the last 7: 8 faults, 12 hits, checked by hand.
  private static func checkTextbookExample() throws {
    let trace = Trace(name: "textbook", summary: "", keys: textbookTrace, keySpace: 8)
    var lru = LRUSimulator(capacity: 3, keySpace: trace.keySpace)
    var optimal = OptimalSimulator(trace: trace, capacity: 3)
    let lruHits = replay(trace.keys, through: &lru)
    let optimalHits = replay(trace.keys, through: &optimal)
    guard lruHits == 8, optimalHits == 12 else {
      throw BenchmarkFailure(
        "on the textbook trace with 3 frames, LRU scored \(lruHits) hits (expected 8) and OPT \(optimalHits) (expected 12)"
      )
    }
  }

  /// Random small traces: LRU against a move-to-front list, ARC against the paper's pseudo-code
  /// over plain arrays, OPT against an exhaustive search over every choice a policy could make.
  private static func checkAgainstReferenceImplementations() throws {
    var generator = SplitMix64(seed: 0x5EED_0F_0B7)
    for round in 0..<300 {
      let keySpace = 2 + round % 6
      let length = 10 + Int(generator.next() % 30)
      let keys = (0..<length).map { _ in Int32(generator.next() % UInt64(keySpace)) }
      let trace = Trace(name: "random", summary: "", keys: keys, keySpace: keySpace)
      for capacity in 0...keySpace {
        var lru = LRUSimulator(capacity: capacity, keySpace: keySpace)
        var optimal = OptimalSimulator(trace: trace, capacity: capacity)
        let lruHits = replay(keys, through: &lru)
        let optimalHits = replay(keys, through: &optimal)
        let expectedLRU = moveToFrontLRUHits(keys, capacity: capacity)
        let expectedOptimal = exhaustiveOptimalHits(keys, capacity: capacity)
        var arc = ARCSimulator(capacity: capacity, keySpace: keySpace)
        let arcHits = replay(keys, through: &arc)
        let expectedARC = arrayARCHits(keys, capacity: capacity)
        guard lruHits == expectedLRU, optimalHits == expectedOptimal, arcHits == expectedARC else {
          throw BenchmarkFailure(
            "on \(keys) with capacity \(capacity): LRU \(lruHits) hits (reference \(expectedLRU)), "
              + "ARC \(arcHits) (reference \(expectedARC)), "
              + "OPT \(optimalHits) (exhaustive search \(expectedOptimal))"
          )
        }
      }
    }
  }

  /// The `.lis` parser on a few lines: blocks numbered densely in order of first access, a
  /// missing last newline and blank lines accepted, and malformed lines reported by number.
  private static func checkTraceFileParser() throws {
    let text = "10 3 0 0\n11 1 0 1\r\n\n7 2 0 2\n12 1 0 3"
    let trace = try Trace.parse(Array(text.utf8), path: "sample.lis", name: "sample", summary: "")
    guard trace.keys == [0, 1, 2, 1, 3, 4, 2], trace.keySpace == 5 else {
      throw BenchmarkFailure(
        "the .lis parser read \(trace.keys) over \(trace.keySpace) keys from \(text.debugDescription)")
    }
    let malformed = [
      ("1 1 0 0\n2 1 0\n", "sample.lis, line 2: has 3 fields, not 4 (start count ignored requestNumber)"),
      ("1 1 0 0\n\n3 x 0 2\n", "sample.lis, line 3: has 'x', where only decimal numbers and spaces belong"),
      ("99999999999999999999 1 0 0\n", "sample.lis, line 1: has a number too large for 64 bits"),
    ]
    for (text, expected) in malformed {
      do {
        _ = try Trace.parse(Array(text.utf8), path: "sample.lis", name: "sample", summary: "")
        throw BenchmarkFailure("the .lis parser accepted \(text.debugDescription)")
      } catch let error as TraceFileError {
        guard error.description == expected else {
          throw BenchmarkFailure("the .lis parser reported '\(error)' for \(text.debugDescription), not '\(expected)'")
        }
      }
    }
  }

  /// The LIRS parser on a few lines: keys numbered densely in order of first access, CRLF
  /// endings, `*` markers, blank lines and a missing last newline accepted; malformed lines
  /// reported by number.
  private static func checkLIRSParser() throws {
    let text = "7\r\n7\n*\n\n  12 \n7\n3"
    let trace = try Trace.parseLIRS(Array(text.utf8), path: "sample.trace", name: "sample", summary: "")
    guard trace.keys == [0, 0, 1, 0, 2], trace.keySpace == 3 else {
      throw BenchmarkFailure(
        "the LIRS parser read \(trace.keys) over \(trace.keySpace) keys from \(text.debugDescription)")
    }
    let malformed = [
      ("1\n2 3\n", "sample.trace, line 2: has more than one key"),
      ("1\n\n4x\n", "sample.trace, line 3: has 'x', where only one decimal key (or '*') belongs"),
      ("99999999999999999999\n", "sample.trace, line 1: has a number too large for 64 bits"),
      ("5*\n", "sample.trace, line 1: has '*' after a key"),
    ]
    for (text, expected) in malformed {
      do {
        _ = try Trace.parseLIRS(Array(text.utf8), path: "sample.trace", name: "sample", summary: "")
        throw BenchmarkFailure("the LIRS parser accepted \(text.debugDescription)")
      } catch let error as TraceFileError {
        guard error.description == expected else {
          throw BenchmarkFailure("the LIRS parser reported '\(error)' for \(text.debugDescription), not '\(expected)'")
        }
      }
    }
  }

  /// LRU as the definition reads: a list, most recent first.
  private static func moveToFrontLRUHits(_ keys: [Int32], capacity: Int) -> Int {
    var recency: [Int32] = []
    var hits = 0
    for key in keys {
      if let index = recency.firstIndex(of: key) {
        hits += 1
        recency.remove(at: index)
      } else if capacity > 0, recency.count == capacity {
        recency.removeLast()
      }
      if capacity > 0 { recency.insert(key, at: 0) }
    }
    return hits
  }

  /// ARC line by line as the paper's figure 4 reads, with each list an array, most recent first.
  private static func arrayARCHits(_ keys: [Int32], capacity: Int) -> Int {
    guard capacity > 0 else { return 0 }
    let c = Double(capacity)
    var (t1, t2, b1, b2): ([Int32], [Int32], [Int32], [Int32]) = ([], [], [], [])
    var p = 0.0
    var hits = 0
    func replace(_ key: Int32) {
      if !t1.isEmpty, Double(t1.count) > p || (b2.contains(key) && Double(t1.count) == p) {
        b1.insert(t1.removeLast(), at: 0)
      } else {
        b2.insert(t2.removeLast(), at: 0)
      }
    }
    for key in keys {
      if let index = t1.firstIndex(of: key) {
        hits += 1
        t1.remove(at: index)
        t2.insert(key, at: 0)
      } else if let index = t2.firstIndex(of: key) {
        hits += 1
        t2.remove(at: index)
        t2.insert(key, at: 0)
      } else if b1.contains(key) {
        p = min(c, p + (b1.count >= b2.count ? 1 : Double(b2.count) / Double(b1.count)))
        replace(key)
        // By value: REPLACE may have moved a key into B1 ahead of this one.
        b1.removeAll { $0 == key }
        t2.insert(key, at: 0)
      } else if b2.contains(key) {
        p = max(0, p - (b2.count >= b1.count ? 1 : Double(b1.count) / Double(b2.count)))
        replace(key)
        b2.removeAll { $0 == key }
        t2.insert(key, at: 0)
      } else {
        if t1.count + b1.count == capacity {
          if t1.count < capacity {
            b1.removeLast()
            replace(key)
          } else {
            t1.removeLast()
          }
        } else if t1.count + t2.count + b1.count + b2.count >= capacity {
          if t1.count + t2.count + b1.count + b2.count == 2 * capacity { b2.removeLast() }
          replace(key)
        }
        t1.insert(key, at: 0)
      }
    }
    return hits
  }

  /// The most hits of any policy: for each set of resident keys reachable after each access, the
  /// most hits that reach it. On a miss a policy may refuse the key, add it if there is room, or
  /// put it in place of any resident key. Keys must be below 16.
  private static func exhaustiveOptimalHits(_ keys: [Int32], capacity: Int) -> Int {
    var best: [Int: Int] = [0: 0]
    for key in keys {
      let bit = 1 << Int(key)
      var next: [Int: Int] = [:]
      for (resident, hits) in best {
        if resident & bit != 0 {
          next[resident] = max(next[resident] ?? 0, hits + 1)
          continue
        }
        var choices = [resident]
        if resident.nonzeroBitCount < capacity { choices.append(resident | bit) }
        if resident.nonzeroBitCount == capacity {
          for victim in 0..<16 where resident & (1 << victim) != 0 {
            choices.append(resident & ~(1 << victim) | bit)
          }
        }
        for choice in choices { next[choice] = max(next[choice] ?? 0, hits) }
      }
      best = next
    }
    return best.values.max() ?? 0
  }

  /// Draws 1M ranks over 1,000 and compares their counts with the exact probabilities by a
  /// chi-squared test: with 999 degrees of freedom the statistic has mean 999 and standard
  /// deviation 45, so a correct sampler stays under 999 + 6 deviations (the seed is fixed, so the
  /// check is deterministic; a biased sampler lands in the tens of thousands).
  private static func checkZipfSampler(exponent: Double) throws {
    let ranks = 1_000
    let draws = 1_000_000
    let sampler = ZipfSampler(count: ranks, exponent: exponent)
    var generator = SplitMix64(seed: 0x21FF)
    var counts = [Int](repeating: 0, count: ranks)
    for _ in 0..<draws {
      let rank = sampler.next(using: &generator)
      guard (1...ranks).contains(rank) else { throw BenchmarkFailure("the Zipf sampler drew rank \(rank)") }
      counts[rank - 1] += 1
    }
    let probabilities = ZipfSampler.probabilities(count: ranks, exponent: exponent)
    var chiSquared = 0.0
    for (count, probability) in zip(counts, probabilities) {
      let expected = probability * Double(draws)
      chiSquared += (Double(count) - expected) * (Double(count) - expected) / expected
    }
    let degrees = Double(ranks - 1)
    let bound = degrees + 6 * (2 * degrees).squareRoot()
    guard chiSquared < bound else {
      throw BenchmarkFailure(
        "the Zipf(\(exponent)) sampler fails a chi-squared test: \(format(chiSquared, decimals: 0)) >= "
          + "\(format(bound, decimals: 0))"
      )
    }
  }
}
