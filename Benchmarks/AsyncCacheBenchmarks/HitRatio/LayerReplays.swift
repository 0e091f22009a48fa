import AsyncCache
import Foundation
import Synchronization

/// The memory layer's replays in `cache.hitRatio`, each in a fresh process, as users run it.
///
/// A layer's hit ratio may depend on two draws a user never chooses: the admission seed of its
/// W-TinyLFU (random unless the configuration gives one) and the process's hash seed, which
/// decides which keys share a segment and a sketch counter. So every replay runs in a new child
/// process of this program, started without `SWIFT_DETERMINISTIC_HASHING`, with a layer created
/// as an application creates it (`MemoryLayer(configuration:)`, no seed): each replay is one
/// draw of what users get, and the benchmark reports the worst and the spread of several.
enum LayerReplays {
  /// The first argument of a child process.
  static let childFlag = "--hit-ratio-replay"

  /// A layer configuration replayed in child processes.
  enum Policy: String, CaseIterable, Sendable {
    /// `MemoryLayer(configuration: .init(countLimit:))`: what a user gets without choosing.
    case defaultPolicy = "default"
    /// `.windowTinyLFU` in one segment: the fixed-window W-TinyLFU anchor.
    case windowTinyLFU = "W-TinyLFU"

    /// The configuration of a layer of `capacity` entries.
    func configuration(capacity: Int) -> MemoryLayer<Int32, Bool>.Configuration {
      switch self {
      case .defaultPolicy: .init(countLimit: capacity)
      case .windowTinyLFU: .init(countLimit: capacity, segmentCount: 1, evictionPolicy: .windowTinyLFU)
      }
    }
  }

  /// One child process: a policy replayed over one trace at each of its sizes.
  struct Job: Sendable {
    var source: String
    var policy: Policy
    var sizes: [Int]
    /// Which of the source's runs this is, from 0.
    var run: Int
  }

  /// What a child found.
  struct Result: Sendable {
    var job: Job
    /// Hits by cache size.
    var hits: [Int: Int]
    var accesses: Int
    /// Wall time of the child process, trace loading included.
    var time: Duration
  }

  /// Runs every job in its own child process, at most `width` at a time.
  ///
  /// - Throws: ``BenchmarkFailure`` when a child cannot start, fails, or prints something else
  ///   than hits for its sizes.
  static func run(_ jobs: [Job], _ configuration: RunConfiguration, width: Int) throws -> [Result] {
    let results = Locked<[Int: Result]>([:])
    let failures = Locked<[String]>([])
    let next = Atomic<Int>(0)
    DispatchQueue.concurrentPerform(iterations: max(1, min(width, jobs.count))) { _ in
      while true {
        let index = next.wrappingAdd(1, ordering: .relaxed).oldValue
        // After a failure, start no more children: the run fails anyway.
        guard index < jobs.count, failures.withLock({ $0.isEmpty }) else { return }
        do {
          let result = try runChild(jobs[index], configuration)
          results.withLock { $0[index] = result }
        } catch {
          failures.withLock { $0.append("\(error)") }
        }
      }
    }
    if let failure = failures.withLock({ $0.first }) { throw BenchmarkFailure(failure) }
    return results.withLock { results in jobs.indices.compactMap { results[$0] } }
  }

  /// Starts the child of `job` and reads its hits.
  private static func runChild(_ job: Job, _ configuration: RunConfiguration) throws -> Result {
    let clock = ContinuousClock()
    let start = clock.now
    let process = Process()
    process.executableURL = Bundle.main.executableURL ?? URL(fileURLWithPath: CommandLine.arguments[0])
    process.arguments =
      [
        childFlag, configuration.isQuick ? "quick" : "full", configuration.tracesDirectory ?? "-", job.source,
        job.policy.rawValue,
      ] + job.sizes.map(String.init)
    // The process's own hash seed, as a user's process has: see the type's documentation.
    var environment = ProcessInfo.processInfo.environment
    environment["SWIFT_DETERMINISTIC_HASHING"] = nil
    process.environment = environment
    let output = Pipe()
    process.standardOutput = output
    try process.run()
    let data = output.fileHandleForReading.readDataToEndOfFile()
    process.waitUntilExit()
    let text = String(decoding: data, as: UTF8.self)
    let label = "the \(job.policy.rawValue) replay of \(job.source) (run \(job.run + 1))"
    guard process.terminationStatus == 0 else {
      throw BenchmarkFailure("\(label) exited with status \(process.terminationStatus): \(text)")
    }
    var hits: [Int: Int] = [:]
    var accesses: Int?
    for line in text.split(separator: "\n") {
      let fields = line.split(separator: " ")
      guard fields.count == 2, let first = Int(fields[0]), let second = Int(fields[1]) else {
        throw BenchmarkFailure("\(label) printed '\(line)', not 'SIZE HITS'")
      }
      if first == 0 { accesses = second } else { hits[first] = second }
    }
    guard let accesses, Set(hits.keys) == Set(job.sizes) else {
      throw BenchmarkFailure("\(label) printed \(text.debugDescription), not the hits of sizes \(job.sizes)")
    }
    return Result(job: job, hits: hits, accesses: accesses, time: start.duration(to: clock.now))
  }

  /// A child's entry point: replays the policy named in `arguments` (what follows ``childFlag``)
  /// over one trace at each size, prints `0 ACCESSES` and then `SIZE HITS` per size, and returns
  /// the exit status.
  static func runChild(_ arguments: [String]) -> Int32 {
    let usage = "usage: \(childFlag) quick|full TRACES_DIR|- SOURCE default|W-TinyLFU SIZE..."
    guard arguments.count >= 5, ["quick", "full"].contains(arguments[0]),
      let policy = Policy(rawValue: arguments[3])
    else {
      print(usage)
      return 2
    }
    let sizes = arguments.dropFirst(4).compactMap { Int($0) }.filter { $0 > 0 }
    guard sizes.count == arguments.count - 4 else {
      print(usage)
      return 2
    }
    var configuration = arguments[0] == "quick" ? RunConfiguration.quick : .full
    configuration.tracesDirectory = arguments[1] == "-" ? nil : arguments[1]
    guard let source = TraceSource.all(configuration).sources.first(where: { $0.name == arguments[2] }) else {
      print("no trace named \(arguments[2]) in this run")
      return 1
    }
    do {
      let trace = try source.load()
      print("0 \(trace.keys.count)")
      for size in sizes {
        var simulator = MemoryLayerSimulator(configuration: policy.configuration(capacity: size))
        print("\(size) \(replay(trace.keys, through: &simulator))")
      }
      return 0
    } catch {
      print("\(error)")
      return 1
    }
  }
}
