import AsyncCache
import AsyncCacheSQLite
import CSQLite
import Foundation

/// The SQLite layer against plain sqlite3 code doing the same work on the same kind of file.
enum SQLiteBenchmarks {
  /// The size of every value: a typical cached JSON document.
  static let valueSize = 1024

  static func value(_ index: Int) -> Data {
    Data(repeating: UInt8(truncatingIfNeeded: index), count: valueSize)
  }

  /// `sqlite.read.hit`: reading every row of a warm database once, in a shuffled order, through
  /// `SQLiteLayer.value(for:)`, against a prepared `SELECT` of the same rows from a plain
  /// connection on the calling thread. Both return the value as `Data`.
  ///
  /// On Linux the layer answers a read whose pages are in memory on the caller's thread, with a
  /// read-only connection of its own; any other read goes to the layer's thread (no call that
  /// may wait runs on the cooperative pool). The first row has 8 tasks reading at once, as a
  /// service does, against the one connection of the plain loop; the second the latency of one
  /// lone read. Each notes the share of reads answered on the caller's thread.
  ///
  /// Every read on the caller's thread is a transaction of its own, as each `SELECT` of the plain
  /// loop is. The informational row of the plain loop in one transaction shows what sharing
  /// one pair of shared-memory locks can save at most.
  static func readHit(_ run: RunConfiguration) async throws -> [ResultRow] {
    let folder = try BenchmarkFolder()
    defer { folder.remove() }
    let rows = run.sqliteReadRows
    let keys = (0..<rows).map { "key-\($0)" }
    var order = Array(keys)
    var generator = SplitMix64(seed: 42)
    order.shuffle(using: &generator)
    let expected = rows * valueSize
    let tasks = 8
    let slices = (0..<tasks).map { task in Array(order[(rows * task / tasks)..<(rows * (task + 1) / tasks)]) }

    let layer = try await SQLiteLayer<String, Data>(url: folder.url("layer.sqlite"))
    for (index, key) in keys.enumerated() { try await layer.insert(value(index), for: key) }
    try await layer.flush()

    let raw = try PlainDatabase(folder.url("raw.sqlite"))
    try raw.insertAll(keys.enumerated().map { ($1, value($0)) }, batched: true)
    let select = try raw.prepare("SELECT value FROM entries WHERE key = ?1")

    let contenders = [
      Contender(name: "SQLiteLayer, \(tasks) tasks", operations: rows) {
        try await timed(expecting: expected) {
          try await bytesRead(concurrently: slices) { try await layer.value(for: $0) }
        }
      },
      Contender(name: "sqlite3 prepared SELECT", operations: rows) {
        try await timed(expecting: expected) {
          var bytes = 0
          for key in order { bytes += try select.readBlob(key)?.count ?? 0 }
          return bytes
        }
      },
      Contender(name: "SQLiteLayer, 1 task", operations: rows) {
        try await timed(expecting: expected) {
          var bytes = 0
          for key in order { bytes += try await layer.value(for: key)?.count ?? 0 }
          return bytes
        }
      },
      Contender(name: "sqlite3 prepared SELECT, one transaction", operations: rows) {
        try await timed(expecting: expected) {
          try raw.execute("BEGIN")
          var bytes = 0
          for key in order { bytes += try select.readBlob(key)?.count ?? 0 }
          try raw.execute("COMMIT")
          return bytes
        }
      },
    ]
    let before = await layer.statistics
    let measurements = try await measureInterleaved(contenders, repetitions: run.repetitions)
    let after = await layer.statistics
    let reads = (after.hits + after.misses) - (before.hits + before.misses)
    let inPlace = Double(after.readsInPlace - before.readsInPlace) / Double(max(1, reads))
    let benchmark = Benchmark.sqliteReadHit.rawValue
    return ResultRow.rows(
      benchmark: benchmark,
      measurements: Array(measurements[0..<2]),
      baseline: "sqlite3 prepared SELECT",
      target: .ratioAtMost(1.3),
      notes: [
        "\(abbreviated(rows)) rows of \(valueSize) B, each read once, shuffled; ns per read; "
          + "\(String(format: "%.1f", inPlace * 100))% of the layer's reads answered on the caller's thread"
      ]
    )
      + ResultRow.rows(
        benchmark: benchmark,
        measurements: [measurements[2], measurements[1]],
        baseline: "sqlite3 prepared SELECT",
        target: .ratioAtMost(1.5),
        notes: ["one lone read's latency"]
      ).prefix(1)
      + ResultRow.rows(
        benchmark: benchmark,
        measurements: [measurements[3], measurements[1]],
        baseline: "sqlite3 prepared SELECT",
        target: nil,
        notes: ["informational: the plain loop with its read locks taken once, not per SELECT"]
      ).prefix(1)
  }

