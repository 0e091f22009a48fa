import AsyncCache
import AsyncCacheSQLite
import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

/// RELIABILITY row 6 for SQLite, on real file systems: a tiny tmpfs that fills up and a
/// read-only mount. SQLite's own I/O cannot be faulted through a seam, so where mounting is
/// impossible these tests are skipped with the reason; the disk layer's seam-based twins always run.
@Suite(
  "SQLiteLayer on full and read-only file systems",
  .timeLimit(.minutes(3)),
  .enabled(if: TmpfsMount.unavailableReason == nil, "\(TmpfsMount.unavailableReason ?? "")")
)
struct SQLiteLayerStorageFaultTests {
  @Test("a full disk is a typed noSpace error; nothing is lost: writes stay readable and land once space frees")
  func diskFull() async throws {
    let mount = try #require(try TmpfsMount.mount(sizeInBytes: 1 << 20))
    defer { mount.unmount() }
    let url = mount.url.appendingPathComponent("cache.sqlite")
    let layer = try await SQLiteLayer<String, Data>(url: url)
    try await layer.insert(Data(repeating: 1, count: 1000), for: "kept")
    try await layer.flush()

    // Something else fills the file system.
    let ballast = mount.url.appendingPathComponent("ballast")
    #expect(FileManager.default.createFile(atPath: ballast.path, contents: nil))
    let handle = try FileHandle(forWritingTo: ballast)
    while (try? handle.write(contentsOf: Data(count: 4096))) != nil {}
    try? handle.close()

    for index in 0..<16 {
      try await layer.insert(Data(repeating: UInt8(index), count: 16 << 10), for: "new\(index)")
    }
    await #expect { try await layer.flush() } throws: { ($0 as? PersistenceError)?.code == .noSpace }
    #expect(try await layer.value(for: "kept") == Data(repeating: 1, count: 1000))
    #expect(try await layer.value(for: "new15") == Data(repeating: 15, count: 16 << 10), "pending writes stay readable")
    #expect(await layer.statistics.failedWrites >= 1)

    try FileManager.default.removeItem(at: ballast)
    try await layer.flush()
    try await layer.close()
    let reopened = try await SQLiteLayer<String, Data>(url: url)
    #expect(try await reopened.value(for: "new15") == Data(repeating: 15, count: 16 << 10))
    #expect(try await reopened.keys.count == 17)
  }

  @Test("on a read-only mount an existing cache stays readable, and writes fail with readOnly")
  func readOnly() async throws {
    let mount = try #require(try TmpfsMount.mount(sizeInBytes: 1 << 20))
    defer { mount.unmount() }
    let url = mount.url.appendingPathComponent("cache.sqlite")
    do {
      let layer = try await SQLiteLayer<String, String>(url: url)
      try await layer.insert("stored", for: "a")
      try await layer.insert("expiring", for: "short", timeToLive: .seconds(1))
      try await layer.close()
    }
    try mount.remount(readOnly: true)
    let clock = ManualClock()
    let layer = try await SQLiteLayer<String, String>(url: url, configuration: .init(clock: clock))
    #expect(try await layer.value(for: "a") == "stored")
    #expect(try Set(await layer.keys) == ["a", "short"])
    // Reads long after the row's access time, and of expired rows, record nothing to write.
    clock.advance(by: .seconds(3600 * 24 * 400))
    #expect(try await layer.value(for: "a") == "stored")
    #expect(try await layer.value(for: "short") == nil)
    try await layer.flush()
    #expect(await layer.statistics.failedWrites == 0)
    await #expect { try await layer.insert("new", for: "b") } throws: { ($0 as? PersistenceError)?.code == .readOnly }
    await #expect { try await layer.removeValue(for: "a") } throws: { ($0 as? PersistenceError)?.code == .readOnly }
    #expect(try await layer.value(for: "b") == nil)
    let fresh = mount.url.appendingPathComponent("new.sqlite")
    await #expect {
      _ = try await SQLiteLayer<String, String>(url: fresh)
    } throws: { error in
      (error as? PersistenceError)?.code == .readOnly
    }
  }
}
