import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import TestSupport
import Testing

@testable import AsyncCache

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// A ``DiskFileSystem`` that passes calls on to the real one, records them, and fails the ones a
/// test scripts: the faults a machine cannot produce on demand, and the seam-based twins of the
/// tests that need a tmpfs mount.
final class FakeDiskFileSystem: DiskFileSystem {
  enum Operation: String, Sendable, CaseIterable {
    case openForReading, createExclusively, read, write, status, synchronize, close, touch, rename
    case removeFile, synchronizeDirectory, createDirectory, contentsOfDirectory
  }

  private struct Fault {
    var code: Int32
    /// For writes: how many more bytes may be written before the fault strikes.
    var bytesAllowed: Int
  }

  /// Reads held as a slow device holds them (``holdReads()``): each blocks its thread on `gate`
  /// until ``releaseReads()``, and says so on `entered` first.
  private struct Hold {
    var entered: AsyncStream<Void>.Continuation
    var gate: DispatchSemaphore
    var blocked = 0
  }

  private struct State {
    var answersCachedReads = false
    var cachedReads = 0
    var calls: [Operation] = []
    var callsOffExecutor: [Operation] = []
    var faults: [Operation: Fault] = [:]
    var openDescriptors: Set<Int32> = []
    var hold: Hold?
  }

  private let live = POSIXDiskFileSystem()
  private let state = Locked(State())

  /// Makes every later call of `operation` fail with `code`; for writes, only once
  /// `afterBytes` more bytes were written (a write that crosses the mark is cut short there).
  func fail(_ operation: Operation, with code: Int32, afterBytes: Int = 0) {
    state.withLock { $0.faults[operation] = Fault(code: code, bytesAllowed: afterBytes) }
  }

  /// Makes every later read block its thread, as on a slow device, until ``releaseReads()``;
  /// the stream gets an element as each read begins to wait.
  func holdReads() -> AsyncStream<Void> {
    releaseReads()  // a hold before this one lets its reads go
    let (entered, continuation) = AsyncStream<Void>.makeStream()
    state.withLock { $0.hold = Hold(entered: continuation, gate: DispatchSemaphore(value: 0)) }
    return entered
  }

  /// Lets the held reads, and every later one, through.
  func releaseReads() {
    guard
      let hold = state.withLock({ state -> Hold? in
        defer { state.hold = nil }
        return state.hold
      })
    else { return }
    for _ in 0..<hold.blocked { hold.gate.signal() }
    hold.entered.finish()
  }

  /// How many reads the hold has stopped (each is held until released).
  var heldReads: Int { state.withLock { $0.hold?.blocked ?? 0 } }

  /// Whether ``readCached(_:size:closeElsewhere:)`` answers as the live file system does (on Linux:
  /// from memory, without waiting), unless reads are held, when it says they would wait. Off by
  /// default: every read then goes to the layer's thread, where the other calls are recorded.
  var answersCachedReads: Bool {
    get { state.withLock { $0.answersCachedReads } }
    set { state.withLock { $0.answersCachedReads = newValue } }
  }

  /// How many reads the layer tried on a caller's thread.
  var cachedReads: Int { state.withLock { $0.cachedReads } }

  func prepareCachedReads(in directory: String) {
    live.prepareCachedReads(in: directory)
  }

  func readCached(_ path: String, size: Int, closeElsewhere: (Int32) -> Void) -> CachedRead {
    let answers = state.withLock { state in
      state.cachedReads += 1
      return state.answersCachedReads && state.hold == nil
    }
    return answers ? live.readCached(path, size: size, closeElsewhere: closeElsewhere) : .unavailable
  }

  /// Lets every call through again.
  func heal() {
    state.withLock { $0.faults.removeAll() }
  }

  /// The calls made so far, in order.
  var calls: [Operation] { state.withLock { $0.calls } }

  /// How many calls of `operation` were made.
  func count(of operation: Operation) -> Int { calls.filter { $0 == operation }.count }

  /// Forgets the calls made so far.
  func resetCalls() { state.withLock { $0.calls.removeAll() } }

