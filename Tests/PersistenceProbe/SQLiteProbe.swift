import AsyncCache
import AsyncCacheSQLite
import CSQLite
import Foundation
import PersistenceTestSupport

/// The probe's commands that exercise `SQLiteLayer` and raw SQLite from another process.
enum SQLiteProbe {
  static let commands: [String: @Sendable ([String]) async -> Int32] = [
    "sqlite-hold-write-lock": holdWriteLock,
    "sqlite-write": write,
    "sqlite-write-loop": writeLoop,
  ]

  /// `sqlite-hold-write-lock <path>`: takes the write lock with `BEGIN IMMEDIATE`, prints
  /// `locked`, holds it until standard input closes, then commits and prints `released`.
  static func holdWriteLock(_ arguments: [String]) async -> Int32 {
    guard arguments.count == 1 else { return usage("sqlite-hold-write-lock <path>") }
    var handle: OpaquePointer?
    guard sqlite3_open_v2(arguments[0], &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nil) == SQLITE_OK else {
      return fail("cannot open \(arguments[0])")
    }
    defer { sqlite3_close_v2(handle) }
    sqlite3_busy_timeout(handle, 10_000)
    guard sqlite3_exec(handle, "BEGIN IMMEDIATE", nil, nil, nil) == SQLITE_OK else {
      return fail("BEGIN IMMEDIATE failed: \(String(cString: sqlite3_errmsg(handle)))")
    }
    emit("locked")
    while let line = readLine(), !line.isEmpty {}
    sqlite3_exec(handle, "COMMIT", nil, nil, nil)
    emit("released")
    return 0
  }

  /// `sqlite-write <path> <namespace> <prefix> <count>`: inserts `<prefix><i>` → `"<prefix> <i>"`
  /// through a `SQLiteLayer`, flushes, prints `flushed`, then reads standard input lines as keys
  /// and prints the value it finds for each (`value <key> <value or -nil->`) until input closes.
  static func write(_ arguments: [String]) async -> Int32 {
    guard arguments.count == 4, let count = Int(arguments[3]) else {
      return usage("sqlite-write <path> <namespace> <prefix> <count>")
    }
    do {
      let layer = try await SQLiteLayer<String, String>(
        url: URL(fileURLWithPath: arguments[0]), namespace: arguments[1])
      for index in 0..<count {
        try await layer.insert("\(arguments[2]) \(index)", for: "\(arguments[2])\(index)")
      }
      try await layer.flush()
      emit("flushed")
      while let key = readLine(), !key.isEmpty {
        emit("value \(key) \(try await layer.value(for: key) ?? "-nil-")")
      }
      try await layer.close()
      return 0
    } catch {
      return fail("\(error)")
    }
  }

  /// `sqlite-write-loop <path> <seed>`: forever, writes a large value for one of 8 keys and
  /// flushes it, printing `wrote <n>` after each. Every byte of a value derives from its key
  /// and version, so a reader can tell a whole value from a torn one.
  static func writeLoop(_ arguments: [String]) async -> Int32 {
    guard arguments.count == 2, let seed = UInt64(arguments[1]) else {
      return usage("sqlite-write-loop <path> <seed>")
    }
    do {
      let layer = try await SQLiteLayer<String, Data>(
        url: URL(fileURLWithPath: arguments[0]), configuration: .init(sizeLimit: 256 << 20))
      var state = seed
      var version = 0
      while true {
        state = state &* 6_364_136_223_846_793_005 &+ 1_442_695_040_888_963_407
        let key = "k\(state >> 61)"
        let size = 64 << 10 + Int((state >> 20) % (1 << 20))
        version += 1
        try await layer.insert(ProbeValue.make(key: key, version: version, size: size), for: key)
        try await layer.flush()
        emit("wrote \(version)")
      }
    } catch {
      return fail("\(error)")
    }
  }

  static func usage(_ text: String) -> Int32 {
    FileHandle.standardError.write(Data("usage: PersistenceProbe \(text)\n".utf8))
    return 64
  }

  static func fail(_ text: String) -> Int32 {
    FileHandle.standardError.write(Data("PersistenceProbe: \(text)\n".utf8))
    return 1
  }
}
