import Foundation

/// What a row's value counts.
enum Unit: String {
  case nanosecondsPerOperation = "ns/op"
  case bytesPerEntry = "B/entry"
  case bytesPerOperation = "B/op"
  /// A latency in nanoseconds: a percentile of many measured events, not a time per operation.
  case nanoseconds = "ns"
  /// A latency in milliseconds, for waits that include simulated network time.
  case milliseconds = "ms"
  /// A share, from 0 to 100.
  case percent = "%"
  /// A difference between two shares, in percentage points.
  case points = "points"
  /// A number of events (origin calls).
  case count = "count"
}

/// The goal a row is held to. Missing it is reported, not fatal: the numbers depend on the machine.
enum Target {
  /// The row's ratio to its baseline must not exceed the bound.
  case ratioAtMost(Double)
  /// The row's value must not exceed the bound, in the row's unit.
  case valueAtMost(Double)
  /// The row's value must reach the bound, in the row's unit (a share that should be high).
  case valueAtLeast(Double)
  /// The row's value must be at most `points` below `best`, both in the row's unit (percentage
  /// points for hit ratios): `value >= best - points`.
  case withinPointsOf(Double, best: Double)
  /// The row's value (the worst of several runs) must be at most `points` below `best`, and its
  /// samples (the runs) at most `spread` apart: robust, not lucky.
  case robustlyWithinPointsOf(Double, best: Double, spread: Double)

  /// The target as printed, e.g. `<= 2.00x`.
  func description(unit: Unit) -> String {
    switch self {
    case .ratioAtMost(let bound): "<= \(format(bound, decimals: 2))x"
    case .valueAtMost(let bound): "<= \(format(bound, decimals: 0)) \(unit.rawValue)"
    case .valueAtLeast(let bound): ">= \(format(bound, decimals: 0)) \(unit.rawValue)"
    case .withinPointsOf(let points, let best):
      ">= \(format(best - points, decimals: 2)) (best - \(format(points, decimals: 0)) pt)"
    case .robustlyWithinPointsOf(let points, let best, let spread):
      ">= \(format(best - points, decimals: 2)) (best - \(format(points, decimals: 0)) pt), "
        + "max - min <= \(format(spread, decimals: 0))"
    }
  }
}

/// One line of the report: an implementation's result in one benchmark.
struct ResultRow {
  var benchmark: String
  var implementation: String
  /// The median per operation (or per entry, or the percentile or share the row names), in ``unit``.
  var value: Double
  var unit: Unit = .nanosecondsPerOperation
  /// The implementation the ratio compares with; `nil` when the row has no ratio.
  var baseline: String?
  /// `value / baseline's value`.
  var ratio: Double?
  var target: Target?
  /// Hits per lookup, for benchmarks whose caches can miss.
  var hitRatio: Double?
  /// Every repetition's value, in ``unit``, in the order they ran.
  var samples: [Double] = []
  /// Context for the reader: sizes, caveats.
  var notes: [String] = []

  /// How far apart the repetitions were: (slowest - fastest) / median. A large spread means a
  /// noisy machine, and a ratio to read with care.
  var spread: Double? {
    guard let fastest = samples.min(), let slowest = samples.max(), samples.count > 1, value > 0 else { return nil }
    return (slowest - fastest) / value
  }

  /// Whether the row meets its target; `nil` without one.
  var passed: Bool? {
    switch target {
    case nil: nil
    case .ratioAtMost(let bound): ratio.map { $0 <= bound }
    case .valueAtMost(let bound): value <= bound
    case .valueAtLeast(let bound): value >= bound
    case .withinPointsOf(let points, let best): value >= best - points
    case .robustlyWithinPointsOf(let points, let best, let spread):
      value >= best - points && (samples.max() ?? value) - (samples.min() ?? value) <= spread
    }
  }

  /// Rows for `measurements`, each with its ratio to the one named `baseline`; `target` applies
  /// to the first row, which is the project's.
  static func rows(
    benchmark: String,
    measurements: [Measurement],
    baseline: String,
    target: Target?,
    unit: Unit = .nanosecondsPerOperation,
    notes: [String] = []
  ) -> [ResultRow] {
    let reference = measurements.first { $0.name == baseline }?.median
    return measurements.enumerated().map { index, measurement in
      ResultRow(
        benchmark: benchmark,
        implementation: measurement.name,
        value: measurement.median,
        unit: unit,
        baseline: reference == nil ? nil : baseline,
        ratio: reference.flatMap { $0 > 0 ? measurement.median / $0 : nil },
        target: index == 0 ? target : nil,
        samples: measurement.samples,
        notes: index == 0 ? notes : []
      )
    }
  }
}

extension [ResultRow] {
  /// Sets the notes of the row of `implementation`.
  mutating func annotate(_ implementation: String, with notes: String...) {
    for index in indices where self[index].implementation == implementation {
      self[index].notes = notes
    }
  }
}

