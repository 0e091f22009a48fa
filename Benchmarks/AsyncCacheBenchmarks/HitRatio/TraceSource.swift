import Foundation

/// A trace that `cache.hitRatio` replays, the cache sizes it is replayed at, and the figures its
/// replays must reproduce.
struct TraceSource: Sendable {
  /// The trace's name in the report, e.g. `zipf099` or `OLTP`.
  var name: String
  /// The cache sizes, in keys, that the trace is replayed at.
  var sizes: [Int]
  /// The sizes at which the memory layer in exact-LRU mode is replayed too, to check that it
  /// scores exactly LRU's hits: each such replay costs as much as the default policy's.
  var layerCheckSizes: [Int]
  /// Builds or reads the trace; called when the first replay of it starts.
  var load: @Sendable () throws -> Trace
  /// Exact LRU hit ratios, in percent with two decimals as published, by cache size: an exact
  /// replay prints the same digits.
  var lruReference: [Int: String] = [:]
  /// Published ARC hit ratios in percent, by cache size: ours may differ by implementation
  /// details the paper leaves open, within ``HitRatioBenchmark/arcTolerance``.
  var arcReference: [Int: Double] = [:]
  /// Published hit ratios of Belady's optimal policy (with bypass), in percent with two
  /// decimals, by cache size: an exact replay prints the same digits.
  var optimalReference: [Int: String] = [:]
  /// When the trace's replays start relative to the others' (lower first): the longest jobs
  /// start first, so that the run does not end waiting for one long replay while a core idles.
  var start = 1
  /// For the loop trace: its key count and passes, whose LRU and OPT hits are known in closed form.
  var loop: (keyCount: Int, passes: Int)?

