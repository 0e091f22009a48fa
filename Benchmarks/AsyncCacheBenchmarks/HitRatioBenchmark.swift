import AsyncCache
import Foundation

/// `cache.hitRatio`: replays traces through the reference policies (exact LRU, ARC and Belady's
/// optimal policy) and, several times each in fresh processes, through the memory layer's
/// fixed-window W-TinyLFU and its default policy, at several cache sizes; holds the default's
/// worst run to within ``allowedGap`` points of the best of LRU, ARC and W-TinyLFU on every row,
/// and its runs to within ``allowedSpread`` points of each other.
///
/// The traces are seeded synthetic ones and, when `--traces DIR` names their folder, the ARC
/// paper's OLTP and P3 and the LIRS suite, whose published figures the replays must reproduce
/// (LRU and OPT exactly, ARC within ``arcTolerance``). The reference replays are deterministic
/// and run once, concurrently, in this process. The layer's replays are not: each is one draw of
/// the admission seed and the process's hash seed, as a user gets them (see ``LayerReplays``), so
/// the report gives the default's worst, median and best run, and holds W-TinyLFU to its median.
enum HitRatioBenchmark {
  /// How many points the default policy's worst run may fall below the best of ``anchors``.
  static let allowedGap = 1.0
  /// How many points the default policy's best and worst runs may differ by.
  static let allowedSpread = 2.0
  /// How far, in points, our ARC may be from the published figures: the paper leaves details
  /// open (e.g. whether `p` is a real number), which move the hit ratio by a few hundredths.
  static let arcTolerance = 0.15

  static let lru = SimulatedPolicy("LRU") { trace, capacity in
    LRUSimulator(capacity: capacity, keySpace: trace.keySpace)
  }
  static let arc = SimulatedPolicy("ARC") { trace, capacity in
    ARCSimulator(capacity: capacity, keySpace: trace.keySpace)
  }
  static let optimal = SimulatedPolicy("OPT") { trace, capacity in
    OptimalSimulator(trace: trace, capacity: capacity)
  }
  /// The library's layer in exact-LRU mode: must score exactly ``lru``'s hits.
  static let memoryLayerLRU = SimulatedPolicy("MemoryLayer LRU") { _, capacity in
    MemoryLayerSimulator(
      configuration: .init(countLimit: capacity, segmentCount: 1, evictionPolicy: .leastRecentlyUsed))
  }

  /// The deterministic policies replayed once per row in this process, the slowest first so
  /// that the last jobs are short.
  static let references = [optimal, arc, lru]