  /// `sqlite.write`: writing rows through the layer (write-behind, then `flush()`), against
  /// plain INSERTs committed one row per transaction, and all in one transaction. Every
  /// contender writes fresh keys into its own file, with WAL and `synchronous = FULL`.
  static func write(_ run: RunConfiguration) async throws -> [ResultRow] {
    let folder = try BenchmarkFolder()
    defer { folder.remove() }
    let rows = run.sqliteWriteRows
    var round = 0
    let layer = try await SQLiteLayer<String, Data>(
      url: folder.url("layer.sqlite"), configuration: .init(sizeLimit: 1 << 40))
    let perRow = try PlainDatabase(folder.url("per-row.sqlite"))
    let batched = try PlainDatabase(folder.url("batched.sqlite"))
    func batch() -> [(String, Data)] {
      round += 1
      return (0..<rows).map { ("r\(round)-\($0)", value($0)) }
    }
    let contenders = [
      Contender(name: "SQLiteLayer", operations: rows) {
        let entries = batch()
        return try await timed {
          for (key, data) in entries { try await layer.insert(data, for: key) }
          try await layer.flush()
          return entries.count
        }
      },
      Contender(name: "sqlite3 one row per transaction", operations: rows) {
        let entries = batch()
        return try await timed {
          try perRow.insertAll(entries, batched: false)
          return entries.count
        }
      },
      Contender(name: "sqlite3 one transaction", operations: rows) {
        let entries = batch()
        return try await timed {
          try batched.insertAll(entries, batched: true)
          return entries.count
        }
      },
    ]
    let measurements = try await measureInterleaved(contenders, repetitions: run.repetitions)
    let benchmark = Benchmark.sqliteWrite.rawValue
    let note = "\(abbreviated(rows)) fresh rows of \(valueSize) B per repetition; WAL, synchronous=FULL; ns per row"
    var result = ResultRow.rows(
      benchmark: benchmark, measurements: [measurements[0], measurements[2]],
      baseline: "sqlite3 one transaction", target: .ratioAtMost(1.5), notes: [note])
    // The target against one row per transaction is "at least 5x faster": a ratio of at most 0.2.
    result += ResultRow.rows(
      benchmark: benchmark, measurements: [measurements[0], measurements[1]],
      baseline: "sqlite3 one row per transaction", target: .ratioAtMost(0.2),
      notes: ["ratio <= 0.2 means at least 5x faster"])
    return result
  }

  /// `chain.coldStart`: a process starts, opens memory → SQLite over a database of many rows,
  /// and reads a thousand keys. Reports the time to the first value and to all of them.
  static func coldStart(_ run: RunConfiguration) async throws -> [ResultRow] {
    let folder = try BenchmarkFolder()
    defer { folder.remove() }
    let url = folder.url("cold.sqlite")
    let rows = run.coldStartRows
    do {
      let layer = try await SQLiteLayer<String, Data>(url: url, configuration: .init(sizeLimit: 1 << 40))
      for index in 0..<rows { try await layer.insert(value(index), for: "key-\(index)") }
      try await layer.close()
    }
    var generator = SplitMix64(seed: 7)
    let reads = (0..<1_000).map { _ in "key-\(Int(generator.next() % UInt64(rows)))" }
    var first: [Double] = []
    var all: [Double] = []
    let clock = ContinuousClock()
    for _ in 0..<run.repetitions {
      let start = clock.now
      let disk = try await SQLiteLayer<String, Data>(url: url, configuration: .init(sizeLimit: 1 << 40))
      let cache = try LoadingCache(
        layers: [MemoryLayer<String, Data>(), disk],
        origin: ClosureFetcher { (key: String) async throws -> Data in
          throw BenchmarkFailure("cold start missed \(key)")
        })
      var bytes = try await cache.value(for: reads[0]).count
      first.append(start.duration(to: clock.now).nanoseconds)
      for key in reads.dropFirst() { bytes += try await cache.value(for: key).count }
      all.append(start.duration(to: clock.now).nanoseconds)
      guard bytes == reads.count * valueSize else { throw BenchmarkFailure("cold start read \(bytes) bytes") }
      try await disk.close()
    }
    let benchmark = Benchmark.chainColdStart.rawValue
    return [
      ResultRow(
        benchmark: benchmark, implementation: "memory -> SQLiteLayer: first value",
        value: Measurement(name: "", samples: first).median, unit: .nanosecondsPerOperation, samples: first,
        notes: ["open + first read, \(abbreviated(rows)) rows on disk; ns"]),
      ResultRow(
        benchmark: benchmark, implementation: "memory -> SQLiteLayer: 1k values",
        value: Measurement(name: "", samples: all).median, unit: .nanosecondsPerOperation, samples: all,
        notes: ["open + 1k random reads; ns in all"]),
    ]
  }
}

