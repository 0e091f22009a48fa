import AsyncCache
import Foundation

/// `cache.hitRatio`: replays seeded traces through LRU, Belady's optimal policy and the candidate
/// policies, for several cache sizes, and reports each one's hit ratio and capture ratio
/// `(policy - LRU) / (OPT - LRU)`: the share of what LRU leaves on the table that a policy wins back.
///
/// Hit ratios are deterministic (seeded traces, deterministic policies); only the replay times
/// printed at the end vary between runs.
enum HitRatioBenchmark {
  /// The policies compared with LRU and OPT: the memory layer's W-TinyLFU in one segment (the
  /// policy exactly), the same with the adaptive window, and with the automatic segment count,
  /// whose segments each run the policy over a share of the keys.
  static var candidates: [SimulatedPolicy] {
    [
      SimulatedPolicy("W-TinyLFU") { _, capacity in
        MemoryLayerSimulator(
          configuration: .init(countLimit: capacity, segmentCount: 1, evictionPolicy: .windowTinyLFU))
      },
      SimulatedPolicy("adaptive 1seg") { _, capacity in
        MemoryLayerSimulator(configuration: .init(countLimit: capacity, segmentCount: 1, evictionPolicy: .adaptive))
      },
      SimulatedPolicy("default") { _, capacity in
        MemoryLayerSimulator(configuration: .init(countLimit: capacity))
      },
    ]
  }

  /// Capture ratios of Caffeine's W-TinyLFU on traces of this description (issue #6), by trace name
  /// and cache size: the targets of every candidate in a full run.
  static let referenceCaptures: [String: [Int: Double]] = [
    "zipf080": [10_000: 0.53],
    "zipf099": [10_000: 0.59],
    "loop": [50_000: 0.94],
    "zipf099scans": [10_000: 0.61],
  ]

  /// `(policy - lru) / (optimal - lru)`: 0 for LRU's hit ratio, 1 for the optimal one; `nil` when
  /// LRU is already optimal and there is nothing to capture.
  static func captureRatio(_ policy: Double, lru: Double, optimal: Double) -> Double? {
    let gap = optimal - lru
    guard gap > 0 else { return nil }
    return (policy - lru) / gap
  }

  static var lru: SimulatedPolicy {
    SimulatedPolicy("LRU") { trace, capacity in LRUSimulator(capacity: capacity, keySpace: trace.keySpace) }
  }
  static var optimal: SimulatedPolicy {
    SimulatedPolicy("OPT") { trace, capacity in OptimalSimulator(trace: trace, capacity: capacity) }
  }
  /// The library's layer in exact-LRU mode: must score exactly ``lru``'s hits.
  static var memoryLayer: SimulatedPolicy {
    SimulatedPolicy("MemoryLayer LRU") { _, capacity in
      MemoryLayerSimulator(
        configuration: .init(countLimit: capacity, segmentCount: 1, evictionPolicy: .leastRecentlyUsed)
      )
    }
  }

  /// One trace at one cache size: the hits of every policy, by name.
  private struct Outcome {
    var trace: String
    var summary: String
    var size: Int
    var accesses: Int
    var hits: [String: Int]

    func hitRatio(_ policy: String) -> Double { Double(hits[policy] ?? 0) / Double(accesses) }
  }