  /// Runs the benchmark.
  ///
  /// - Throws: ``BenchmarkFailure`` when a self-check fails, a trace file is malformed, a child
  ///   replay fails, a hit ratio is out of `0...1`, a policy beats the optimal one, the memory
  ///   layer in LRU mode disagrees with LRU, LRU or OPT misses a published figure or ARC strays
  ///   from one, or the loop trace does not give its known hits. The table is printed first.
  static func run(_ configuration: RunConfiguration) async throws -> [ResultRow] {
    let clock = ContinuousClock()
    let start = clock.now
    try HitRatioSelfCheck.run()
    let selfCheckTime = start.duration(to: clock.now)
    let (sources, skipped) = TraceSource.all(configuration)
    for line in skipped { print("cache.hitRatio: \(line)") }
    let width = ProcessInfo.processInfo.activeProcessorCount

    // The deterministic replays, in this process.
    let order = sources.indices.sorted { (sources[$0].start, $0) < (sources[$1].start, $1) }
    let jobs = order.flatMap { source in
      let trace = sources[source]
      let checks = trace.layerCheckSizes.map { ReplayJob(source: source, size: $0, policy: memoryLayerLRU) }
      return checks
        + references.flatMap { policy in trace.sizes.map { ReplayJob(source: source, size: $0, policy: policy) } }
    }
    let replays = try await replay(jobs, of: sources, width: width)
    let referenceTime = start.duration(to: clock.now)

    // The layer's replays, each in a process of its own.
    let runs = configuration.hitRatioRuns
    let layerJobs = order.flatMap { source in
      (0..<runs).flatMap { run in
        LayerReplays.Policy.allCases.map { policy in
          LayerReplays.Job(source: sources[source].name, policy: policy, sizes: sources[source].sizes, run: run)
        }
      }
    }
    let layerStart = clock.now
    let layerResults = try LayerReplays.run(layerJobs, configuration, width: width)
    let layerTime = layerStart.duration(to: clock.now)

    let outcomes = Outcome.group(replays, layerResults, of: sources)
    var failures: [String] = []
    // A child builds or reads its trace itself: it must have replayed the same accesses.
    for result in layerResults {
      guard let source = sources.firstIndex(where: { $0.name == result.job.source }),
        let accesses = replays.traces[source]?.accesses, accesses != result.accesses
      else { continue }
      failures.append(
        "the \(result.job.policy.rawValue) replay of \(result.job.source) read \(result.accesses) accesses, "
          + "this process \(accesses)")
    }
    for outcome in outcomes {
      failures += check(outcome, sources[outcome.source])
      checksumSink.wrappingAdd(outcome.hits.values.reduce(0, &+), ordering: .relaxed)
    }
    print(renderMatrix(outcomes, runs: runs))
    let checked = outcomes.filter { $0.hits[memoryLayerLRU.name] != nil }
    if !checked.isEmpty, !failures.contains(where: { $0.hasPrefix("MemoryLayer") }) {
      print(
        "cache.hitRatio: MemoryLayer(segmentCount: 1, evictionPolicy: .leastRecentlyUsed) scored exactly LRU's hits "
          + "on \(checked.map { "\($0.trace) at \($0.size)" }.joined(separator: ", "))")
    }
    let layerSeconds = layerResults.reduce(into: [LayerReplays.Policy: Duration]()) { times, result in
      times[result.job.policy, default: .zero] += result.time
    }
    print(
      "cache.hitRatio: \(jobs.count) reference replays on \(width) workers in \(seconds(referenceTime)) "
        + "(self-checks \(seconds(selfCheckTime)), traces built or read in \(seconds(replays.loadTime)); "
        + (references + [memoryLayerLRU]).map { "\($0.name) \(seconds(replays.time(of: $0.name)))" }
        .joined(separator: ", ")
        + "), then \(layerJobs.count) layer replays in child processes in \(seconds(layerTime)) ("
        + LayerReplays.Policy.allCases.map { "\($0.rawValue) \(seconds(layerSeconds[$0] ?? .zero))" }
        .joined(separator: ", ")
        + ", summed over processes); total \(seconds(start.duration(to: clock.now)))"
    )
    guard failures.isEmpty else { throw BenchmarkFailure(failures.joined(separator: "; ")) }
    return rows(outcomes)
  }

  // MARK: Replaying

  /// One replay: a policy over a trace at one cache size.
  struct ReplayJob: Sendable {
    /// The index of the trace in the run's sources.
    var source: Int
    var size: Int
    var policy: SimulatedPolicy
  }

  /// What the replays of a run found.
  struct Replays {
    /// Hits by source, size and policy name.
    var hits: [Int: [Int: [String: Int]]] = [:]
    /// The accesses and summary of each source's trace.
    var traces: [Int: (accesses: Int, summary: String)] = [:]
    /// Time spent in each policy's replays, summed over the workers.
    var times: [String: Duration] = [:]
    /// Time spent building and reading traces.
    var loadTime = Duration.zero

    func time(of policy: String) -> Duration { times[policy] ?? .zero }
  }

  /// Runs the jobs, at most `width` at a time, in the order given; each trace is loaded when its
  /// first job starts and dropped when its last job ends.
  private static func replay(_ jobs: [ReplayJob], of sources: [TraceSource], width: Int) async throws -> Replays {
    let loader = TraceLoader(sources: sources, jobs: jobs)
    var replays = Replays()
    try await withThrowingTaskGroup(of: (ReplayJob, hits: Int, time: Duration, accesses: Int, summary: String).self) {
      group in
      var pending = jobs[...]
      func start(_ job: ReplayJob) {
        group.addTask {
          let trace = try await loader.trace(job.source)
          let clock = ContinuousClock()
          let start = clock.now
          let hits = job.policy.hits(trace, job.size)
          let time = start.duration(to: clock.now)
          await loader.finish(job.source)
          return (job, hits, time, trace.keys.count, trace.summary)
        }
      }
      for _ in 0..<max(width, 1) {
        if let job = pending.popFirst() { start(job) }
      }
      while let (job, hits, time, accesses, summary) = try await group.next() {
        replays.hits[job.source, default: [:]][job.size, default: [:]][job.policy.name] = hits
        replays.traces[job.source] = (accesses, summary)
        replays.times[job.policy.name, default: .zero] += time
        if let job = pending.popFirst() { start(job) }
      }
    }
    replays.loadTime = await loader.loadTime
    return replays
  }