/// A temporary folder for a benchmark's files.
struct BenchmarkFolder {
  let root: URL

  init() throws {
    root = FileManager.default.temporaryDirectory.appendingPathComponent("asynccache-bench-\(UUID().uuidString)")
    try FileManager.default.createDirectory(at: root, withIntermediateDirectories: true)
  }

  func url(_ name: String) -> URL { root.appendingPathComponent(name) }

  func remove() { try? FileManager.default.removeItem(at: root) }
}

/// Plain sqlite3: what an application without this library would write. A minimal table, the
/// same journal mode and durability as the layer.
final class PlainDatabase {
  let handle: OpaquePointer

  init(_ url: URL) throws {
    var handle: OpaquePointer?
    guard sqlite3_open_v2(url.path, &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil) == SQLITE_OK,
      let handle
    else { throw BenchmarkFailure("cannot open \(url.path)") }
    self.handle = handle
    try execute(
      """
      PRAGMA journal_mode = WAL; PRAGMA synchronous = FULL;
      CREATE TABLE IF NOT EXISTS entries (key TEXT PRIMARY KEY, value BLOB NOT NULL);
      """)
  }

  deinit { sqlite3_close_v2(handle) }

  func execute(_ sql: String) throws {
    guard sqlite3_exec(handle, sql, nil, nil, nil) == SQLITE_OK else {
      throw BenchmarkFailure("sqlite: \(String(cString: sqlite3_errmsg(handle)))")
    }
  }

  func prepare(_ sql: String) throws -> PlainStatement {
    var statement: OpaquePointer?
    guard sqlite3_prepare_v2(handle, sql, -1, &statement, nil) == SQLITE_OK, let statement else {
      throw BenchmarkFailure("sqlite: \(String(cString: sqlite3_errmsg(handle)))")
    }
    return PlainStatement(statement)
  }

  /// Inserts `entries` in one transaction, or each in its own.
  func insertAll(_ entries: [(String, Data)], batched: Bool) throws {
    let insert = try prepare("INSERT OR REPLACE INTO entries (key, value) VALUES (?1, ?2)")
    if batched { try execute("BEGIN") }
    for (key, value) in entries {
      sqlite3_bind_text(insert.pointer, 1, key, -1, csqlite_transient())
      _ = value.withUnsafeBytes {
        sqlite3_bind_blob(insert.pointer, 2, $0.baseAddress, Int32($0.count), csqlite_transient())
      }
      guard sqlite3_step(insert.pointer) == SQLITE_DONE else {
        throw BenchmarkFailure("insert: \(String(cString: sqlite3_errmsg(handle)))")
      }
      sqlite3_reset(insert.pointer)
    }
    if batched { try execute("COMMIT") }
  }
}

final class PlainStatement {
  let pointer: OpaquePointer

  init(_ pointer: OpaquePointer) { self.pointer = pointer }

  deinit { sqlite3_finalize(pointer) }

  /// Runs the statement for `key` and copies the first column of its row.
  func readBlob(_ key: String) throws -> Data? {
    defer { sqlite3_reset(pointer) }
    sqlite3_bind_text(pointer, 1, key, -1, csqlite_transient())
    switch sqlite3_step(pointer) {
    case SQLITE_ROW:
      let count = Int(sqlite3_column_bytes(pointer, 0))
      guard let base = sqlite3_column_blob(pointer, 0) else { return Data() }
      return Data(bytes: base, count: count)
    case SQLITE_DONE: return nil
    default: throw BenchmarkFailure("select failed")
    }
  }
}
