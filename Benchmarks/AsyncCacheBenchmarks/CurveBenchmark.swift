import AsyncCache
import Foundation

/// `memory.curve`: the hit-ratio curve a memory layer estimates of itself
/// (`MemoryLayer.Statistics.hitRatioCurve`) against an exact LRU simulation of the same lookups,
/// at ¼×, ½×, 1×, 2× and 4× the layer's capacity.
///
/// Each trace is replayed through a `MemoryLayer` of the default configuration (adaptive policy,
/// automatic segments, the process's own hash seed): a lookup, then an insert when it missed.
/// The exact curve comes from every access's LRU stack distance, counted with a Fenwick tree (no
/// code shared with the layer's estimate). A row is a trace at one capacity: its value is the
/// largest gap, in points, over the five sizes, and the notes give both curves.
enum CurveBenchmark {
  /// The traces and capacities of a run: a Zipf trace always, the ARC paper's OLTP and P3 when
  /// `--traces` gives their folder.
  static func workloads(_ run: RunConfiguration) -> [(name: String, capacities: [Int], load: () throws -> Trace)] {
    var workloads: [(name: String, capacities: [Int], load: () throws -> Trace)] = [
      (
        "zipf099", run.isQuick ? [2_000] : [2_000, 10_000],
        { .zipf(exponent: 0.99, keyCount: 100_000, accesses: run.isQuick ? 300_000 : 2_000_000, seed: 0xC0_7E) }
      )
    ]
    guard let directory = run.tracesDirectory else { return workloads }
    for (name, capacities) in [
      ("OLTP", run.isQuick ? [2_000] : [1_000, 2_000, 5_000, 10_000]),
      // 262,144: a layer whose key sample is thinner than 1 in 100 (1 in 200).
      ("P3", run.isQuick ? [] : [8_192, 32_768, 131_072, 262_144]),
    ] where !capacities.isEmpty {
      let path = URL(fileURLWithPath: directory).appendingPathComponent("\(name).lis").path
      guard FileManager.default.fileExists(atPath: path) else { continue }
      workloads.append((name, capacities, { try Trace.read(contentsOf: path, name: name, summary: name) }))
    }
    return workloads
  }

  static func run(_ run: RunConfiguration) async throws -> [ResultRow] {
    var rows: [ResultRow] = []
    for workload in workloads(run) {
      let trace = try workload.load()
      let distances = StackDistances(trace)
      // Each capacity through the layer alone; the first also through a LoadingCache, whose
      // loads look a missing key up in the layer a second time (not a reuse). A load costs tens
      // of microseconds: P3 (3.7M misses at 8k entries) is left out, and OLTP from quick runs.
      let throughCache = workload.name == "zipf099" || (workload.name == "OLTP" && !run.isQuick)
      let replays =
        workload.capacities.map { ($0, false) } + workload.capacities.prefix(throughCache ? 1 : 0).map { ($0, true) }
      for (capacity, throughCache) in replays {
        let layer = try MemoryLayer<Int, Int>(configuration: .init(countLimit: capacity))
        if throughCache {
          let cache = try LoadingCache(layers: [layer], origin: ClosureFetcher { (key: Int) in key })
          for key in trace.keys { _ = try await cache.value(for: Int(key)) }
        } else {
          for key in trace.keys {
            let key = Int(key)
            if layer.value(for: key) == nil { try layer.insert(key, for: key) }
          }
        }
        let statistics = layer.statistics
        guard let curve = statistics.hitRatioCurve else {
          throw BenchmarkFailure("\(workload.name) at \(capacity): the layer estimated no curve")
        }
        var worst = 0.0
        var comparisons: [String] = []
        for point in curve.points {
          let exact = distances.hitRatio(capacity: point.capacity) * 100
          let estimated = point.hitRatio * 100
          worst = max(worst, abs(estimated - exact))
          comparisons.append(
            "\(format(point.scale, decimals: 2))x \(format(estimated, decimals: 2)) vs \(format(exact, decimals: 2))")
        }
        let sampled = Double(curve.sampledLookups) / Double(trace.keys.count) * 100
        rows.append(
          ResultRow(
            benchmark: Benchmark.memoryCurve.rawValue,
            implementation:
              "\(workload.name), \(abbreviated(capacity)) entries\(throughCache ? ", via LoadingCache" : ""): largest gap",
            value: worst, unit: .points, target: .valueAtMost(2),
            notes: [
              "estimated vs exact LRU, %: " + comparisons.joined(separator: ", "),
              throughCache
                ? "requests sampled, not the loads' second lookups"
                : "the layer's own hit ratio \(format(statistics.hitRatio * 100, decimals: 2))%",
            ]))
        rows.append(
          ResultRow(
            benchmark: Benchmark.memoryCurve.rawValue,
            implementation:
              "\(workload.name), \(abbreviated(capacity)) entries\(throughCache ? ", via LoadingCache" : ""): lookups sampled",
            value: sampled, unit: .percent, target: .valueAtMost(1),
            notes: ["\(curve.sampledLookups) of \(trace.keys.count) lookups"]))
      }
    }
    return rows
  }
}

/// Every access's LRU stack distance (how many other keys were used since its key's last use;
/// none for a first use), and from them LRU's hit ratio at any size.
struct StackDistances {
  /// How many accesses had each distance, by distance.
  private var counts: [Int]
  private var accesses: Int

  init(_ trace: Trace) {
    accesses = trace.keys.count
    var last = [Int](repeating: -1, count: trace.keySpace)
    // A Fenwick tree over the accesses' times: 1 at each key's latest access.
    var tree = [Int](repeating: 0, count: accesses + 1)
    func add(_ position: Int, _ delta: Int) {
      var index = position + 1
      while index <= accesses {
        tree[index] += delta
        index += index & -index
      }
    }
    func prefix(_ end: Int) -> Int {  // the sum over 0..<end
      var index = end
      var sum = 0
      while index > 0 {
        sum += tree[index]
        index -= index & -index
      }
      return sum
    }
    counts = []
    var live = 0
    for (time, key) in trace.keys.enumerated() {
      let key = Int(key)
      if last[key] >= 0 {
        let distance = live - prefix(last[key] + 1)
        if distance >= counts.count { counts += Array(repeating: 0, count: distance - counts.count + 1) }
        counts[distance] += 1
        add(last[key], -1)
      } else {
        live += 1
      }
      add(time, 1)
      last[key] = time
    }
  }

  /// The fraction of accesses an LRU cache of `capacity` keys hits: those at a distance below it.
  func hitRatio(capacity: Int) -> Double {
    Double(counts.prefix(capacity).reduce(0, +)) / Double(accesses)
  }
}