  // MARK: Checking

  /// One trace at one cache size: the hits of every reference policy, by name, and of every run
  /// of the layer's policies.
  struct Outcome {
    var source: Int
    var trace: String
    var summary: String
    var size: Int
    var accesses: Int
    var hits: [String: Int]
    /// The default policy's hits, one per run, in the order the runs ended.
    var defaultRuns: [Int]
    /// The fixed-window W-TinyLFU's hits, one per run.
    var windowTinyLFURuns: [Int]

    /// In percent.
    func percent(_ hits: Int) -> Double { accesses == 0 ? 0 : Double(hits) / Double(accesses) * 100 }
    func hitRatio(_ policy: SimulatedPolicy) -> Double { percent(hits[policy.name] ?? 0) }

    /// The default's runs, in percent, worst first.
    var defaultPercents: [Double] { defaultRuns.sorted().map(percent) }
    /// W-TinyLFU's runs, in percent, worst first.
    var windowTinyLFUPercents: [Double] { windowTinyLFURuns.sorted().map(percent) }
    /// W-TinyLFU's median run: the anchor's figure.
    var windowTinyLFU: Double { median(windowTinyLFUPercents) }

    /// The best of LRU, ARC and W-TinyLFU's median, and its name.
    var best: (name: String, percent: Double) {
      [
        ("LRU", hitRatio(HitRatioBenchmark.lru)), ("ARC", hitRatio(HitRatioBenchmark.arc)),
        ("W-TinyLFU", windowTinyLFU),
      ]
      .max { $0.1 < $1.1 } ?? ("LRU", 0)
    }
    var worst: Double { defaultPercents.first ?? 0 }
    var spread: Double { (defaultPercents.last ?? 0) - worst }
    /// The default's worst run minus the best anchor, in points.
    var gap: Double { worst - best.percent }
    var passes: Bool { gap >= -HitRatioBenchmark.allowedGap && spread <= HitRatioBenchmark.allowedSpread }

    static func group(_ replays: Replays, _ layer: [LayerReplays.Result], of sources: [TraceSource]) -> [Outcome] {
      sources.indices.flatMap { source in
        let results = layer.filter { $0.job.source == sources[source].name }
        return sources[source].sizes.map { size in
          let trace = replays.traces[source] ?? (results.first?.accesses ?? 0, "")
          func runs(_ policy: LayerReplays.Policy) -> [Int] {
            results.filter { $0.job.policy == policy }.compactMap { $0.hits[size] }
          }
          return Outcome(
            source: source, trace: sources[source].name, summary: trace.summary, size: size,
            accesses: trace.accesses, hits: replays.hits[source]?[size] ?? [:],
            defaultRuns: runs(.defaultPolicy), windowTinyLFURuns: runs(.windowTinyLFU))
        }
      }
    }
  }

