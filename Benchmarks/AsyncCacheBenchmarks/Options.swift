/// The command line, parsed.
struct Options {
  /// Small sizes and few repetitions: a smoke run for CI.
  var isQuick = false
  /// Where to write the results as JSON, if anywhere.
  var jsonPath: String?
  /// Runs only the benchmarks whose name contains one of these; all of them when empty.
  var filters: [String] = []
  /// The folder of the real traces that `cache.hitRatio` replays (`OLTP.lis`, `P3.lis`), if any.
  var tracesDirectory: String?
  /// How many times `cache.hitRatio` replays each trace through the memory layer, if not the
  /// run's default.
  var hitRatioRuns: Int?
  /// Print the usage and exit.
  var showsHelp = false

  static let usage = """
    usage: AsyncCacheBenchmarks [--quick] [--json PATH] [--filter SUBSTRING]... [--traces DIR] [--runs N]

      --quick             small sizes and 3 repetitions (a smoke run, seconds)
      --json PATH         also write the results to PATH as a JSON array
      --filter SUBSTRING  run only the benchmarks whose name contains SUBSTRING (case-sensitive);
                          repeat it to run those that match any, still in the suite's order:
                          --filter redis --filter fleet. A filter that matches none is an error
      --traces DIR        replay the real traces in DIR (OLTP.lis, P3.lis from the ARC paper, and
                          the LIRS suite in lirs/) in cache.hitRatio too, e.g. --traces ../shared/traces
      --runs N            replay each trace N times through the memory layer in cache.hitRatio, each
                          in a fresh process (default 5; 2 with --quick)

    Build with optimizations: swift build -c release --product AsyncCacheBenchmarks
    """

  /// Parses the arguments after the program name.
  static func parse(_ arguments: [String]) throws(UsageError) -> Options {
    var options = Options()
    var remaining = arguments[...]
    while let argument = remaining.popFirst() {
      switch argument {
      case "--quick":
        options.isQuick = true
      case "--json":
        guard let path = remaining.popFirst() else { throw UsageError("--json needs a path") }
        options.jsonPath = path
      case "--filter":
        guard let filter = remaining.popFirst() else { throw UsageError("--filter needs a substring") }
        options.filters.append(filter)
      case "--traces":
        guard let directory = remaining.popFirst() else { throw UsageError("--traces needs a directory") }
        options.tracesDirectory = directory
      case "--runs":
        guard let text = remaining.popFirst(), let runs = Int(text), runs > 0 else {
          throw UsageError("--runs needs a positive number")
        }
        options.hitRatioRuns = runs
      case "--help", "-h":
        options.showsHelp = true
      default:
        throw UsageError("unknown argument '\(argument)'")
      }
    }
    return options
  }
}

/// A command line that does not parse.
struct UsageError: Error, CustomStringConvertible {
  var description: String

  init(_ description: String) {
    self.description = description
  }
}

