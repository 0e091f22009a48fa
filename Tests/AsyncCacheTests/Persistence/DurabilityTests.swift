import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// The flush that makes files and renames survive a power loss: `F_FULLFSYNC` on Apple platforms
/// (whose `fsync` leaves data in the drive's cache), `fsync` elsewhere. The Apple branch cannot
/// run here; its logic runs through the seam, with scripted system calls.
@Suite("Durability")
struct DurabilityTests {
  /// Scripted results for the two system calls, and the calls made.
  final class Calls {
    var fullSyncResults: [Int32]
    var fsyncResults: [Int32]
    var made: [String] = []

    init(fullSync: [Int32], fsync: [Int32]) {
      fullSyncResults = fullSync
      fsyncResults = fsync
    }

    func fullSync(_ descriptor: Int32) -> Int32 {
      made.append("fullSync(\(descriptor))")
      return fullSyncResults.removeFirst()
    }

    func fsync(_ descriptor: Int32) -> Int32 {
      made.append("fsync(\(descriptor))")
      return fsyncResults.removeFirst()
    }
  }

  @Test("Apple platforms flush with F_FULLFSYNC; elsewhere fsync is the full flush")
  func platformFlush() {
    #if canImport(Darwin)
      #expect(Durability.fullSync != nil)
    #else
      #expect(Durability.fullSync == nil)
    #endif
  }

  @Test("a full flush that succeeds is the whole flush")
  func fullSyncSucceeds() {
    let calls = Calls(fullSync: [0], fsync: [])
    #expect(Durability.synchronize(7, fullSync: calls.fullSync, fsync: calls.fsync) == 0)
    #expect(calls.made == ["fullSync(7)"])
  }

  @Test(
    "a file system that refuses the full flush gets fsync instead",
    arguments: [ENOTSUP, EOPNOTSUPP, ENOTTY, EINVAL])
  func refusalFallsBack(code: Int32) {
    let calls = Calls(fullSync: [code], fsync: [0])
    #expect(Durability.synchronize(7, fullSync: calls.fullSync, fsync: calls.fsync) == 0)
    #expect(calls.made == ["fullSync(7)", "fsync(7)"])

    let failing = Calls(fullSync: [code], fsync: [EIO])
    #expect(Durability.synchronize(7, fullSync: failing.fullSync, fsync: failing.fsync) == EIO)
  }

  @Test("a full flush that fails is reported, never papered over by an fsync", arguments: [EIO, ENOSPC, EBADF])
  func failureIsReported(code: Int32) {
    let calls = Calls(fullSync: [code], fsync: [0])
    #expect(Durability.synchronize(7, fullSync: calls.fullSync, fsync: calls.fsync) == code)
    #expect(calls.made == ["fullSync(7)"])
  }

  @Test("calls interrupted by a signal are made again")
  func interruptedCallsAreRepeated() {
    let calls = Calls(fullSync: [EINTR, EINTR, ENOTSUP], fsync: [EINTR, 0])
    #expect(Durability.synchronize(3, fullSync: calls.fullSync, fsync: calls.fsync) == 0)
    #expect(calls.made == ["fullSync(3)", "fullSync(3)", "fullSync(3)", "fsync(3)", "fsync(3)"])
  }

  @Test("without a full flush, fsync alone")
  func fsyncOnly() {
    let calls = Calls(fullSync: [], fsync: [0])
    #expect(Durability.synchronize(5, fullSync: nil, fsync: calls.fsync) == 0)
    #expect(calls.made == ["fsync(5)"])
  }

  @Test("real files and directories flush; a closed descriptor reports EBADF")
  func realDescriptors() throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let path = folder.appending("file").path
    let file = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
    try #require(file >= 0)
    #expect(write(file, "durable", 7) == 7)
    #expect(Durability.synchronize(file) == 0)
    // Closed, a low descriptor number may be given at once to a test running beside this one;
    // new descriptors take the lowest free number, so none is given this high one.
    let closed = fcntl(file, F_DUPFD_CLOEXEC, 900)
    try #require(closed >= 900)
    close(closed)
    close(file)
    #expect(Durability.synchronize(closed) == EBADF)

    let directory = open(folder.url.path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    try #require(directory >= 0)
    defer { close(directory) }
    #expect(Durability.synchronize(directory) == 0)
  }

  @Test("the disk layer's file system flushes through it and names the failure")
  func diskFileSystemUsesIt() throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let system = POSIXDiskFileSystem()
    let file = try system.createExclusively(folder.appending("entry").path)
    try system.synchronize(file)
    try system.close(file)
    try system.synchronizeDirectory(folder.url.path)
    // Not the closed descriptor: another test of this process may have been given its number
    // since. -1 is never a descriptor.
    #expect(throws: DiskSystemError(code: EBADF, operation: "fsync", path: "fd -1")) {
      try system.synchronize(-1)
    }
  }
}