  /// What is wrong with the outcome: nothing, when every replay is consistent and every
  /// published figure is reproduced.
  private static func check(_ outcome: Outcome, _ source: TraceSource) -> [String] {
    let label = "\(outcome.trace) at \(outcome.size)"
    var failures: [String] = []
    var all = outcome.hits.map { ($0.key, $0.value) }
    all += outcome.defaultRuns.map { ("default", $0) } + outcome.windowTinyLFURuns.map { ("W-TinyLFU", $0) }
    for (policy, hits) in all where !(0...outcome.accesses).contains(hits) {
      failures.append("\(policy) scored \(hits) hits in \(outcome.accesses) accesses on \(label)")
    }
    let optimalHits = outcome.hits[optimal.name] ?? 0
    for (policy, hits) in all.sorted(by: { $0.0 < $1.0 }) where hits > optimalHits {
      failures.append("\(policy) scored \(hits) hits on \(label), more than the optimal \(optimalHits)")
    }
    let lruHits = outcome.hits[lru.name] ?? 0
    if let layerHits = outcome.hits[memoryLayerLRU.name], layerHits != lruHits {
      failures.append("MemoryLayer with one segment scored \(layerHits) hits on \(label), exact LRU \(lruHits)")
    }
    for (policy, published) in [
      (lru, source.lruReference[outcome.size]), (optimal, source.optimalReference[outcome.size]),
    ] {
      guard let published, let figure = Double(published) else { continue }
      // Exact up to the rounding of the last digit: the README rounds a half up (50755 hits in
      // 100k is its 50.76), `format` to even.
      let measured = outcome.hitRatio(policy)
      if abs(measured - figure) > 0.005 + 1e-9 {
        failures.append(
          "\(policy.name) on \(label) scored \(format(measured, decimals: 3))%, the published figure is \(published)%")
      }
    }
    if let published = source.arcReference[outcome.size] {
      let measured = outcome.hitRatio(arc)
      if abs(measured - published) > arcTolerance {
        failures.append(
          "ARC on \(label) scored \(format(measured, decimals: 2))%, more than \(format(arcTolerance, decimals: 2)) "
            + "points from the published \(format(published, decimals: 2))%")
      }
    }
    if let (keys, passes) = source.loop {
      // LRU misses everything while the loop is longer than the cache; OPT keeps `size` keys and
      // hits them on every pass after the first.
      let expectedLRU = outcome.size < keys ? 0 : keys * (passes - 1)
      let expectedOptimal = min(outcome.size, keys) * (passes - 1)
      if lruHits != expectedLRU || optimalHits != expectedOptimal {
        failures.append(
          "on \(label), LRU scored \(lruHits) hits (expected \(expectedLRU)) and OPT \(optimalHits) "
            + "(expected \(expectedOptimal))")
      }
    }
    return failures
  }

  // MARK: Reporting

  /// One row per trace and size: the references, W-TinyLFU's median (and range), the default's
  /// worst, median and best run, its spread, its worst run's distance to the best anchor, and
  /// whether it passes; then the traces, the published figures and a summary.
  private static func renderMatrix(_ outcomes: [Outcome], runs: Int) -> String {
    let header = [
      "trace", "size", "LRU", "ARC", "W-TinyLFU (min-max)", "default min", "median", "max", "spread", "OPT",
      "min - best", "result",
    ]
    var lines = [header]
    for outcome in outcomes {
      let runs = outcome.defaultPercents
      let anchor = outcome.windowTinyLFUPercents
      let gap = outcome.gap
      lines.append(
        [
          outcome.trace, String(outcome.size), format(outcome.hitRatio(lru), decimals: 2),
          format(outcome.hitRatio(arc), decimals: 2),
          "\(format(outcome.windowTinyLFU, decimals: 2)) (\(format(anchor.first ?? 0, decimals: 2))-"
            + "\(format(anchor.last ?? 0, decimals: 2)))",
          format(runs.first ?? 0, decimals: 2), format(median(runs), decimals: 2), format(runs.last ?? 0, decimals: 2),
          format(outcome.spread, decimals: 2), format(outcome.hitRatio(optimal), decimals: 2),
          "\(gap >= 0 ? "+" : "")\(format(gap, decimals: 2)) (\(outcome.best.name))",
          outcome.passes ? "PASS" : "MISSED",
        ])
    }
    let widths = header.indices.map { column in lines.map { $0[column].count }.max() ?? 0 }
    let rendered = lines.map { cells in
      cells.enumerated().map { column, cell in
        let padding = String(repeating: " ", count: widths[column] - cell.count)
        return column == 0 ? cell + padding : padding + cell
      }
      .joined(separator: "  ")
    }
    let title =
      "cache.hitRatio: hit ratios (%); default = MemoryLayer(configuration: .init(countLimit:)), \(runs) runs per "
      + "row, each in a fresh process (its own hash seed and admission seed); W-TinyLFU = the layer's fixed "
      + "window in one segment, the median of \(runs) such runs; best = max(LRU, ARC, W-TinyLFU); PASS: the "
      + "default's worst run within \(format(allowedGap, decimals: 0)) point of the best and max - min <= "
      + "\(format(allowedSpread, decimals: 0)); OPT is Belady's, bypass allowed"
    let traces = outcomes.reduce(into: [String]()) { summaries, outcome in
      let line = "  \(outcome.trace): \(outcome.summary)"
      if !summaries.contains(line) { summaries.append(line) }
    }
    let rule = String(repeating: "-", count: rendered[0].count)
    let passing = outcomes.count { $0.passes }
    let worst = outcomes.min { $0.gap < $1.gap }
    let widest = outcomes.max { $0.spread < $1.spread }
    var summary = ["cache.hitRatio: \(passing) of \(outcomes.count) rows pass"]
    if let worst, let widest {
      summary.append(
        "the worst run's largest gap \(format(worst.gap, decimals: 2)) (\(worst.trace) at \(worst.size)), the largest "
          + "spread \(format(widest.spread, decimals: 2)) (\(widest.trace) at \(widest.size)); "
          + "\(outcomes.count { $0.gap >= -3 && $0.spread <= 3 }) rows within 3 points and a spread of 3")
    }
    return ([title] + traces + [rendered[0], rule] + rendered.dropFirst() + [rule] + summary)
      .joined(separator: "\n")
  }