  /// Calls made on a thread that is not running a ``BlockingExecutor`` job.
  var callsOffExecutor: [Operation] { state.withLock { $0.callsOffExecutor } }

  /// Descriptors opened and not closed.
  var openDescriptorCount: Int { state.withLock { $0.openDescriptors.count } }

  /// Records the call, and throws the scripted fault, if any.
  private func enter(_ operation: Operation, _ path: String) throws(DiskSystemError) {
    let onExecutor = BlockingExecutor.isCurrent
    let fault = state.withLock { state -> Fault? in
      state.calls.append(operation)
      if !onExecutor { state.callsOffExecutor.append(operation) }
      return state.faults[operation]
    }
    if let fault, operation != .write || fault.bytesAllowed == 0 {
      throw DiskSystemError(code: fault.code, operation: operation.rawValue, path: path)
    }
  }

  func openForReading(_ path: String) throws(DiskSystemError) -> Int32 {
    try enter(.openForReading, path)
    let descriptor = try live.openForReading(path)
    state.withLock { _ = $0.openDescriptors.insert(descriptor) }
    return descriptor
  }

  func createExclusively(_ path: String) throws(DiskSystemError) -> Int32 {
    try enter(.createExclusively, path)
    let descriptor = try live.createExclusively(path)
    state.withLock { _ = $0.openDescriptors.insert(descriptor) }
    return descriptor
  }

  func read(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(DiskSystemError) -> Int {
    try enter(.read, "fd \(descriptor)")
    let hold = state.withLock { state -> Hold? in
      state.hold?.blocked += 1
      return state.hold
    }
    if let hold {
      hold.entered.yield()
      hold.gate.wait()
    }
    return try live.read(descriptor, into: buffer)
  }

  func write(_ descriptor: Int32, from buffer: UnsafeRawBufferPointer) throws(DiskSystemError) -> Int {
    try enter(.write, "fd \(descriptor)")
    // Cut the write short at the fault's mark, as a file system that fills up does.
    let allowed = state.withLock { state -> Int in
      guard var fault = state.faults[.write] else { return buffer.count }
      let allowed = Swift.min(buffer.count, fault.bytesAllowed)
      fault.bytesAllowed -= allowed
      state.faults[.write] = fault
      return allowed
    }
    return try live.write(descriptor, from: UnsafeRawBufferPointer(rebasing: buffer[..<allowed]))
  }

  func status(_ descriptor: Int32) throws(DiskSystemError) -> DiskFileStatus {
    try enter(.status, "fd \(descriptor)")
    return try live.status(descriptor)
  }

  func synchronize(_ descriptor: Int32) throws(DiskSystemError) {
    try enter(.synchronize, "fd \(descriptor)")
    try live.synchronize(descriptor)
  }

  func close(_ descriptor: Int32) throws(DiskSystemError) {
    state.withLock { _ = $0.openDescriptors.remove(descriptor) }
    do {
      try enter(.close, "fd \(descriptor)")
    } catch {
      try? live.close(descriptor)  // a failing close still releases the descriptor
      throw error
    }
    try live.close(descriptor)
  }

  func touch(_ descriptor: Int32) -> Bool {
    do {
      try enter(.touch, "fd \(descriptor)")
    } catch {
      return false
    }
    return live.touch(descriptor)
  }

  func rename(_ source: String, to destination: String) throws(DiskSystemError) {
    try enter(.rename, source)
    try live.rename(source, to: destination)
  }

  func removeFile(_ path: String) throws(DiskSystemError) {
    try enter(.removeFile, path)
    try live.removeFile(path)
  }

  func synchronizeDirectory(_ path: String) throws(DiskSystemError) {
    try enter(.synchronizeDirectory, path)
    try live.synchronizeDirectory(path)
  }

  func createDirectory(_ path: String) throws(DiskSystemError) {
    try enter(.createDirectory, path)
    try live.createDirectory(path)
  }

  func contentsOfDirectory(_ path: String) throws(DiskSystemError) -> [String] {
    try enter(.contentsOfDirectory, path)
    return try live.contentsOfDirectory(path)
  }
}

/// Whether `error` is a ``PersistenceError`` with `code`.
private func isPersistenceError(_ error: any Error, _ code: PersistenceError.Code) -> Bool {
  (error as? PersistenceError)?.code == code
}

@Suite("DiskLayer faults", .timeLimit(.minutes(3)))
struct DiskLayerFaultTests {
  // MARK: A full disk