  /// The seeded synthetic traces, at the run's sizes.
  static func synthetic(_ run: RunConfiguration) -> [TraceSource] {
    let sizes = run.hitRatioCacheSizes
    // A full run checks the layer against LRU at every size of the real traces and, of the
    // synthetic ones, two at their largest size (the layer's replays are the run's slowest:
    // about a microsecond an access, against tens of nanoseconds for LRU), a quick run all at
    // the smallest.
    let checked = [run.isQuick ? sizes.first ?? 0 : sizes.last ?? 0]
    let quickOnly = run.isQuick ? checked : []
    return [
      TraceSource(name: "zipf080", sizes: sizes, layerCheckSizes: quickOnly) {
        .zipf(exponent: 0.8, keyCount: run.hitRatioKeyCount, accesses: run.hitRatioAccesses, seed: 0x5A1)
      },
      TraceSource(name: "zipf099", sizes: sizes, layerCheckSizes: checked) {
        .zipf(exponent: 0.99, keyCount: run.hitRatioKeyCount, accesses: run.hitRatioAccesses, seed: 0x5A2)
      },
      TraceSource(
        name: "loop\(abbreviated(run.hitRatioLoopKeyCount))", sizes: sizes, layerCheckSizes: checked,
        load: { .loop(keyCount: run.hitRatioLoopKeyCount, passes: run.hitRatioLoopPasses, seed: 0x5A3) },
        loop: (run.hitRatioLoopKeyCount, run.hitRatioLoopPasses)
      ),
      TraceSource(name: "zipf099scans", sizes: sizes, layerCheckSizes: quickOnly) {
        .zipfWithScans(
          exponent: 0.99,
          keyCount: run.hitRatioKeyCount,
          accesses: run.hitRatioAccesses,
          accessesBetweenScans: run.hitRatioAccessesBetweenScans,
          scanLength: run.hitRatioScanLength,
          seed: 0x5A4
        )
      },
      TraceSource(name: "recency", sizes: sizes, layerCheckSizes: quickOnly) {
        .recencyBiased(accesses: run.hitRatioAccesses, reads: 4, maximumGap: 32_768, seed: 0x5A5)
      },
      TraceSource(name: "shifting099", sizes: sizes, layerCheckSizes: quickOnly) {
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

  /// Every trace of a run: the synthetic ones, then the real ones found with `--traces`.
  static func all(_ run: RunConfiguration) -> (sources: [TraceSource], skipped: [String]) {
    let (real, skipped) = real(run)
    return (synthetic(run) + real, skipped)
  }

  /// The real traces found in the folder given with `--traces`, and one line for each that is
  /// not there (or for the folder) saying what was skipped and why.
  static func real(_ run: RunConfiguration) -> (sources: [TraceSource], skipped: [String]) {
    let files = RealTrace.arcPaper.map(\.file).joined(separator: ", ") + " and the LIRS suite (lirs/*.trace)"
    guard let directory = run.tracesDirectory else {
      return (
        [], ["real traces (\(files)) skipped: no folder given with --traces DIR (e.g. --traces ../shared/traces)"]
      )
    }
    var isDirectory: ObjCBool = false
    guard FileManager.default.fileExists(atPath: directory, isDirectory: &isDirectory), isDirectory.boolValue else {
      return ([], ["real traces (\(files)) skipped: the folder \(directory) given with --traces does not exist"])
    }
    var sources: [TraceSource] = []
    var skipped: [String] = []
    for trace in RealTrace.all {
      let sizes = run.isQuick ? trace.quickSizes : trace.sizes
      guard !sizes.isEmpty else { continue }
      let path = URL(fileURLWithPath: directory).appendingPathComponent(trace.file).path
      guard FileManager.default.fileExists(atPath: path) else {
        skipped.append("\(trace.name) skipped: \(path) does not exist (in the folder given with --traces)")
        continue
      }
      let load: @Sendable () throws -> Trace =
        switch trace.format {
        case .lis: { try Trace.read(contentsOf: path, name: trace.name, summary: trace.summary) }
        case .lirs: { try Trace.readLIRS(contentsOf: path, name: trace.name, summary: trace.summary) }
        }
      sources.append(
        TraceSource(
          name: trace.name,
          sizes: sizes,
          // A quick run checks the layer on the synthetic traces only: their replays are shorter.
          layerCheckSizes: run.isQuick ? [] : sizes,
          load: load,
          lruReference: trace.lruReference,
          arcReference: trace.arcReference,
          optimalReference: trace.optimalReference,
          start: trace.start
        )
      )
    }
    return (sources, skipped)
  }
}

/// A real trace that `--traces` may provide, with the figures published for it.
struct RealTrace: Sendable {
  /// How a trace file is written.
  enum Format: Sendable {
    /// The ARC paper's block traces: `start count ignored requestNumber` per line.
    case lis
    /// The LIRS suite's: one key per line (see ``Trace/readLIRS(contentsOf:name:summary:)``).
    case lirs
  }

  /// The name in the report.
  var name: String
  /// The file's path in the traces folder.
  var file: String
  var format = Format.lis
  var summary: String
  /// The cache sizes of a full run.
  var sizes: [Int]
  /// The cache sizes of a quick run; empty to leave the trace out of quick runs.
  var quickSizes: [Int]
  var lruReference: [Int: String]
  var arcReference: [Int: Double]
  var optimalReference: [Int: String] = [:]
  /// When its replays start: P3's are the longest of all, OLTP's among the shortest.
  var start: Int

  /// Every real trace: the ARC paper's, then the LIRS suite's.
  static let all = arcPaper + lirsSuite

  /// The traces of the ARC paper (Megiddo and Modha, FAST 2003), with the figures of the traces
  /// folder's README: exact LRU, and ARC from the paper's Table IV.
  static let arcPaper = [
    RealTrace(
      name: "OLTP",
      file: "OLTP.lis",
      format: .lis,
      summary: "the ARC paper's OLTP trace (a CODASYL database, one hour)",
      // The README's sizes, then the suite's larger ones; the trace has 186,880 blocks.
      sizes: [1_000, 2_000, 5_000, 10_000, 15_000, 50_000, 100_000],
      // Where ARC is furthest from LRU: one replay checks both published figures.
      quickSizes: [1_000],
      lruReference: [1_000: "32.83", 2_000: "42.47", 5_000: "53.65", 10_000: "60.70", 15_000: "64.63"],
      arcReference: [1_000: 38.93, 2_000: 46.08, 5_000: 55.25, 10_000: 61.87, 15_000: 65.40],
      start: 2
    ),
    RealTrace(
      name: "P3",
      file: "P3.lis",
      format: .lis,
      summary: "the ARC paper's P3 trace (a Windows NT workstation's disk, one day)",
      // The README's size, then the suite's larger one, where the storage traces test a
      // large cache.
      sizes: [32_768, 100_000],
      quickSizes: [],
      lruReference: [32_768: "3.57"],
      arcReference: [:],
      start: 0
    ),
  ]

  /// The LIRS suite (`lirs/` in the traces folder; Jiang and Zhang, SIGMETRICS 2002, and Zhong,
  /// Zhao and Jiang, SYSTOR 2021), at the cache sizes its authors use, with the README's exact
  /// LRU and OPT figures and its ARC figures. A quick run replays each at its middle size.
  static let lirsSuite = [
    lirs(
      "gli", "a database (postgres) join trace", [250, 1_000, 2_000],
      lru: ["0.91", "11.21", "57.41"], arc: [1.38, 21.31, 57.41], opt: ["17.71", "53.15", "57.96"]),
    lirs(
      "loop", "1,011 keys read in a cycle", [256, 512, 1_000],
      lru: ["0.00", "0.00", "0.00"], arc: [0.00, 0.00, 0.00], opt: ["25.27", "50.54", "98.71"]),
    lirs(
      "multi1", "cpp and cs run together", [200, 800, 1_600],
      lru: ["40.72", "47.77", "56.96"], arc: [47.45, 49.63, 77.55], opt: ["51.22", "66.36", "83.57"]),
    lirs(
      "multi2", "cpp, cs and postgres run together", [400, 1_200, 2_000],
      lru: ["33.79", "48.10", "49.00"], arc: [38.74, 50.80, 64.26], opt: ["51.72", "65.20", "74.65"]),
    lirs(
      "multi3", "cpp, gli, postgres and sprite run together", [400, 1_600, 3_200],
      lru: ["27.38", "44.19", "55.75"], arc: [35.59, 46.54, 66.30], opt: ["47.25", "64.23", "74.26"]),
    lirs(
      "cs", "cscope queries over a source tree (loops)", [100, 400, 1_000],
      lru: ["1.83", "1.83", "1.83"], arc: [1.83, 1.83, 1.83], opt: ["7.73", "25.42", "60.82"]),
    lirs(
      "cpp", "the GNU C preprocessor", [50, 100, 200],
      lru: ["9.26", "69.71", "82.16"], arc: [33.82, 77.04, 84.97], opt: ["63.46", "82.60", "86.00"]),
    lirs(
      "ps", "postgres queries", [100, 500, 1_500],
      lru: ["7.37", "48.55", "52.58"], arc: [9.34, 52.59, 52.59], opt: ["31.34", "58.12", "70.49"]),
    lirs(
      "sprite", "the Sprite network file system's requests", [100, 200, 500],
      lru: ["21.58", "39.88", "78.30"], arc: [25.66, 42.78, 77.37], opt: ["50.91", "68.90", "87.89"]),
    lirs(
      "2_pools", "two pools of keys, one read far more often", [100, 250, 450],
      lru: ["21.95", "41.71", "50.27"], arc: [46.88, 50.63, 51.62], opt: ["50.76", "57.93", "62.06"]),
    lirs(
      "scan", "LIRS2's w110: scans", [500, 1_000, 2_000],
      lru: ["0.00", "0.00", "0.00"], arc: [0.00, 0.00, 0.00], opt: ["23.99", "47.98", "95.95"]),
    lirs(
      "zigzag", "LIRS2's w111: sweeps up and down a range", [500, 1_000, 2_000],
      lru: ["23.99", "48.03", "96.10"], arc: [23.01, 46.11, 96.10], opt: ["24.04", "48.08", "96.13"]),
    lirs(
      "backf", "LIRS2: sweeps forward and back over 750 keys", [200, 400],
      lru: ["24.44", "48.89"], arc: [22.23, 45.01], opt: ["24.44", "48.89"]),
  ]

  /// A trace of the LIRS suite with its README's figures, one per size, in the order of `sizes`.
  private static func lirs(
    _ name: String, _ summary: String, _ sizes: [Int], lru: [String], arc: [Double], opt: [String]
  ) -> RealTrace {
    RealTrace(
      name: name,
      file: "lirs/\(name).trace",
      format: .lirs,
      summary: "LIRS suite: \(summary)",
      sizes: sizes,
      quickSizes: [sizes[sizes.count / 2]],
      lruReference: Dictionary(uniqueKeysWithValues: zip(sizes, lru)),
      arcReference: Dictionary(uniqueKeysWithValues: zip(sizes, arc)),
      optimalReference: Dictionary(uniqueKeysWithValues: zip(sizes, opt)),
      start: 3
    )
  }
}
