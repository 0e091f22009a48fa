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
        name: "loop", sizes: sizes, layerCheckSizes: checked,
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

  /// The real traces found in the folder given with `--traces`, and one line for each that is
  /// not there (or for the folder) saying what was skipped and why.
  static func real(_ run: RunConfiguration) -> (sources: [TraceSource], skipped: [String]) {
    let files = RealTrace.all.map(\.file).joined(separator: ", ")
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
      sources.append(
        TraceSource(
          name: trace.name,
          sizes: sizes,
          // A quick run checks the layer on the synthetic traces only: their replays are shorter.
          layerCheckSizes: run.isQuick ? [] : sizes,
          load: { try Trace.read(contentsOf: path, name: trace.name, summary: trace.summary) },
          lruReference: trace.lruReference,
          arcReference: trace.arcReference,
          start: trace.start
        )
      )
    }
    return (sources, skipped)
  }
}

/// A real trace that `--traces` may provide, with the figures published for it.
struct RealTrace: Sendable {
  /// The name in the report.
  var name: String
  /// The file name in the traces folder.
  var file: String
  var summary: String
  /// The cache sizes of a full run.
  var sizes: [Int]
  /// The cache sizes of a quick run; empty to leave the trace out of quick runs.
  var quickSizes: [Int]
  var lruReference: [Int: String]
  var arcReference: [Int: Double]
  /// When its replays start: P3's are the longest of all, OLTP's among the shortest.
  var start: Int

  /// The traces of the ARC paper (Megiddo and Modha, FAST 2003), with the figures of the traces
  /// folder's README: exact LRU, and ARC from the paper's Table IV.
  static let all = [
    RealTrace(
      name: "OLTP",
      file: "OLTP.lis",
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
      summary: "the ARC paper's P3 trace (a Windows NT workstation's disk, one day)",
      sizes: [32_768],
      quickSizes: [],
      lruReference: [32_768: "3.57"],
      arcReference: [:],
      start: 0
    ),
  ]
}
