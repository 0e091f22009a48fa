import Foundation
import Synchronization

/// A benchmark's own correctness check failed: its numbers mean nothing, and the run must fail.
struct BenchmarkFailure: Error, CustomStringConvertible {
  /// What was wrong.
  var description: String

  init(_ description: String) {
    self.description = description
  }
}

/// One implementation under measurement and the workload it runs once per repetition.
struct Contender {
  /// The implementation's name in the report.
  var name: String
  /// How many operations one run performs; the report divides the time by it.
  var operations: Int
  /// Runs untimed just before every run, e.g. to bring the contender's data back into the CPU
  /// caches that the previous contender evicted. Without it, the contender that runs after a
  /// large one pays for the cold start and the order of the contenders shows in the ratios.
  var prepare: () async throws -> Void = {}
  /// Runs the workload once and returns the duration of its timed part (see ``timed(expecting:_:)``).
  var run: () async throws -> Duration
}

/// The measured cost of one contender.
struct Measurement {
  /// The contender's name.
  var name: String
  /// The cost per operation of every timed repetition, in the order they ran: nanoseconds, or
  /// bytes for the footprint benchmark.
  var samples: [Double]

  /// The median of ``samples``: robust to the odd repetition that a noisy neighbour slowed down.
  var median: Double {
    let sorted = samples.sorted()
    let middle = sorted.count / 2
    return sorted.count.isMultiple(of: 2) ? (sorted[middle - 1] + sorted[middle]) / 2 : sorted[middle]
  }
}

/// What one workload costs over another at a fine grain: `blocks` pairs of short runs (each
/// `lookups` over one of `slices`, the same slice for both in a pair), back to back in
/// alternating order, after one untimed pass of each over every slice. A pause of the machine
/// (a neighbour, a migration) then spoils a pair or two of hundreds, which the median ignores,
/// where it spoils a whole run of a coarser pairing. Returns the median of the ratios of
/// consecutive pairs, one in each order (the geometric mean of theirs), and those ratios.
func measureBlockRatio(
  _ treatment: @escaping ([Int]) async throws -> Int,
  over control: @escaping ([Int]) async throws -> Int,
  slices: [[Int]],
  blocks: Int
) async throws -> (median: Double, ratios: [Double]) {
  let sums = slices.map { $0.reduce(0, &+) }
  for slice in slices {
    checksumSink.wrappingAdd(try await treatment(slice), ordering: .relaxed)
    checksumSink.wrappingAdd(try await control(slice), ordering: .relaxed)
  }
  var ratios: [Double] = []
  ratios.reserveCapacity(blocks)
  for block in 0..<blocks {
    let index = block % slices.count
    let (slice, sum) = (slices[index], sums[index])
    var times: (treatment: Double, control: Double) = (0, 0)
    for first in [block.isMultiple(of: 2), !block.isMultiple(of: 2)] {
      if first {
        times.treatment = try await timed(expecting: sum) { try await treatment(slice) }.nanoseconds
      } else {
        times.control = try await timed(expecting: sum) { try await control(slice) }.nanoseconds
      }
    }
    if times.control > 0 { ratios.append(times.treatment / times.control) }
  }
  // The first of a pair runs after the other contender's block and pays for it (its data is
  // colder): pairs in one order read about 1.5x, in the other 0.7x. The geometric mean of two
  // consecutive pairs, one in each order, cancels that.
  let balanced = stride(from: 0, to: ratios.count - 1, by: 2).map { (ratios[$0] * ratios[$0 + 1]).squareRoot() }
  return (Measurement(name: "ratios", samples: balanced).median, balanced)
}

/// Measures `contenders` in interleaved rounds (A B C, A B C, ...), after `warmUpRounds` untimed
/// rounds, so that machine noise and frequency drift hit every contender alike.
///
/// Returns one measurement per contender, in order.
func measureInterleaved(
  _ contenders: [Contender],
  repetitions: Int,
  warmUpRounds: Int = 1
) async throws -> [Measurement] {
  for _ in 0..<warmUpRounds {
    for contender in contenders {
      try await contender.prepare()
      _ = try await contender.run()
    }
  }
  var measurements = contenders.map { Measurement(name: $0.name, samples: []) }
  for _ in 0..<repetitions {
    for (index, contender) in contenders.enumerated() {
      try await contender.prepare()
      let elapsed = try await contender.run()
      measurements[index].samples.append(elapsed.nanoseconds / Double(contender.operations))
    }
  }
  return measurements
}

/// Runs `body`, the timed part of a workload, and returns how long it took.
///
/// `body` returns a checksum of everything it computed. The checksum is folded into
/// ``checksumSink`` so that the optimizer cannot drop the work, and compared with `expected` when
/// given, so that a benchmark that silently measures the wrong thing fails instead.
func timed(expecting expected: Int? = nil, _ body: () async throws -> Int) async throws -> Duration {
  let clock = ContinuousClock()
  let start = clock.now
  let checksum = try await body()
  let elapsed = start.duration(to: clock.now)
  checksumSink.wrappingAdd(checksum, ordering: .relaxed)
  if let expected, checksum != expected {
    throw BenchmarkFailure("checksum \(checksum) where \(expected) was expected")
  }
  return elapsed
}

/// Where every checksum ends up; printed at the end of the run so that the work is observable.
let checksumSink = Atomic<Int>(0)

extension Duration {
  /// The duration in nanoseconds, as a floating-point number.
  var nanoseconds: Double {
    let (seconds, attoseconds) = components
    return Double(seconds) * 1e9 + Double(attoseconds) / 1e9
  }
}

/// Counts calls from any task, e.g. of an origin that a benchmark expects to be called a known
/// number of times.
final class CallCounter: Sendable {
  private let calls = Atomic<Int>(0)

  /// Records one call.
  func record() {
    calls.wrappingAdd(1, ordering: .relaxed)
  }

  /// The calls recorded so far.
  var count: Int { calls.load(ordering: .relaxed) }
}

/// `count` in short form for labels: `1M`, `200k`, `1k`, `500`.
func abbreviated(_ count: Int) -> String {
  if count >= 1_000_000, count.isMultiple(of: 1_000_000) { return "\(count / 1_000_000)M" }
  if count >= 1_000, count.isMultiple(of: 1_000) { return "\(count / 1_000)k" }
  return "\(count)"
}

/// Whether the executable was built without optimizations, which makes every number meaningless.
///
/// Out of line because the check is a compile-time constant: used directly, the compiler flags
/// the branch it rules out as never executed (an error with warnings as errors).
@inline(never)
func checkDebugBuild() -> Bool {
  _isDebugAssertConfiguration()
}

/// Reads every key of every slice, one task per slice, each task its slice in order; returns the
/// bytes read in all (`nil` values count 0). The shape of the persistent layers' busy-reader
/// benchmarks.
func bytesRead<Key: Sendable>(
  concurrently slices: [[Key]],
  read: @escaping @Sendable (Key) async throws -> Data?
) async throws -> Int {
  try await withThrowingTaskGroup(of: Int.self) { group in
    for slice in slices {
      group.addTask {
        var bytes = 0
        for key in slice { bytes += try await read(key)?.count ?? 0 }
        return bytes
      }
    }
    return try await group.reduce(0, +)
  }
}
