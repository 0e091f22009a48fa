import AsyncCache
import Foundation

/// `cache.hitRatio`: replays traces through the reference policies (exact LRU, ARC and Belady's
/// optimal policy), the memory layer's fixed-window W-TinyLFU and the memory layer's default
/// policy, at several cache sizes, and holds the default to within ``allowedGap`` points of the
/// best of LRU, ARC and W-TinyLFU on every row.
///
/// The traces are seeded synthetic ones and, when `--traces DIR` names their folder, the ARC
/// paper's OLTP and P3, whose published LRU figures the replay must reproduce exactly and whose
/// ARC figures ours must come close to. Replays run concurrently, one job per trace, size and
/// policy. Hit ratios are deterministic (seeded traces, deterministic policies and hashing); only
/// the times printed at the end vary between runs.
enum HitRatioBenchmark {
  /// How many points the default policy may fall below the best of ``anchors`` on a row.
  static let allowedGap = 1.0
  /// How far, in points, our ARC may be from the paper's figures: the paper leaves details open
  /// (e.g. whether `p` is a real number), which move the hit ratio by a few hundredths.
  static let arcTolerance = 0.15

  static let lru = SimulatedPolicy("LRU") { trace, capacity in
    LRUSimulator(capacity: capacity, keySpace: trace.keySpace)
  }
  static let arc = SimulatedPolicy("ARC") { trace, capacity in
    ARCSimulator(capacity: capacity, keySpace: trace.keySpace)
  }
  /// The memory layer's W-TinyLFU with its fixed window, in one segment: the policy exactly.
  static let windowTinyLFU = SimulatedPolicy("W-TinyLFU") { _, capacity in
    MemoryLayerSimulator(
      configuration: .init(countLimit: capacity, segmentCount: 1, evictionPolicy: .windowTinyLFU))
  }
  /// The layer a user gets without choosing: whatever policy and segment count are the defaults.
  static let defaultPolicy = SimulatedPolicy("default") { _, capacity in
    MemoryLayerSimulator(configuration: .init(countLimit: capacity))
  }
  static let optimal = SimulatedPolicy("OPT") { trace, capacity in
    OptimalSimulator(trace: trace, capacity: capacity)
  }
  /// The library's layer in exact-LRU mode: must score exactly ``lru``'s hits.
  static let memoryLayerLRU = SimulatedPolicy("MemoryLayer LRU") { _, capacity in
    MemoryLayerSimulator(
      configuration: .init(countLimit: capacity, segmentCount: 1, evictionPolicy: .leastRecentlyUsed))
  }

  /// The policies whose best the default policy is held to.
  static let anchors = [lru, arc, windowTinyLFU]

  /// The policies replayed on every row, the slowest first so that the last jobs are short.
  static let columns = [defaultPolicy, windowTinyLFU, optimal, arc, lru]