  /// Runs the benchmark.
  ///
  /// - Throws: ``BenchmarkFailure`` when a self-check fails, a hit ratio is out of `0...1`, a policy
  ///   beats the optimal one, the memory layer disagrees with LRU, or the loop trace does not give
  ///   its known hits.
  static func run(_ configuration: RunConfiguration) async throws -> [ResultRow] {
    try HitRatioSelfCheck.run()
    let clock = ContinuousClock()
    let policies = [lru, optimal, memoryLayer] + candidates
    var replayTimes = [String: Duration]()
    var generationTime = Duration.zero
    var outcomes: [Outcome] = []
    for makeTrace in traces(configuration) {
      let start = clock.now
      let trace = makeTrace()
      generationTime += start.duration(to: clock.now)
      for size in configuration.hitRatioCacheSizes {
        var outcome = Outcome(
          trace: trace.name, summary: trace.summary, size: size, accesses: trace.keys.count, hits: [:])
        for policy in policies {
          let start = clock.now
          outcome.hits[policy.name] = policy.hits(trace, size)
          replayTimes[policy.name, default: .zero] += start.duration(to: clock.now)
        }
        try check(outcome, configuration)
        checksumSink.wrappingAdd(outcome.hits.values.reduce(0, &+), ordering: .relaxed)
        outcomes.append(outcome)
      }
    }
    print(renderMatrix(outcomes, configuration))
    print(
      "cache.hitRatio: MemoryLayer(segmentCount: 1, evictionPolicy: .leastRecentlyUsed) scored exactly LRU's "
        + "hits on every row. "
        + "Traces generated in \(seconds(generationTime)); replays: "
        + policies.map { "\($0.name) \(seconds(replayTimes[$0.name] ?? .zero))" }.joined(separator: ", ")
    )
    return rows(outcomes, configuration)
  }

  /// The traces, built one at a time so that only one is in memory.
  private static func traces(_ run: RunConfiguration) -> [() -> Trace] {
    [
      { .zipf(exponent: 0.8, keyCount: run.hitRatioKeyCount, accesses: run.hitRatioAccesses, seed: 0x5A1) },
      { .zipf(exponent: 0.99, keyCount: run.hitRatioKeyCount, accesses: run.hitRatioAccesses, seed: 0x5A2) },
      { .loop(keyCount: run.hitRatioLoopKeyCount, passes: run.hitRatioLoopPasses, seed: 0x5A3) },
      {
        .zipfWithScans(
          exponent: 0.99,
          keyCount: run.hitRatioKeyCount,
          accesses: run.hitRatioAccesses,
          accessesBetweenScans: run.hitRatioAccessesBetweenScans,
          scanLength: run.hitRatioScanLength,
          seed: 0x5A4
        )
      },
      { .recencyBiased(accesses: run.hitRatioAccesses, reads: 4, maximumGap: 32_768, seed: 0x5A5) },
      {
        .shiftingHotSet(
          exponent: 0.99,
          keyCount: run.hitRatioKeyCount,
          accesses: run.hitRatioAccesses,
          shiftEvery: run.hitRatioAccesses / 4,
          seed: 0x5A6
        )
      },
    ]
  }

  private static func check(_ outcome: Outcome, _ run: RunConfiguration) throws {
    let label = "\(outcome.trace) at \(abbreviated(outcome.size))"
    for (policy, hits) in outcome.hits where !(0...outcome.accesses).contains(hits) {
      throw BenchmarkFailure("\(policy) scored \(hits) hits in \(outcome.accesses) accesses on \(label)")
    }
    let optimalHits = outcome.hits[optimal.name] ?? 0
    for (policy, hits) in outcome.hits where hits > optimalHits {
      throw BenchmarkFailure("\(policy) scored \(hits) hits on \(label), more than the optimal \(optimalHits)")
    }
    let lruHits = outcome.hits[lru.name] ?? 0
    guard outcome.hits[memoryLayer.name] == lruHits else {
      throw BenchmarkFailure(
        "MemoryLayer with one segment scored \(outcome.hits[memoryLayer.name] ?? 0) hits on \(label), "
          + "exact LRU \(lruHits)"
      )
    }
    if outcome.trace == "loop" {
      // LRU misses everything while the loop is longer than the cache; OPT keeps `size` keys and
      // hits them on every pass after the first.
      let keys = run.hitRatioLoopKeyCount
      let repeats = run.hitRatioLoopPasses - 1
      let expectedLRU = outcome.size < keys ? 0 : keys * repeats
      let expectedOptimal = min(outcome.size, keys) * repeats
      guard lruHits == expectedLRU, optimalHits == expectedOptimal else {
        throw BenchmarkFailure(
          "on \(label), LRU scored \(lruHits) hits (expected \(expectedLRU)) and OPT \(optimalHits) "
            + "(expected \(expectedOptimal))"
        )
      }
    }
  }