/// Renders rows as an aligned plain-text table (ASCII only, so CI logs keep it intact).
func renderTable(_ rows: [ResultRow]) -> String {
  let header = ["benchmark", "implementation", "median", "spread", "ratio", "baseline", "target", "result", "notes"]
  let rightAligned: Set = [2, 3, 4]
  var lines = [header]
  for row in rows {
    var notes = row.notes
    if let hitRatio = row.hitRatio { notes.insert("hit ratio \(format(hitRatio * 100, decimals: 1))%", at: 0) }
    lines.append([
      row.benchmark,
      row.implementation,
      "\(format(row.value, decimals: 1)) \(row.unit.rawValue)",
      row.spread.map { "\(format($0 * 100, decimals: 0))%" } ?? "",
      row.ratio.map { "\(format($0, decimals: 2))x" } ?? "",
      row.baseline.map { "vs \($0)" } ?? "",
      row.target?.description(unit: row.unit) ?? "",
      row.passed.map { $0 ? "PASS" : "MISSED" } ?? "",
      notes.joined(separator: "; "),
    ])
  }
  let widths = header.indices.map { column in lines.map { $0[column].count }.max() ?? 0 }
  let rendered = lines.map { cells in
    cells.enumerated().map { column, cell in
      let padding = String(repeating: " ", count: widths[column] - cell.count)
      return rightAligned.contains(column) ? padding + cell : cell + padding
    }
    .joined(separator: "  ")
    .trimmingTrailingSpaces()
  }
  let rule = String(repeating: "-", count: rendered.map(\.count).max() ?? 0)
  return ([rendered[0], rule] + rendered.dropFirst()).joined(separator: "\n")
}

/// Writes rows as a JSON array, one object per row, to `path`.
func writeJSON(_ rows: [ResultRow], to path: String) throws {
  let encoder = JSONEncoder()
  encoder.outputFormatting = [.prettyPrinted, .sortedKeys, .withoutEscapingSlashes]
  let data = try encoder.encode(rows.map(JSONRow.init))
  try data.write(to: URL(fileURLWithPath: path), options: .atomic)
}

/// The JSON form of a row. Hand-written so that absent values are written as `null` (synthesized
/// conformances omit them).
private struct JSONRow: Encodable {
  var row: ResultRow

  enum CodingKeys: String, CodingKey {
    case name, implementation, medianNanosecondsPerOperation, baseline, ratio, target, passed
    case unit, value, samples, hitRatio, bytesPerEntry, notes
  }

  func encode(to encoder: any Encoder) throws {
    var container = encoder.container(keyedBy: CodingKeys.self)
    let isTime = row.unit == .nanosecondsPerOperation
    try container.encode(row.benchmark, forKey: .name)
    try container.encode(row.implementation, forKey: .implementation)
    try container.encode(isTime ? row.value : nil, forKey: .medianNanosecondsPerOperation)
    try container.encode(row.baseline, forKey: .baseline)
    try container.encode(row.ratio, forKey: .ratio)
    try container.encode(row.target?.description(unit: row.unit), forKey: .target)
    try container.encode(row.passed, forKey: .passed)
    try container.encode(row.unit.rawValue, forKey: .unit)
    // Every row's value in its unit; the two keys below name it for the units that had them first.
    try container.encode(row.value, forKey: .value)
    try container.encode(row.samples, forKey: .samples)
    try container.encodeIfPresent(row.hitRatio, forKey: .hitRatio)
    try container.encodeIfPresent(row.unit == .bytesPerEntry ? row.value : nil, forKey: .bytesPerEntry)
    if !row.notes.isEmpty { try container.encode(row.notes, forKey: .notes) }
  }
}

/// `value` with a fixed number of decimals.
func format(_ value: Double, decimals: Int) -> String {
  String(format: "%.\(decimals)f", value)
}

extension String {
  fileprivate func trimmingTrailingSpaces() -> String {
    var trimmed = self
    while trimmed.last == " " { trimmed.removeLast() }
    return trimmed
  }
}

/// The nearest-rank `percentile` (0-100) of `values`; 0 when empty.
func percentile(_ percentile: Double, of values: [Double]) -> Double {
  guard !values.isEmpty else { return 0 }
  let sorted = values.sorted()
  let rank = Int((percentile / 100 * Double(sorted.count)).rounded(.up))
  return sorted[min(max(rank, 1), sorted.count) - 1]
}

extension ResultRow {
  /// A pair of rows: the `percentile` of `project`'s samples and of `baseline`'s, pooled over the
  /// repetitions (one array per repetition), each with the per-repetition percentiles as its
  /// samples, and the project's ratio to the baseline.
  static func percentileRows(
    benchmark: String,
    percentile: Double,
    _ project: (name: String, [[Double]]),
    baseline: (name: String, [[Double]]),
    unit: Unit,
    target: Target?,
    notes: [String]
  ) -> [ResultRow] {
    let label =
      percentile == 100
      ? "max"
      : "p\(format(percentile, decimals: percentile == percentile.rounded() ? 0 : percentile * 10 == (percentile * 10).rounded() ? 1 : 2))"
    let baselineName = "\(baseline.name) \(label)"
    let reference = AsyncCacheBenchmarks.percentile(percentile, of: baseline.1.flatMap { $0 })
    return [(project, target, notes), (baseline, nil, [])].map { contender, target, notes in
      let value = AsyncCacheBenchmarks.percentile(percentile, of: contender.1.flatMap { $0 })
      return ResultRow(
        benchmark: benchmark,
        implementation: "\(contender.name) \(label)",
        value: value,
        unit: unit,
        baseline: baselineName,
        ratio: reference > 0 ? value / reference : nil,
        target: target,
        samples: contender.1.map { AsyncCacheBenchmarks.percentile(percentile, of: $0) },
        notes: notes
      )
    }
  }
}
