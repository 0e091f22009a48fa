import AsyncCache

/// The cost of logging that is turned off.
enum LoggingBenchmarks {
  /// `logging.off`: the bookkeeping of a miss (a dictionary lookup that misses, a counter) with a
  /// `debug` call that formats its key, through ``CacheLogger/disabled``, against the same work
  /// with no logging call at all. Informational rows: a logger whose minimum level filters the
  /// call out, and one that logs to a handler that drops the record (the cost when on).
  static func off(_ run: RunConfiguration) async throws -> [ResultRow] {
    let operations = run.hitOperations
    let table = MissTable()
    let contenders = [
      Contender(name: "CacheLogger.disabled", operations: operations) {
        try await timed(expecting: operations) { table.misses(operations, logger: makeLogger(.disabled)) }
      },
      Contender(name: "no logging call", operations: operations) {
        try await timed(expecting: operations) { table.misses(operations) }
      },
      Contender(name: "below the minimum level", operations: operations) {
        try await timed(expecting: operations) { table.misses(operations, logger: makeLogger(.filtered)) }
      },
      Contender(name: "enabled (handler drops)", operations: operations) {
        try await timed(expecting: operations) { table.misses(operations, logger: makeLogger(.enabled)) }
      },
    ]
    let measurements = try await measureInterleaved(contenders, repetitions: run.repetitions)
    let benchmark = Benchmark.loggingOff.rawValue
    return ResultRow.rows(
      benchmark: benchmark,
      measurements: Array(measurements[0..<2]),
      baseline: "no logging call",
      target: .ratioAtMost(1.1),
      notes: ["\(abbreviated(operations)) misses, each with a debug call formatting its key"]
    )
      // The baseline is passed again for the ratios, and its row left out: it is printed above.
      + ResultRow.rows(
        benchmark: benchmark,
        measurements: [measurements[2], measurements[3], measurements[1]],
        baseline: "no logging call",
        target: nil,
        notes: ["informational: the level filtered out; logging on, to a handler that drops the record"]
      ).filter { $0.implementation != "no logging call" }
  }

  private enum LoggerKind {
    case disabled
    case filtered
    case enabled
  }

  /// The logger of `kind`, made out of the optimizer's sight: in a cache it comes from a
  /// configuration, unknown at compile time.
  @inline(never)
  private static func makeLogger(_ kind: LoggerKind) -> CacheLogger {
    switch kind {
    case .disabled: .disabled
    case .filtered: CacheLogger(handler: DroppingHandler(), minimumLevel: .info)
    case .enabled: CacheLogger(handler: DroppingHandler(), minimumLevel: .trace)
    }
  }

  /// A handler that drops every record, as cheaply as a handler can.
  private struct DroppingHandler: CacheLogHandler {
    func log(_ record: CacheLogRecord) {}
  }

  /// A dictionary that the benchmark's keys all miss: the work of a miss's bookkeeping.
  private final class MissTable: Sendable {
    /// Even keys only; the lookups ask for odd ones.
    private let values = Dictionary(uniqueKeysWithValues: (0..<1024).map { ($0 * 2, $0) })

    /// Looks up `count` absent keys and returns how many missed, logging each miss.
    @inline(never)
    func misses(_ count: Int, logger: CacheLogger) -> Int {
      var misses = 0
      for index in 0..<count {
        let key = (index & 2047) | 1
        if values[key] == nil {
          misses += 1
          logger.debug("load started", metadata: ["key": "\(key)"], source: "LoadingCache")
        }
      }
      return misses
    }

    /// Looks up `count` absent keys and returns how many missed, without logging.
    @inline(never)
    func misses(_ count: Int) -> Int {
      var misses = 0
      for index in 0..<count {
        let key = (index & 2047) | 1
        if values[key] == nil { misses += 1 }
      }
      return misses
    }
  }
}