  /// Row 6, for real: a 64 KiB tmpfs fills up.
  @Test(
    .enabled("needs a tmpfs mount (root on Linux); the seam-based twin runs everywhere") {
      TmpfsMount.unavailableReason == nil
    })
  func aFullFileSystemIsATypedErrorThatLeavesNoTemporaryFile() async throws {
    let mount = try #require(try TmpfsMount.mount(sizeInBytes: 64 * 1024))
    defer { mount.unmount() }
    let directory = mount.url.appendingPathComponent("cache")
    let layer = try await DiskLayer<String, Data>(directory: directory, configuration: .init(sizeLimit: 1 << 20))
    try await layer.insert(diskBytes(100), for: "small")
    var stored: [String] = []
    var failure: (any Error)?
    for index in 0..<32 {
      do {
        try await layer.insert(diskBytes(6000, seed: UInt8(index)), for: "k\(index)")
        stored.append("k\(index)")
      } catch {
        failure = error
        break
      }
    }
    let error = try #require(failure, "a 64 KiB file system took 32 values of 6 KB")
    #expect(isPersistenceError(error, .noSpace))
    #expect((error as? PersistenceError)?.underlying as? POSIXError == POSIXError(.ENOSPC))
    let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
    #expect(names.allSatisfy { !$0.contains(".tmp-") })
    #expect(names.count == stored.count + 1)
    // Reads still work, and a failed replacement leaves the previous value.
    #expect(try await layer.value(for: "small") == diskBytes(100))
    await #expect { try await layer.insert(diskBytes(40_000), for: "small") } throws: {
      isPersistenceError($0, .noSpace)
    }
    #expect(try await layer.value(for: "small") == diskBytes(100))
    for (index, key) in stored.enumerated() {
      #expect(try await layer.value(for: key) == diskBytes(6000, seed: UInt8(index)))
    }
    #expect(await layer.statistics.failedWrites == 2)
    // Space freed by removals is usable again.
    for key in stored { try await layer.removeValue(for: key) }
    try await layer.insert(diskBytes(6000), for: "again")
    #expect(try await layer.value(for: "again") == diskBytes(6000))
  }