  /// The report's rows: per trace and size, the default policy's worst run held to the best
  /// anchor and its runs to their spread, then the other policies for reference.
  private static func rows(_ outcomes: [Outcome]) -> [ResultRow] {
    outcomes.flatMap { outcome in
      let benchmark = "\(Benchmark.cacheHitRatio.rawValue).\(outcome.trace).\(outcome.size)"
      let best = outcome.best
      let runs = outcome.defaultPercents
      let project = ResultRow(
        benchmark: benchmark, implementation: "MemoryLayer default (worst run)", value: outcome.worst,
        unit: .percent,
        target: .robustlyWithinPointsOf(allowedGap, best: best.percent, spread: allowedSpread),
        samples: runs,
        notes: [
          "median \(format(median(runs), decimals: 2))%, best run \(format(runs.last ?? 0, decimals: 2))%",
          "best \(best.name) \(format(best.percent, decimals: 2))%", outcome.summary,
        ])
      let anchor = ResultRow(
        benchmark: benchmark, implementation: "W-TinyLFU (median run)", value: outcome.windowTinyLFU, unit: .percent,
        samples: outcome.windowTinyLFUPercents)
      let references = [lru, arc, optimal].map { policy in
        ResultRow(
          benchmark: benchmark, implementation: policy.name, value: outcome.hitRatio(policy), unit: .percent,
          notes: policy.name == optimal.name ? ["Belady, bypass allowed"] : [])
      }
      return [project, anchor] + references
    }
  }

  private static func seconds(_ duration: Duration) -> String {
    "\(format(duration.nanoseconds / 1e9, decimals: 1)) s"
  }
}

/// The median of values sorted in ascending order; 0 for none.
func median(_ sorted: [Double]) -> Double {
  guard !sorted.isEmpty else { return 0 }
  let middle = sorted.count / 2
  return sorted.count % 2 == 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2
}

/// The traces of a run's replay jobs: each is loaded when a job first asks for it and dropped
/// when its last job is done, so that only the traces of running jobs are in memory.
private actor TraceLoader {
  private let sources: [TraceSource]
  /// Jobs not yet done, by source.
  private var unfinished: [Int: Int]
  private var loads: [Int: Task<(trace: Trace, time: Duration), any Error>] = [:]
  /// Time spent loading, summed over the traces.
  private(set) var loadTime = Duration.zero

  init(sources: [TraceSource], jobs: [HitRatioBenchmark.ReplayJob]) {
    self.sources = sources
    unfinished = jobs.reduce(into: [:]) { counts, job in counts[job.source, default: 0] += 1 }
  }

  /// The trace of `source`, loaded by the first caller while the others wait.
  func trace(_ source: Int) async throws -> Trace {
    if let load = loads[source] { return try await load.value.trace }
    let load = sources[source].load
    // Detached: building a trace takes seconds, and must not hold this actor meanwhile.
    let task = Task.detached { () throws -> (trace: Trace, time: Duration) in
      let clock = ContinuousClock()
      let start = clock.now
      let trace = try load()
      return (trace, start.duration(to: clock.now))
    }
    loads[source] = task
    let (trace, time) = try await task.value
    loadTime += time
    return trace
  }

  /// Notes that a job of `source` is done; drops the trace after the last one.
  func finish(_ source: Int) {
    unfinished[source, default: 1] -= 1
    if unfinished[source] == 0 { loads[source] = nil }
  }
}
