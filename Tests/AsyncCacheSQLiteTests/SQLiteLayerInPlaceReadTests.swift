import AsyncCache
import AsyncCacheSQLite
import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

/// Reads answered on the caller's thread when their pages are in memory, and sent to the layer's
/// thread when they would wait for the device (see `SQLiteReaders`).
@Suite("SQLiteLayer: reads on the caller's thread", .timeLimit(.minutes(3)))
struct SQLiteLayerInPlaceReadTests {
  /// A database of `rows` values of 1 KiB, written by a layer that is closed again, so that a
  /// layer opened on it has read none of its rows yet.
  static func database(in folder: TemporaryDirectory, rows: Int = 2_000) async throws -> URL {
    let url = folder.appending("cache.sqlite")
    let writer = try await SQLiteLayer<String, Data>(url: url)
    for index in 0..<rows { try await writer.insert(value(index), for: key(index)) }
    try await writer.close()
    return url
  }

  static func key(_ index: Int) -> String { "key-\(10_000 + index)" }

  /// Whether reads are tried on callers' threads here: Linux, with the temporary directory on a
  /// local file system. Elsewhere every read goes to the layer's thread.
  static let inPlaceHere =
    SQLiteReaders.isSupported
    && fileSystemReadsFromMemoryWithoutWaiting(at: FileManager.default.temporaryDirectory.path)

  /// Reads `key` until a read is answered on the caller's thread (at most ten times: the kernel
  /// may turn an attempt away, as when the page is under readahead); returns whether one was.
  /// Each read must return `value`.
  static func readsInPlace<Value: Sendable & Equatable>(
    _ layer: SQLiteLayer<String, Value>, key: String, value: Value
  ) async throws -> Bool {
    for _ in 0..<10 {
      let before = await layer.statistics.readsInPlace
      #expect(try await layer.value(for: key) == value)
      if await layer.statistics.readsInPlace > before { return true }
    }
    return false
  }
  static func value(_ index: Int) -> Data { Data(repeating: UInt8(truncatingIfNeeded: index), count: 1_024) }

  @Test("reads whose pages are in memory are answered on the caller's thread, hits and misses alike")
  func readsFromMemoryCrossNoThread() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = try await Self.database(in: folder)
    let layer = try await SQLiteLayer<String, Data>(url: url)
    // The first read finds no reader open and goes to the layer's thread, which opens one after it.
    #expect(try await layer.value(for: Self.key(0)) == Self.value(0))
    _ = await layer.statistics  // a call on the layer's thread: the reader is open once it returns
    for index in 0..<200 { #expect(try await layer.value(for: Self.key(index)) == Self.value(index)) }
    #expect(try await layer.value(for: "missing") == nil)
    let statistics = await layer.statistics
    #expect(statistics.hits == 201)
    #expect(statistics.misses == 1)
    if Self.inPlaceHere {
      // Nearly all: the kernel may still say that a page would wait (one under readahead, say),
      // and that read goes to the layer's thread, as it must.
      #expect(statistics.readsInPlace >= 180, "\(statistics.readsInPlace) of 201 reads in place")
    } else {
      #expect(statistics.readsInPlace == 0)
    }
    try await layer.close()
  }