  /// Runs the benchmark.
  ///
  /// - Throws: ``BenchmarkFailure`` when a self-check fails, a trace file is malformed, a hit
  ///   ratio is out of `0...1`, a policy beats the optimal one, the memory layer in LRU mode
  ///   disagrees with LRU, LRU misses a published figure or ARC strays from one, or the loop
  ///   trace does not give its known hits. The table is printed first.
  static func run(_ configuration: RunConfiguration) async throws -> [ResultRow] {
    let clock = ContinuousClock()
    let start = clock.now
    try HitRatioSelfCheck.run()
    let selfCheckTime = start.duration(to: clock.now)
    let (realSources, skipped) = TraceSource.real(configuration)
    for line in skipped { print("cache.hitRatio: \(line)") }
    let sources = TraceSource.synthetic(configuration) + realSources
    let order = sources.indices.sorted { (sources[$0].start, $0) < (sources[$1].start, $1) }
    let jobs = order.flatMap { source in
      let trace = sources[source]
      let replays = columns.flatMap { policy in trace.sizes.map { (policy, $0) } }
      // The layer's check beside the default, whose replays it costs as much as.
      let checks = trace.layerCheckSizes.map { (memoryLayerLRU, $0) }
      return (replays.prefix(trace.sizes.count) + checks + replays.dropFirst(trace.sizes.count)).map {
        ReplayJob(source: source, size: $1, policy: $0)
      }
    }
    let width = ProcessInfo.processInfo.activeProcessorCount
    let replays = try await replay(jobs, of: sources, width: width)
    let outcomes = Outcome.group(replays, of: sources)
    var failures: [String] = []
    for outcome in outcomes {
      failures += check(outcome, sources[outcome.source])
      checksumSink.wrappingAdd(outcome.hits.values.reduce(0, &+), ordering: .relaxed)
    }
    print(renderMatrix(outcomes, sources))
    let checked = outcomes.filter { $0.hits[memoryLayerLRU.name] != nil }
    if !checked.isEmpty, !failures.contains(where: { $0.hasPrefix("MemoryLayer") }) {
      print(
        "cache.hitRatio: MemoryLayer(segmentCount: 1, evictionPolicy: .leastRecentlyUsed) scored exactly LRU's hits "
          + "on \(checked.map { "\($0.trace) at \($0.size)" }.joined(separator: ", "))")
    }
    print(
      "cache.hitRatio: \(jobs.count) replays on \(width) workers in \(seconds(start.duration(to: clock.now))), "
        + "self-checks (\(seconds(selfCheckTime))) included. Traces built or read in \(seconds(replays.loadTime)); "
        + "replay time by policy (summed over workers): "
        + (columns + [memoryLayerLRU]).map { "\($0.name) \(seconds(replays.time(of: $0.name)))" }
        .joined(separator: ", ")
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

  /// One trace at one cache size: the hits of every policy, by name.
  struct Outcome {
    var source: Int
    var trace: String
    var summary: String
    var size: Int
    var accesses: Int
    var hits: [String: Int]

    /// In percent.
    func hitRatio(_ policy: SimulatedPolicy) -> Double { Double(hits[policy.name] ?? 0) / Double(accesses) * 100 }

    /// The best of the anchors, and its value in percent.
    var best: (policy: SimulatedPolicy, percent: Double) {
      let best = anchors.max { hitRatio($0) < hitRatio($1) } ?? lru
      return (best, hitRatio(best))
    }

    /// The default's hit ratio minus the best anchor's, in points.
    var defaultGap: Double { hitRatio(defaultPolicy) - best.percent }

    static func group(_ replays: Replays, of sources: [TraceSource]) -> [Outcome] {
      sources.indices.flatMap { source in
        sources[source].sizes.map { size in
          let trace = replays.traces[source] ?? (0, "")
          return Outcome(
            source: source, trace: sources[source].name, summary: trace.summary, size: size,
            accesses: trace.accesses, hits: replays.hits[source]?[size] ?? [:])
        }
      }
    }
  }

  /// What is wrong with the outcome: nothing, when every replay is consistent and every
  /// published figure is reproduced.
  private static func check(_ outcome: Outcome, _ source: TraceSource) -> [String] {
    let label = "\(outcome.trace) at \(outcome.size)"
    var failures: [String] = []
    for (policy, hits) in outcome.hits where !(0...outcome.accesses).contains(hits) {
      failures.append("\(policy) scored \(hits) hits in \(outcome.accesses) accesses on \(label)")
    }
    let optimalHits = outcome.hits[optimal.name] ?? 0
    for (policy, hits) in outcome.hits.sorted(by: { $0.key < $1.key }) where hits > optimalHits {
      failures.append("\(policy) scored \(hits) hits on \(label), more than the optimal \(optimalHits)")
    }
    let lruHits = outcome.hits[lru.name] ?? 0
    if let layerHits = outcome.hits[memoryLayerLRU.name], layerHits != lruHits {
      failures.append("MemoryLayer with one segment scored \(layerHits) hits on \(label), exact LRU \(lruHits)")
    }
    if let published = source.lruReference[outcome.size] {
      let measured = format(outcome.hitRatio(lru), decimals: 2)
      if measured != published {
        failures.append("LRU on \(label) scored \(measured)%, the published figure is \(published)%")
      }
    }
    if let published = source.arcReference[outcome.size] {
      let measured = outcome.hitRatio(arc)
      if abs(measured - published) > arcTolerance {
        failures.append(
          "ARC on \(label) scored \(format(measured, decimals: 2))%, more than \(format(arcTolerance, decimals: 2)) "
            + "points from the paper's \(format(published, decimals: 2))%")
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

  /// One row per trace and size: hit ratios in percent, the default's distance to the best
  /// anchor, and whether it is within ``allowedGap``; then the traces and the published figures.
  private static func renderMatrix(_ outcomes: [Outcome], _ sources: [TraceSource]) -> String {
    let header =
      ["trace", "size"] + [lru, arc, windowTinyLFU, defaultPolicy, optimal].map(\.name) + [
        "default - best", "result",
      ]
    var lines = [header]
    for outcome in outcomes {
      let gap = outcome.defaultGap
      lines.append(
        [outcome.trace, String(outcome.size)]
          + [lru, arc, windowTinyLFU, defaultPolicy, optimal].map { format(outcome.hitRatio($0), decimals: 2) }
          + [
            "\(gap >= 0 ? "+" : "")\(format(gap, decimals: 2)) (\(outcome.best.policy.name))",
            gap >= -allowedGap ? "PASS" : "MISSED",
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
      "cache.hitRatio: hit ratios (%); default = MemoryLayer(configuration: .init(countLimit:)); "
      + "best = max(LRU, ARC, W-TinyLFU); PASS within \(format(allowedGap, decimals: 0)) point; "
      + "OPT is Belady's, bypass allowed"
    let traces = outcomes.reduce(into: [String]()) { summaries, outcome in
      let line = "  \(outcome.trace): \(outcome.summary)"
      if !summaries.contains(line) { summaries.append(line) }
    }
    let rule = String(repeating: "-", count: rendered[0].count)
    return
      ([title] + traces + [rendered[0], rule] + rendered.dropFirst() + [rule] + publishedFigures(outcomes, sources))
      .joined(separator: "\n")
  }

  /// Our LRU and ARC beside the published figures, one line per trace that has them.
  private static func publishedFigures(_ outcomes: [Outcome], _ sources: [TraceSource]) -> [String] {
    sources.indices.compactMap { index in
      let source = sources[index]
      let measured = outcomes.filter { $0.source == index }
      func compare(_ policy: SimulatedPolicy, _ published: (Int) -> String?) -> String? {
        let pairs = measured.compactMap { outcome in
          published(outcome.size).map { "\(outcome.size) \(format(outcome.hitRatio(policy), decimals: 2)) (\($0))" }
        }
        return pairs.isEmpty ? nil : "\(policy.name) " + pairs.joined(separator: ", ")
      }
      let parts = [
        compare(lru) { source.lruReference[$0] },
        compare(arc) { source.arcReference[$0].map { format($0, decimals: 2) } },
      ].compactMap { $0 }
      guard !parts.isEmpty else { return nil }
      return "  \(source.name), ours (published): " + parts.joined(separator: "; ")
    }
  }

  /// The report's rows: per trace and size, the default policy held to the best anchor, then
  /// the other policies for reference.
  private static func rows(_ outcomes: [Outcome]) -> [ResultRow] {
    outcomes.flatMap { outcome in
      let benchmark = "\(Benchmark.cacheHitRatio.rawValue).\(outcome.trace).\(outcome.size)"
      let best = outcome.best
      let project = ResultRow(
        benchmark: benchmark, implementation: "MemoryLayer default", value: outcome.hitRatio(defaultPolicy),
        unit: .percent, target: .withinPointsOf(allowedGap, best: best.percent),
        notes: ["best \(best.policy.name) \(format(best.percent, decimals: 2))%", outcome.summary])
      let references = [lru, arc, windowTinyLFU, optimal].map { policy in
        ResultRow(
          benchmark: benchmark, implementation: policy.name, value: outcome.hitRatio(policy), unit: .percent,
          notes: policy.name == optimal.name ? ["Belady, bypass allowed"] : [])
      }
      return [project] + references
    }
  }

  private static func seconds(_ duration: Duration) -> String {
    "\(format(duration.nanoseconds / 1e9, decimals: 1)) s"
  }
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
