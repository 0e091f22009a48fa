import AsyncCache
import AsyncCacheSQLite
import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

/// RELIABILITY rows 9 and 10: other processes holding locks, writing, and dying mid-write.
@Suite(
  "SQLiteLayer with other processes", .timeLimit(.minutes(5)),
  .enabled(if: Probe.unavailableReason == nil, "\(Probe.unavailableReason ?? "")"))
struct SQLiteLayerProcessTests {
  @Test("a write lock held by another process past the busy timeout is a typed busy error, not a hang")
  func busy() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let layer = try await SQLiteLayer<String, String>(url: url, configuration: .init(busyTimeout: .milliseconds(200)))
    try await layer.insert("before", for: "a")
    try await layer.flush()

    let holder = try Probe(["sqlite-hold-write-lock", url.path])
    #expect(await holder.waitForLine(startingWith: "locked") != nil)
    try await layer.insert("during", for: "b")
    await #expect {
      try await layer.flush()
    } throws: { error in
      let error = error as? PersistenceError
      return error?.code == .busy && (error?.underlying as? SQLiteError)?.primaryResultCode == 5
    }
    #expect(try await layer.value(for: "a") == "before", "reads go on while another process writes (WAL)")
    #expect(try await layer.value(for: "b") == "during", "the failed write stays pending and readable")
    #expect(await layer.statistics.failedWrites >= 1)

    holder.closeInput()
    #expect(await holder.waitForLine(startingWith: "released") != nil)
    #expect(await holder.waitForExit() == 0)
    try await layer.flush()
    #expect(try RawDatabase(url).rowCount() == 2)
  }

  @Test("a write retried after another connection wrote the key never brings back the older value")
  func retriedWriteKeepsNewerValue() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let x = try await SQLiteLayer<String, String>(url: url, configuration: .init(busyTimeout: .milliseconds(100)))
    let y = try await SQLiteLayer<String, String>(url: url)
    try await x.insert("kept", for: "survivor")
    try await x.flush()

    let holder = try Probe(["sqlite-hold-write-lock", url.path])
    #expect(await holder.waitForLine(startingWith: "locked") != nil)
    try await x.insert("old", for: "k")
    try await x.removeAll()
    try await x.insert("old too", for: "k2")
    await #expect(throws: PersistenceError.self) { try await x.flush() }
    holder.closeInput()
    #expect(await holder.waitForExit() == 0)

    // After x's writes (which are still pending), y writes the same keys and a new one.
    try await y.insert("new", for: "k")
    try await y.insert("newer", for: "k2")
    try await y.insert("after the removeAll", for: "k3")
    try await y.flush()
    try await x.flush()

    #expect(try await y.value(for: "k") == "new")
    #expect(try await y.value(for: "k2") == "newer")
    #expect(try await y.value(for: "k3") == "after the removeAll", "x's older removeAll spares y's later write")
    #expect(try await y.value(for: "survivor") == nil, "x's removeAll did remove what came before it")
  }

  @Test("a background write waiting on another process's lock does not hold reads for the busy timeout")
  func readsAreNotHeldByBackgroundWrites() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let busyTimeout = Duration.seconds(150)
    let layer = try await SQLiteLayer<String, String>(url: url, configuration: .init(busyTimeout: busyTimeout))
    try await layer.insert("committed", for: "a")
    try await layer.flush()

    let holder = try Probe(["sqlite-hold-write-lock", url.path])
    #expect(await holder.waitForLine(startingWith: "locked") != nil)
    // Released however the test ends (killed and reaped when dropped, if it has not exited).
    defer { holder.closeInput() }
    try await layer.insert("pending", for: "b")  // schedules a background write, which cannot commit
    let clock = ContinuousClock()
    let start = clock.now
    for _ in 0..<5 { #expect(try await layer.value(for: "a") == "committed") }
    // A liveness bound, not a speed target (it holds by a wide margin even under
    // ThreadSanitizer on a loaded machine): a read held by a background write waiting the full
    // busy timeout would take 150 s.
    #expect(start.duration(to: clock.now) < busyTimeout / 3)
    #expect(try await layer.value(for: "b") == "pending")
    holder.closeInput()
    #expect(await holder.waitForExit() == 0)
  }

  @Test("a write that fails stays readable throughout, also to reads made while it was being tried")
  func failingWriteStaysReadable() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let layer = try await SQLiteLayer<String, String>(url: url, configuration: .init(busyTimeout: .milliseconds(300)))
    try await layer.insert("old", for: "k")
    try await layer.flush()

    let holder = try Probe(["sqlite-hold-write-lock", url.path])
    #expect(await holder.waitForLine(startingWith: "locked") != nil)
    // Released however the test ends (killed and reaped when dropped, if it has not exited).
    defer { holder.closeInput() }
    try await layer.insert("new", for: "k")
    // While a batch waits for the lock it is out of the pending writes; it is put back when it
    // fails. Reads made meanwhile must still see it, never the older row.
    let finished = Locked(false)
    let flushing = Task {
      defer { finished.withLock { $0 = true } }
      try await layer.flush()
    }
    var reads = 0
    var stale = 0
    while !finished.withLock({ $0 }) {
      if try await layer.value(for: "k") != "new" { stale += 1 }
      reads += 1
      await Task.yield()
    }
    await #expect(throws: PersistenceError.self) { try await flushing.value }
    #expect(try await layer.value(for: "k") == "new")
    #expect(stale == 0, "\(stale) of \(reads) reads returned the older row")
    holder.closeInput()
    #expect(await holder.waitForExit() == 0)
  }

  @Test("a background write that failed on a lock is retried on the layer's clock until it commits")
  func backgroundRetry() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let clock = ManualClock()
    let (events, continuation) = AsyncStream.makeStream(of: SQLiteLayerEvent.self)
    let layer = try await SQLiteLayer<String, String>(
      url: url, configuration: .init(clock: clock, eventHandler: { continuation.yield($0) }))

    let holder = try Probe(["sqlite-hold-write-lock", url.path])
    #expect(await holder.waitForLine(startingWith: "locked") != nil)
    try await layer.insert("v", for: "k")  // the background write fails after 100 ms
    await clock.waitForSleepers(1)  // and a retry waits on the clock
    clock.advance(by: .milliseconds(100))
    await clock.waitForSleepers(1)  // the retry failed too: the next one waits 200 ms
    holder.closeInput()
    #expect(await holder.waitForExit() == 0)
    clock.advance(by: .milliseconds(200))

    var failures = 0
    for await event in events {
      if case .writeFailed(let error) = event {
        #expect(error.code == .busy)
        failures += 1
      }
      if case .writesRecovered = event { break }
    }
    #expect(failures == 2)
    #expect(try RawDatabase(url).rowCount() == 1, "the retry committed without any flush()")
    #expect(clock.sleeperCount == 0)
  }

  @Test("writes made while a damaged file cannot be reset (another process holds its lock) are not lost")
  func writesSurviveAFailedRecovery() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    do {
      let writer = try await SQLiteLayer<String, Data>(url: url)
      for index in 0..<200 { try await writer.insert(Data(repeating: UInt8(index), count: 2000), for: "k\(index)") }
      try await writer.close()
      try RawDatabase(url).execute("PRAGMA wal_checkpoint(TRUNCATE)")
    }
    let layer = try await SQLiteLayer<String, Data>(url: url, configuration: .init(busyTimeout: .milliseconds(200)))
    let holder = try Probe(["sqlite-hold-write-lock", url.path])
    #expect(await holder.waitForLine(startingWith: "locked") != nil)
    try SQLiteLayerDamageTests.overwritePages(of: url)
    // With its header gone too, reconnecting fails as well until the file can be reset.
    let handle = try FileHandle(forUpdating: url)
    try handle.write(contentsOf: Data(count: 100))
    try handle.close()

    // The read finds the damage but cannot empty the file while the other process holds it.
    await #expect { try await layer.value(for: "k5") } throws: { ($0 as? PersistenceError)?.code == .busy }
    try await layer.insert(Data([42]), for: "new")  // its background write fails as well
    #expect(try await layer.value(for: "new") == Data([42]))
    #expect(await layer.statistics.pendingWrites == 1, "the write is still pending, not dropped")
    holder.closeInput()
    #expect(await holder.waitForExit() == 0)

    try await layer.flush()
    let reopened = try await SQLiteLayer<String, Data>(url: url)
    #expect(try await reopened.value(for: "new") == Data([42]))
    #expect(await layer.statistics.databaseReplacements == 1)
    let copies = folder.listing().filter { $0.hasPrefix("cache.sqlite.corrupt-") && !$0.hasSuffix("-wal") }
    #expect(copies.count == 1, "one copy of the damaged file, however many attempts: \(copies)")
  }

  @Test("two processes writing the same file read each other's writes")
  func twoWriters() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let child = try Probe(["sqlite-write", url.path, "default", "child", "200"])
    let layer = try await SQLiteLayer<String, String>(url: url)
    for index in 0..<200 { try await layer.insert("parent \(index)", for: "parent\(index)") }
    try await layer.flush()
    #expect(await child.waitForLine(startingWith: "flushed") != nil)

    for index in [0, 99, 199] {
      #expect(try await layer.value(for: "child\(index)") == "child \(index)")
      child.send("parent\(index)")
      #expect(await child.waitForLine(startingWith: "value") == "value parent\(index) parent \(index)")
    }
    child.closeInput()
    #expect(await child.waitForExit() == 0)
    #expect(try await layer.usage.count == 400, "the totals stay exact with two writers")
    #expect(try Set(await layer.keys).count == 400)
  }

  @Test(
    "a process killed mid-write leaves only whole values behind",
    arguments: [UInt64(1), 2, 3, 4, 5])
  func killedMidWrite(seed: UInt64) async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    var generator = SplitMix(seed: seed)
    for round in 0..<3 {
      let writer = try Probe(["sqlite-write-loop", url.path, "\(seed &* 31 &+ UInt64(round))"])
      // Kill it at a seeded step: right after a commit, while the next large value is being
      // encoded, bound or committed.
      let steps = Int(generator.next() % 12) + 1
      for _ in 0..<steps { #expect(await writer.waitForLine(startingWith: "wrote") != nil) }
      await writer.kill()
    }
    let layer = try await SQLiteLayer<String, Data>(url: url, configuration: .init(sizeLimit: 256 << 20))
    let keys = try await layer.keys
    #expect(!keys.isEmpty)
    for key in keys {
      let value = try #require(try await layer.value(for: key))
      #expect(ProbeValue.version(of: value, key: key) != nil, "\(key) holds a torn value")
    }
    #expect(await layer.statistics.damagedEntries == 0)
  }
}