  @Test(
    "a read whose page would come from the device goes to the layer's thread, and waits there",
    .enabled(if: inPlaceHere, "reads on callers' threads: Linux, on a local file system"))
  func aReadThatWouldWaitGoesToTheLayersThread() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = try await Self.database(in: folder)
    let layer = try await SQLiteLayer<String, Data>(url: url)
    #expect(try await layer.value(for: Self.key(0)) == Self.value(0))
    let before = await layer.statistics  // the reader is open; it has read the first keys' pages
    try #require(SQLiteSlowDevice.holdReads(of: url.path))
    defer { SQLiteSlowDevice.releaseReads(of: url.path) }
    // The last key's page is in neither connection's cache: the reader's attempt would wait, so
    // the layer's thread reads it, and waits for the device.
    let last = 1_999
    let read = Task { try await layer.value(for: Self.key(last)) }
    #expect(await SQLiteSlowDevice.waitForHeldReads(of: url.path, count: 1, timeout: .seconds(30)))
    SQLiteSlowDevice.releaseReads(of: url.path)
    #expect(try await read.value == Self.value(last))
    let after = await layer.statistics
    #expect(after.readsInPlace == before.readsInPlace, "the attempt on the caller's thread gave up")
    #expect(after.hits == before.hits + 1)
    // Now in the page cache: read on the caller's thread again (the kernel may still turn one
    // attempt away; ten cannot all be).
    #expect(try await Self.readsInPlace(layer, key: Self.key(last), value: Self.value(last)))
    try await layer.close()
  }

  /// A read that waits for its device holds the layer's thread, never a cooperative one: with
  /// more layers' reads held than the machine has cores (the width of the cooperative pool), a
  /// thousand tasks that need the pool all run before any read is let go.
  @Test
  func readsWaitingForTheDeviceLeaveTheCooperativePoolFree() async throws {
    let layerCount = Swift.max(4, ProcessInfo.processInfo.activeProcessorCount + 1)
    let folders = try (0..<layerCount).map { _ in try TemporaryDirectory() }
    defer { for folder in folders { folder.remove() } }
    var created: [URL] = []
    for folder in folders { created.append(try await Self.database(in: folder)) }
    let urls = created
    var layers: [SQLiteLayer<String, Data>] = []
    for url in urls {
      let layer = try await SQLiteLayer<String, Data>(url: url)
      // A reader open, so that each held read is tried on the caller's thread first (and gives
      // up there), then waits on the layer's thread.
      #expect(try await layer.value(for: Self.key(0)) == Self.value(0))
      _ = await layer.statistics
      layers.append(layer)
    }
    for url in urls { try #require(SQLiteSlowDevice.holdReads(of: url.path)) }
    // Were the reads to block cooperative threads, this test's own task could not run to
    // release them: a thread of its own lets them go after 50 s, so that a regression fails the
    // test (within its time limit) instead of hanging the run. It ends when the test does.
    let finished = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
      if finished.wait(timeout: .now() + 50) == .timedOut {
        for url in urls { SQLiteSlowDevice.releaseReads(of: url.path) }
      }
    }
    defer {
      for url in urls { SQLiteSlowDevice.releaseReads(of: url.path) }  // a failed expectation leaves no thread blocked
      finished.signal()
    }
    // The last key's page is in neither of a layer's connections' caches.
    let reads = layers.map { layer in Task { try await layer.value(for: Self.key(1_999)) } }
    for url in urls {
      try #require(
        await SQLiteSlowDevice.waitForHeldReads(of: url.path, count: 1, timeout: .seconds(30)),
        "every layer's read waits in the device")
    }

    let counter = Counter()
    await withTaskGroup(of: Void.self) { group in
      for _ in 0..<1_000 { group.addTask { await counter.increment() } }
    }
    #expect(await counter.count == 1_000)
    for url in urls {
      #expect(SQLiteSlowDevice.heldReads(of: url.path) == 1, "the read was still held: the watchdog had not let it go")
    }

    for url in urls { SQLiteSlowDevice.releaseReads(of: url.path) }
    for read in reads { #expect(try await read.value == Self.value(1_999)) }
    for layer in layers { try await layer.close() }
  }

  /// Counts the tasks that reached it.
  private actor Counter {
    var count = 0
    func increment() { count += 1 }
  }

  @Test("a write is readable from its insert on, also while the batch that holds it commits")
  func writesStayReadableWhileTheirBatchCommits() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = try await Self.database(in: folder, rows: 10)
    let layer = try await SQLiteLayer<String, Int>(url: url)
    try await layer.insert(0, for: "counter")
    // Written, so that the read goes to the database (a pending write answers from memory) and
    // has the layer open a reader after it.
    try await layer.flush()
    _ = try await layer.value(for: "counter")
    _ = await layer.statistics  // a reader is open
    // Every insert schedules a background batch; readers on other tasks must never see a value
    // older than the last insert that returned before their read began. Each task yields after
    // each step, so that the batches commit while reads run, and the reads are bounded in
    // number, so that the test costs the same however long the batches take.
    let published = Locked(0)
    let rounds = 200
    try await withThrowingTaskGroup(of: Void.self) { group in
      group.addTask {
        for round in 1...rounds where !Task.isCancelled {
          try await layer.insert(round, for: "counter")
          published.withLock { $0 = round }
          if round % 25 == 0 { try await layer.flush() }
          await Task.yield()
        }
      }
      for _ in 0..<3 {
        group.addTask {
          for _ in 0..<300 where !Task.isCancelled {
            let floor = published.withLock { $0 }
            let found = try await layer.value(for: "counter")
            #expect(
              (found ?? -1) >= floor,
              "a read returned \(found.map(String.init) ?? "nothing") after \(floor) was written")
            // A read on the caller's thread does not suspend: let the writer have a thread.
            await Task.yield()
          }
        }
      }
      try await group.waitForAll()
    }
    // Most reads above found the write still pending; once it is written, reads are in place.
    try await layer.flush()
    #expect(try await Self.readsInPlace(layer, key: "counter", value: rounds) == Self.inPlaceHere)
    try await layer.close()
  }

  @Test("reads racing the layer's close get a value or the closed error, and close waits for none of them")
  func readsRacingCloseEndCleanly() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = try await Self.database(in: folder, rows: 100)
    let layer = try await SQLiteLayer<String, Data>(url: url)
    _ = try await layer.value(for: Self.key(0))
    _ = await layer.statistics
    let outcomes = Locked((values: 0, closed: 0, other: 0))
    await withTaskGroup(of: Void.self) { group in
      for task in 0..<4 {
        group.addTask {
          for index in 0..<2_000 where !Task.isCancelled {
            do {
              let found = try await layer.value(for: Self.key((index + task) % 100))
              outcomes.withLock { $0.values += found == Self.value((index + task) % 100) ? 1 : 0 }
            } catch let error as PersistenceError where error.code == .closed {
              outcomes.withLock { $0.closed += 1 }
              return
            } catch {
              outcomes.withLock { $0.other += 1 }
              return
            }
          }
        }
      }
      group.addTask { try? await layer.close() }
    }
    let (values, closed, other) = outcomes.withLock { $0 }
    #expect(other == 0)
    #expect(values + closed > 0)
    await #expect(throws: PersistenceError.self) { try await layer.value(for: Self.key(0)) }
    // The files are the layer's no more: a new layer opens them, and its own reads work.
    let reopened = try await SQLiteLayer<String, Data>(url: url)
    #expect(try await reopened.value(for: Self.key(5)) == Self.value(5))
    try await reopened.close()
  }

  @Test("reads on the caller's thread record access times: the least recently read row is evicted first")
  func readsInPlaceKeepTheRecencyOrder() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let clock = ManualClock()
    var configuration = SQLiteLayer<String, Data>.Configuration(countLimit: 3)
    configuration.clock = clock
    configuration.accessTimeResolution = .zero
    let url = folder.appending("cache.sqlite")
    let layer = try await SQLiteLayer<String, Data>(url: url, configuration: configuration)
    for index in 0..<3 {
      try await layer.insert(Self.value(index), for: Self.key(index))
      clock.advance(by: .seconds(1))
    }
    try await layer.flush()
    _ = try await layer.value(for: Self.key(1))
    _ = await layer.statistics  // a reader is open
    clock.advance(by: .seconds(1))
    // Key 0, the oldest write, is read now, on the caller's thread.
    #expect(try await Self.readsInPlace(layer, key: Self.key(0), value: Self.value(0)) == Self.inPlaceHere)
    clock.advance(by: .seconds(1))
    try await layer.insert(Self.value(3), for: Self.key(3))
    try await layer.flush()
    // Key 2 was read least recently (written at second 2, never read): it makes room.
    #expect(try await layer.value(for: Self.key(2)) == nil)
    #expect(try await layer.value(for: Self.key(0)) == Self.value(0))
    #expect(try await layer.value(for: Self.key(1)) == Self.value(1))
    #expect(try await layer.value(for: Self.key(3)) == Self.value(3))
    try await layer.close()
  }
}
