import Foundation

// Measures the project and its baselines in one run and prints their ratios. See `Options.usage`.

// Hash seeds differ per process unless this is set, and with them the layout of hash tables: the
// timed benchmarks run with one fixed seed, so that two runs lay out their tables alike. The seed
// is read when the runtime starts: re-execute this program with the variable set, once. The
// replays of `cache.hitRatio` run in children of their own without it, on purpose: users do not
// get to choose the seed (see `LayerReplays`).
if ProcessInfo.processInfo.environment["SWIFT_DETERMINISTIC_HASHING"] == nil,
  CommandLine.arguments.dropFirst().first != LayerReplays.childFlag
{
  setenv("SWIFT_DETERMINISTIC_HASHING", "1", 1)
  let path = Bundle.main.executablePath ?? CommandLine.arguments[0]
  execv(path, CommandLine.unsafeArgv)
  // Still here: the re-execution failed. Run on, with per-process seeds.
  FileHandle.standardError.write(Data("warning: could not re-execute with deterministic hashing\n".utf8))
}

let arguments = Array(CommandLine.arguments.dropFirst())

// A re-executed copy of this program measuring memory in a fresh process.
if arguments.first == FootprintBenchmark.childFlag {
  exit(FootprintBenchmark.runChild(Array(arguments.dropFirst())))
}
// A child replaying a trace through a memory layer, with the process's own hash seed.
if arguments.first == LayerReplays.childFlag {
  exit(LayerReplays.runChild(Array(arguments.dropFirst())))
}

let options: Options
do {
  options = try Options.parse(arguments)
} catch {
  FileHandle.standardError.write(Data("error: \(error)\n\n\(Options.usage)\n".utf8))
  exit(2)
}
if options.showsHelp {
  print(Options.usage)
  exit(0)
}

let isDebugBuild = checkDebugBuild()
var configuration = options.isQuick ? RunConfiguration.quick : .full
configuration.tracesDirectory = options.tracesDirectory
if let runs = options.hitRatioRuns { configuration.hitRatioRuns = runs }
let benchmarks = Benchmark.allCases.filter { benchmark in
  options.filters.isEmpty || options.filters.contains { benchmark.rawValue.contains($0) }
}
// A misspelt filter would otherwise run nothing, or less than asked, and exit 0.
let unmatched = options.filters.filter { filter in !Benchmark.allCases.contains { $0.rawValue.contains(filter) } }
if !unmatched.isEmpty {
  let names = Benchmark.allCases.map(\.rawValue).joined(separator: ", ")
  let filters = unmatched.map { "'\($0)'" }.joined(separator: ", ")
  FileHandle.standardError.write(Data("error: no benchmark's name contains \(filters) (names: \(names))\n".utf8))
  exit(2)
}

if isDebugBuild {
  print(
    """
    ******************************************************************************
    WARNING: this is a DEBUG build. The numbers below mean nothing.
    Build with: swift build -c release --product AsyncCacheBenchmarks
    ******************************************************************************
    """
  )
}
print(
  "AsyncCacheBenchmarks: \(isDebugBuild ? "DEBUG build (unoptimized)" : "optimized build"), "
    + "\(ProcessInfo.processInfo.activeProcessorCount) processors, "
    + (options.isQuick ? "QUICK run (smoke test: small sizes)" : "full run")
    + ", median of \(configuration.repetitions) interleaved repetitions"
)

let clock = ContinuousClock()
let start = clock.now
var rows: [ResultRow] = []
var failures: [String] = []
for benchmark in benchmarks {
  // Progress goes to standard error, so standard output holds only the report.
  FileHandle.standardError.write(Data("running \(benchmark.rawValue)...\n".utf8))
  do {
    rows += try await benchmark.run(configuration)
  } catch {
    failures.append("\(benchmark.rawValue): \(error)")
  }
}

print()
print(renderTable(rows))
print()
let targets = rows.compactMap(\.passed)
print("targets: \(targets.count { $0 }) met, \(targets.count { !$0 }) MISSED (reported, not enforced)")
for failure in failures { print("FAILED \(failure)") }
if let path = options.jsonPath {
  do {
    try writeJSON(rows, to: path)
    print("results written to \(path)")
  } catch {
    failures.append("writing \(path): \(error)")
    print("FAILED writing \(path): \(error)")
  }
}
print(
  "checksum \(checksumSink.load(ordering: .relaxed)); "
    + "total \(format(start.duration(to: clock.now).nanoseconds / 1e9, decimals: 1)) s"
)
exit(failures.isEmpty ? 0 : 1)