/// The sizes of a run. The full run follows the benchmark specification; the quick one keeps
/// the shapes (key spaces, cache limits, waiter count) and shrinks the work.
struct RunConfiguration {
  var isQuick: Bool
  /// The folder of the real traces of the hit-ratio benchmark, from `--traces`; `nil` skips them.
  var tracesDirectory: String?
  /// Timed repetitions per measurement; the report gives their median.
  var repetitions: Int
  /// Keys held by the caches of the hit benchmarks.
  var hitKeyCount = 100_000
  /// Lookups per task and repetition in the hit benchmarks.
  var hitOperations: Int
  /// Operations per repetition of the Zipf mix.
  var zipfOperations: Int
  /// Keys the Zipf mix draws from.
  var zipfKeyCount = 100_000
  /// The count limit of the bounded caches in the Zipf mix.
  var zipfCountLimit = 10_000
  /// Entries of the big layer in the scaling benchmark.
  var scaleEntryCount: Int
  /// Entries of the small layer, which are also the hot keys of both.
  var scaleHotKeyCount = 1_000
  /// Lookups per repetition in the scaling benchmark.
  var scaleOperations: Int
  /// New keys inserted one at a time per repetition of the churn benchmark, into a full layer of
  /// ``scaleEntryCount`` entries.
  var churnInserts: Int
  /// Entries each child process inserts in the footprint benchmark.
  var footprintEntryCount: Int
  /// Child processes per implementation in the footprint benchmark.
  var footprintRepetitions: Int
  /// Concurrent requests for one key in the fan-in benchmark.
  var fanInWaiters = 10_000
  /// Rows in the database of the SQLite read benchmark, all read once per repetition.
  var sqliteReadRows = 10_000
  /// Rows written per repetition of the SQLite write benchmark.
  var sqliteWriteRows = 2_000
  /// Rows in the database the cold-start benchmark reopens.
  var coldStartRows = 100_000
  /// Files in the directory of the disk read benchmark, all read once per repetition.
  var diskReadFiles = 2_000
  /// Items of the gallery walk, one every 50 ms, walked once per contender.
  var galleryItems = 200
  /// Index moves of the cancellation benchmark per contender, over all repetitions.
  var cancelMoves = 1_000
  /// Urgent requests per contender of the urgent-latency benchmark, over all repetitions.
  var urgentRequests = 210
  /// Keys the Zipf traces of the hit-ratio benchmark draw from.
  var hitRatioKeyCount = 1_000_000
  /// Accesses of each Zipf trace of the hit-ratio benchmark, scans included.
  var hitRatioAccesses = 4_000_000
  /// Keys of the hit-ratio loop trace, walked ``hitRatioLoopPasses`` times.
  var hitRatioLoopKeyCount = 120_000
  /// Passes over the loop: the first is all compulsory misses, the rest show what a policy keeps.
  var hitRatioLoopPasses = 10
  /// Zipf draws between two scans of the Zipf+scans trace.
  var hitRatioAccessesBetweenScans = 80_000
  /// New, never repeated keys per scan of the Zipf+scans trace: longer than the 10k cache it flushes.
  var hitRatioScanLength = 20_000
  /// The cache sizes (in keys) every hit-ratio trace is replayed at.
  var hitRatioCacheSizes = [1_000, 10_000, 50_000, 100_000]
  /// How many times each trace is replayed through the memory layer, each in a fresh process.
  var hitRatioRuns = 5
  /// Round trips per repetition of the Redis single-read benchmarks.
  var redisReads = 20_000
  /// 100-key bulk reads per repetition of the Redis bulk benchmark.
  var redisBulkReads = 2_000
  /// Refreshes of the 1 MB resource per repetition of the HTTP revalidation benchmark.
  var httpRefreshes = 40
  /// Entries of the tag invalidation benchmark, a tenth of them under each of ten tags.
  var tagEntryCount = 1_000_000
  /// Invalidations per repetition of the tag invalidation benchmark.
  var tagInvalidations = 1_000
  /// How long the server is down in each repetition of the Redis outage benchmark.
  var redisOutage: Duration = .seconds(5)
  /// Repetitions (outages) of the Redis outage benchmark.
  var redisOutages = 3

  static let full = RunConfiguration(
    isQuick: false,
    repetitions: 7,
    hitOperations: 1_000_000,
    zipfOperations: 1_000_000,
    scaleEntryCount: 1_000_000,
    scaleOperations: 1_000_000,
    churnInserts: 1_000_000,
    footprintEntryCount: 1_000_000,
    footprintRepetitions: 3
  )

  static let quick = RunConfiguration(
    isQuick: true,
    repetitions: 3,
    hitOperations: 200_000,
    // Fewer would insert fewer distinct keys than the count limit, and nothing would be evicted.
    zipfOperations: 1_000_000,
    scaleEntryCount: 1_000_000,
    scaleOperations: 200_000,
    churnInserts: 200_000,
    // The target is set at 1M entries; fewer would round the power-of-two tables differently.
    footprintEntryCount: 1_000_000,
    footprintRepetitions: 1,
    sqliteReadRows: 2_000,
    sqliteWriteRows: 500,
    coldStartRows: 20_000,
    diskReadFiles: 500,
    galleryItems: 40,
    cancelMoves: 102,
    urgentRequests: 36,
    // A tenth of the keys and a fortieth of the accesses (the memory layer replays about a
    // million accesses a second); the loop still outgrows the larger cache.
    hitRatioKeyCount: 100_000,
    hitRatioAccesses: 100_000,
    hitRatioLoopKeyCount: 12_000,
    hitRatioCacheSizes: [1_000, 10_000],
    hitRatioRuns: 2,
    redisReads: 2_000,
    redisBulkReads: 200,
    tagEntryCount: 100_000,
    tagInvalidations: 200,
    redisOutage: .seconds(1),
    redisOutages: 1
  )
}