  /// The target capture ratio of a candidate on `outcome`, in a full run only: the references were
  /// measured on full-size traces.
  private static func reference(_ outcome: Outcome, _ run: RunConfiguration) -> Double? {
    run.isQuick ? nil : referenceCaptures[outcome.trace]?[outcome.size]
  }

  /// One row per trace and size: hit ratios in percent, and each candidate's capture ratio.
  private static func renderMatrix(_ outcomes: [Outcome], _ run: RunConfiguration) -> String {
    var header = ["trace", "size", "LRU", "OPT"]
    for candidate in candidates { header += [candidate.name, "capture"] }
    header.append("reference capture")
    var lines = [header]
    for outcome in outcomes {
      let lruRatio = outcome.hitRatio(lru.name)
      let optimalRatio = outcome.hitRatio(optimal.name)
      var cells = [outcome.trace, abbreviated(outcome.size), percent(lruRatio), percent(optimalRatio)]
      for candidate in candidates {
        let ratio = outcome.hitRatio(candidate.name)
        let capture = captureRatio(ratio, lru: lruRatio, optimal: optimalRatio)
        cells += [percent(ratio), capture.map { format($0, decimals: 2) } ?? "-"]
      }
      cells.append(reference(outcome, run).map { ">= \(format($0, decimals: 2))" } ?? "")
      lines.append(cells)
    }
    let widths = header.indices.map { column in lines.map { $0[column].count }.max() ?? 0 }
    let rendered = lines.map { cells in
      cells.enumerated().map { column, cell in
        let padding = String(repeating: " ", count: widths[column] - cell.count)
        return column == 0 ? cell + padding : padding + cell
      }
      .joined(separator: "  ")
      .replacingOccurrences(of: " +$", with: "", options: .regularExpression)
    }
    let traces = outcomes.reduce(into: [String]()) { summaries, outcome in
      let line = "  \(outcome.trace): \(outcome.summary)"
      if !summaries.contains(line) { summaries.append(line) }
    }
    let title =
      "cache.hitRatio: hit ratios (%); capture = (policy - LRU) / (OPT - LRU); OPT is Belady's, bypass allowed"
    let rule = String(repeating: "-", count: rendered[0].count)
    return ([title] + traces + [rendered[0], rule] + rendered.dropFirst()).joined(separator: "\n")
  }

  /// The report's rows: LRU and OPT for every trace and size, then each candidate, held to the
  /// reference capture ratio where the issue gives one.
  private static func rows(_ outcomes: [Outcome], _ run: RunConfiguration) -> [ResultRow] {
    var rows: [ResultRow] = []
    for outcome in outcomes {
      let benchmark = "\(Benchmark.cacheHitRatio.rawValue).\(outcome.trace).\(abbreviated(outcome.size))"
      let lruPercent = outcome.hitRatio(lru.name) * 100
      let optimalPercent = outcome.hitRatio(optimal.name) * 100
      rows.append(
        ResultRow(
          benchmark: benchmark, implementation: lru.name, value: lruPercent, unit: .percent,
          notes: [outcome.summary]))
      rows.append(
        ResultRow(
          benchmark: benchmark, implementation: optimal.name, value: optimalPercent, unit: .percent,
          notes: ["Belady, bypass allowed"]))
      for candidate in candidates {
        let candidatePercent = outcome.hitRatio(candidate.name) * 100
        let capture = captureRatio(candidatePercent, lru: lruPercent, optimal: optimalPercent)
        rows.append(
          ResultRow(
            benchmark: benchmark, implementation: candidate.name, value: candidatePercent, unit: .percent,
            target: reference(outcome, run).map { .captureAtLeast($0, lru: lruPercent, optimal: optimalPercent) },
            notes: ["capture \(capture.map { format($0, decimals: 2) } ?? "undefined (LRU is optimal)")"]))
      }
    }
    return rows
  }

  private static func percent(_ ratio: Double) -> String { format(ratio * 100, decimals: 2) }

  private static func seconds(_ duration: Duration) -> String {
    "\(format(duration.nanoseconds / 1e9, decimals: 2)) s"
  }
}