  /// Row 6 through the seam: the disk fills up part-way through the value.
  @Test(arguments: [0, 10, 40, 41, 5000])
  func aWriteThatRunsOutOfSpaceLeavesThePreviousValue(afterBytes: Int) async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let fileSystem = FakeDiskFileSystem()
    let layer = try await fixture.open(fileSystem: fileSystem)
    try await layer.insert(diskBytes(100), for: "a")
    fileSystem.fail(.write, with: ENOSPC, afterBytes: afterBytes)
    await #expect { try await layer.insert(diskBytes(10_000, seed: 2), for: "a") } throws: { error in
      isPersistenceError(error, .noSpace) && "\(error)".contains("\"a\"")
    }
    await #expect { try await layer.insert(diskBytes(10_000), for: "b") } throws: { isPersistenceError($0, .noSpace) }
    #expect(fixture.temporaryNames.isEmpty)
    #expect(fileSystem.openDescriptorCount == 0)
    #expect(try await layer.value(for: "a") == diskBytes(100))
    #expect(try await layer.value(for: "b") == nil)
    let statistics = await layer.statistics
    #expect(statistics.failedWrites == 2 && statistics.writes == 1)
    #expect(statistics.count == 1 && statistics.totalBytes == fixture.bytesOnDisk)
    fileSystem.heal()
    try await layer.insert(diskBytes(10_000, seed: 2), for: "a")
    #expect(try await layer.value(for: "a") == diskBytes(10_000, seed: 2))
  }

  // MARK: A read-only file system

  /// Row 6, for real: the tmpfs is remounted read-only under a running layer.
  @Test(
    .enabled("needs a tmpfs mount (root on Linux); the seam-based twin runs everywhere") {
      TmpfsMount.unavailableReason == nil
    })
  func aReadOnlyFileSystemStillServesReads() async throws {
    let mount = try #require(try TmpfsMount.mount(sizeInBytes: 1 << 20))
    defer { mount.unmount() }
    let directory = mount.url.appendingPathComponent("cache")
    let layer = try await DiskLayer<String, Data>(directory: directory)
    try await layer.insert(diskBytes(500), for: "a")
    try await layer.insert(diskBytes(500), for: "b")
    try mount.remount(readOnly: true)
    defer { try? mount.remount(readOnly: false) }
    #expect(try await layer.value(for: "a") == diskBytes(500))
    await #expect { try await layer.insert(diskBytes(10), for: "a") } throws: { isPersistenceError($0, .readOnly) }
    await #expect { try await layer.insert(diskBytes(10), for: "c") } throws: { isPersistenceError($0, .readOnly) }
    await #expect { try await layer.removeValue(for: "b") } throws: { isPersistenceError($0, .readOnly) }
    #expect(try await layer.value(for: "a") == diskBytes(500))
    #expect(try await layer.value(for: "b") == diskBytes(500))
    // A layer opened on the read-only directory reads what is there.
    let reopened = try await DiskLayer<String, Data>(directory: directory)
    #expect(try await reopened.value(for: "b") == diskBytes(500))
    #expect(await Set(reopened.keys) == ["a", "b"])
    let names = try FileManager.default.contentsOfDirectory(atPath: directory.path)
    #expect(names.count == 2)
    #expect(await layer.statistics.failedWrites == 2)
  }

  /// Row 6 through the seam: the file system refuses writes.
  @Test(arguments: [EROFS, EACCES, EPERM])
  func aFileSystemThatRefusesWritesIsATypedError(code: Int32) async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let fileSystem = FakeDiskFileSystem()
    let layer = try await fixture.open(fileSystem: fileSystem)
    try await layer.insert(diskBytes(100), for: "a")
    fileSystem.fail(.createExclusively, with: code)
    fileSystem.fail(.removeFile, with: code)
    await #expect { try await layer.insert(diskBytes(10), for: "a") } throws: { isPersistenceError($0, .readOnly) }
    await #expect { try await layer.removeValue(for: "a") } throws: { isPersistenceError($0, .readOnly) }
    await #expect { try await layer.removeAll() } throws: { isPersistenceError($0, .readOnly) }
    #expect(try await layer.value(for: "a") == diskBytes(100))
    #expect(await layer.count == 1)
    #expect(fixture.temporaryNames.isEmpty)
  }

  @Test func anOpenThatCannotCreateTheDirectoryIsATypedError() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let fileSystem = FakeDiskFileSystem()
    fileSystem.fail(.createDirectory, with: EROFS)
    await #expect { _ = try await fixture.open(fileSystem: fileSystem) } throws: { isPersistenceError($0, .readOnly) }
  }

  // MARK: Failing steps of a write

  @Test(
    "a write that fails at any step leaves the previous value and no temporary file",
    arguments: [
      FakeDiskFileSystem.Operation.synchronize, .close, .rename,
    ])
  func failingStep(operation: FakeDiskFileSystem.Operation) async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let fileSystem = FakeDiskFileSystem()
    let layer = try await fixture.open(fileSystem: fileSystem)
    try await layer.insert(diskBytes(100), for: "a")
    fileSystem.fail(operation, with: EIO)
    await #expect { try await layer.insert(diskBytes(50, seed: 2), for: "a") } throws: {
      isPersistenceError($0, .ioFailure)
    }
    fileSystem.heal()
    #expect(fixture.temporaryNames.isEmpty)
    #expect(fileSystem.openDescriptorCount == 0)
    #expect(try await layer.value(for: "a") == diskBytes(100))
    let reopened = try await fixture.open()
    #expect(try await reopened.value(for: "a") == diskBytes(100))
  }

  @Test func aFailedDirectoryFlushReportsAnErrorButKeepsTheNewValue() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let fileSystem = FakeDiskFileSystem()
    let layer = try await fixture.open(fileSystem: fileSystem)
    fileSystem.fail(.synchronizeDirectory, with: EIO)
    await #expect { try await layer.insert(diskBytes(50), for: "a") } throws: { isPersistenceError($0, .ioFailure) }
    #expect(try await layer.value(for: "a") == diskBytes(50))
    #expect(await layer.statistics.writes == 1)
  }

  @Test func aReadErrorIsAnIOFailureAndKeepsTheEntry() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let fileSystem = FakeDiskFileSystem()
    let layer = try await fixture.open(fileSystem: fileSystem)
    try await layer.insert(diskBytes(50), for: "a")
    fileSystem.fail(.read, with: EIO)
    await #expect { _ = try await layer.value(for: "a") } throws: { isPersistenceError($0, .ioFailure) }
    fileSystem.heal()
    #expect(fileSystem.openDescriptorCount == 0)
    #expect(try await layer.value(for: "a") == diskBytes(50))
  }

  // MARK: A deleted directory

  @Test func aDeletedDirectoryIsRecreatedByTheNextWrite() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open()
    try await layer.insert(diskBytes(10), for: "a")
    try await layer.insert(diskBytes(10), for: "b")
    try FileManager.default.removeItem(at: fixture.directory)
    #expect(try await layer.value(for: "a") == nil)  // reads still work: a miss
    try await layer.insert(diskBytes(20), for: "c")
    #expect(try await layer.value(for: "c") == diskBytes(20))
    #expect(try await layer.value(for: "b") == nil)
    #expect(await layer.count == 1)
    #expect(await layer.totalBytes == diskEntrySize(key: "c", valueCount: 20))
    #expect(fixture.names == [fixture.file(for: "c").lastPathComponent])
    let reopened = try await fixture.open()
    #expect(await reopened.keys == ["c"])
    // removeAll on a deleted directory has nothing to do.
    try FileManager.default.removeItem(at: fixture.directory)
    try await reopened.removeAll()
    #expect(await reopened.count == 0)
  }

  @Test func openingCreatesMissingParentDirectories() async throws {
    let parent = try TemporaryDirectory("disklayer")
    defer { parent.remove() }
    let directory = parent.appending("a/b/c")
    let layer = try await DiskLayer<String, Data>(directory: directory)
    try await layer.insert(Data([1]), for: "x")
    #expect(parent.listing().contains("a/b/c/\(SHA256.hash(Array("x".utf8)).hexString)"))
  }

  // MARK: Threads and costs

  /// Every file-system call, opening included, runs on the layer's executor, off the
  /// cooperative thread pool.
  @Test func everyFileSystemCallRunsOffTheCooperativePool() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    try await fixture.open().insert(diskBytes(10), for: "seed")  // something for the scan to read
    let fileSystem = FakeDiskFileSystem()
    let layer = try await fixture.open(.init(countLimit: 2), fileSystem: fileSystem)
    try await layer.insert(diskBytes(10), for: "a")
    try await layer.insert(diskBytes(10), for: "b")
    _ = try await layer.value(for: "a")
    _ = try await layer.value(for: "missing")
    try await layer.removeValue(for: "a")
    _ = await layer.removeExpired()
    try await layer.removeAll()
    #expect(fileSystem.calls.count > 10)
    #expect(fileSystem.callsOffExecutor.isEmpty)
    #expect(!BlockingExecutor.isCurrent)
  }

  /// A read that waits for its device holds the layer's thread, never a cooperative one: with
  /// more layers' reads blocked in the file system than the machine has cores (the width of the
  /// cooperative pool), a thousand tasks that need the pool all run before any read is let go.
  @Test(.timeLimit(.minutes(1)))
  func readsWaitingForTheDeviceLeaveTheCooperativePoolFree() async throws {
    let fileSystem = FakeDiskFileSystem()
    // Reads tried on the caller's thread first, as on Linux: held ones would wait, so they go
    // to the layers' threads, and wait there.
    fileSystem.answersCachedReads = true
    let layerCount = Swift.max(4, ProcessInfo.processInfo.activeProcessorCount + 1)
    let fixtures = try (0..<layerCount).map { _ in try DiskFixture() }
    defer { for fixture in fixtures { fixture.remove() } }
    var layers: [DiskLayer<String, Data>] = []
    for fixture in fixtures {
      let layer = try await fixture.open(fileSystem: fileSystem)
      try await layer.insert(diskBytes(100), for: "a")
      layers.append(layer)
    }
    let blocked = fileSystem.holdReads()
    // Were the reads to block cooperative threads, this test's own task could not run to
    // release them: a thread of its own lets them go after 50 s, so that a regression fails the
    // test (within its time limit) instead of hanging the run. It ends when the test does.
    let finished = DispatchSemaphore(value: 0)
    Thread.detachNewThread {
      if finished.wait(timeout: .now() + 50) == .timedOut { fileSystem.releaseReads() }
    }
    defer {
      fileSystem.releaseReads()  // a failed expectation leaves no thread blocked
      finished.signal()
    }
    let reads = layers.map { layer in Task { try await layer.value(for: "a") } }
    var entered = 0
    for await _ in blocked {
      entered += 1
      if entered == layers.count { break }
    }
    try #require(entered == layers.count, "every layer's read waits in the device")

    let counter = Counter()
    await withTaskGroup(of: Void.self) { group in
      for _ in 0..<1_000 { group.addTask { await counter.increment() } }
    }
    #expect(await counter.count == 1_000)
    #expect(fileSystem.heldReads == layers.count, "the reads were still held: the watchdog had not let them go")

    fileSystem.releaseReads()
    for read in reads { #expect(try await read.value == diskBytes(100)) }
  }

  /// Counts the tasks that reached it.
  private actor Counter {
    var count = 0
    func increment() { count += 1 }
  }

  @Test func aMissForAnUnknownKeyCostsNoIOAndAHitOneOpenReadAndClose() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let fileSystem = FakeDiskFileSystem()
    let layer = try await fixture.open(fileSystem: fileSystem)
    try await layer.insert(diskBytes(100_000), for: "a")
    fileSystem.resetCalls()
    #expect(try await layer.value(for: "b") == nil)
    #expect(fileSystem.calls.isEmpty)
    #expect(try await layer.value(for: "a") == diskBytes(100_000))
    #expect(fileSystem.calls == [.openForReading, .read, .close])
  }

  @Test func descriptorsAreClosedAfterEveryOperation() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    for key in ["a", "b"] { try await fixture.open().insert(diskBytes(10), for: key) }
    try Data("junk".utf8).write(to: fixture.file(for: "b"))
    let fileSystem = FakeDiskFileSystem()
    let layer = try await fixture.open(fileSystem: fileSystem)
    #expect(fileSystem.openDescriptorCount == 0)
    try await layer.insert(diskBytes(10), for: "c")
    _ = try await layer.value(for: "a")
    try FileManager.default.removeItem(at: fixture.file(for: "c"))
    _ = try await layer.value(for: "c")
    #expect(fileSystem.openDescriptorCount == 0)
    #expect(fileSystem.count(of: .openForReading) + fileSystem.count(of: .createExclusively) > 0)
  }

  // MARK: The executor

  @Test func theBlockingExecutorRunsClosuresOnItsQueue() async throws {
    let executor = try BlockingExecutor(label: "test")
    #expect(!BlockingExecutor.isCurrent)
    #expect(try await executor.run { BlockingExecutor.isCurrent })
    await #expect(throws: TestError.self) { try await executor.run { throw TestError() } }
    // Concurrent callers' jobs all run, one at a time.
    let counts = Locked((running: 0, most: 0, done: 0))
    try await withThrowingTaskGroup(of: Void.self) { group in
      for _ in 0..<50 {
        group.addTask {
          try await executor.run {
            counts.withLock {
              $0.running += 1
              $0.most = max($0.most, $0.running)
            }
            usleep(200)  // long enough for a second thread to overlap, were the queue concurrent
            counts.withLock {
              $0.running -= 1
              $0.done += 1
            }
          }
        }
      }
      try await group.waitForAll()
    }
    #expect(counts.withLock { $0.done } == 50)
    #expect(counts.withLock { $0.most } == 1)
  }
}
