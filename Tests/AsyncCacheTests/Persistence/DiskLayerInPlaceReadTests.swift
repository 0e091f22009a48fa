import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

/// Reads answered on the caller's thread when the file is in memory, and sent to the layer's
/// thread when it would come from the device (see `DiskLayer.entryInPlace`).
@Suite("DiskLayer: reads on the caller's thread", .timeLimit(.minutes(3)))
struct DiskLayerInPlaceReadTests {
  /// Whether hits can be read without waiting here: Linux, a local file system for the
  /// temporary directory, and a kernel that lets `openat2` with `RESOLVE_CACHED` through;
  /// elsewhere every hit goes to the layer's thread.
  static let readsInPlace: Bool = {
    // A directory of the test's own, as the layers' are: `O_NOATIME` needs the owner.
    guard let probe = try? TemporaryDirectory("disklayer-probe") else { return false }
    defer { probe.remove() }
    return POSIXDiskFileSystem.readsCachedFiles(in: probe.url.path)
  }()

  /// Reads `key` until a read is answered on the caller's thread (at most ten times: the kernel
  /// may turn an attempt away, as when the page is under readahead); returns whether one was.
  /// Each read must return `value`.
  static func readsInPlace(_ layer: DiskLayer<String, Data>, key: String, value: Data) async throws -> Bool {
    for _ in 0..<10 {
      let before = await layer.statistics.readsInPlace
      #expect(try await layer.value(for: key) == value)
      if await layer.statistics.readsInPlace > before { return true }
    }
    return false
  }

  @Test("a hit whose file is in memory, and a miss for a key the index does not hold, cross no thread")
  func hitsAndMissesFromMemoryCrossNoThread() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open()
    for index in 0..<20 { try await layer.insert(diskBytes(100 + index), for: "k\(index)") }
    for index in 0..<20 { #expect(try await layer.value(for: "k\(index)") == diskBytes(100 + index)) }
    #expect(try await layer.value(for: "missing") == nil)
    let statistics = await layer.statistics
    #expect(statistics.hits == 20)
    #expect(statistics.misses == 1)
    if Self.readsInPlace {
      // The miss costs no I/O; of the hits, nearly all: the kernel may still say that a page
      // would wait (one under readahead, say), and that read goes to the layer's thread.
      #expect(statistics.readsInPlace >= 17, "\(statistics.readsInPlace) of 21 reads in place")
    } else {
      // Only the miss, which the index answers without I/O.
      #expect(statistics.readsInPlace == 1)
    }
  }

  @Test("a read that would wait for the device goes to the layer's thread, and the next one is in place again")
  func aReadThatWouldWaitGoesToTheLayersThread() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let fileSystem = FakeDiskFileSystem()
    fileSystem.answersCachedReads = true
    let layer = try await fixture.open(fileSystem: fileSystem)
    try await layer.insert(diskBytes(100), for: "a")
    let blocked = fileSystem.holdReads()
    let read = Task { try await layer.value(for: "a") }
    for await _ in blocked { break }
    #expect(fileSystem.heldReads == 1, "the read waits on the layer's thread")
    fileSystem.releaseReads()
    #expect(try await read.value == diskBytes(100))
    #expect(await layer.statistics.readsInPlace == 0)
    #expect(try await Self.readsInPlace(layer, key: "a", value: diskBytes(100)) == Self.readsInPlace)
    #expect(fileSystem.callsOffExecutor.isEmpty, "only the non-blocking read ran off the layer's thread")
  }

  @Test("a file that holds another key (a collision) is read in place, found foreign, and kept by the layer's thread")
  func aForeignFileIsKept() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    // Every key is named alike: "b" finds the file of "a".
    let layer = try await fixture.open(fileNameHash: { _ in SHA256.hash(Array("same".utf8)) })
    try await layer.insert(diskBytes(10), for: "a")
    #expect(try await layer.value(for: "b") == nil)
    #expect(try await layer.value(for: "a") == diskBytes(10))
    let statistics = await layer.statistics
    #expect(statistics.damagedEntries == 0)
    #expect(statistics.misses == 1)
    #expect(statistics.hits == 1)
  }

  @Test("damaged and expired files found in place go to the layer's thread, which deletes them")
  func filesToDealWithGoToTheLayersThread() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let clock = ManualClock()
    let layer = try await fixture.open(.init(clock: clock))
    try await layer.insert(diskBytes(10), for: "damaged")
    try await layer.insert(CacheEntry(diskBytes(10), expiresAt: clock.now.advanced(by: .seconds(5))), for: "expiring")
    var bytes = try Data(contentsOf: fixture.file(for: "damaged"))
    bytes[bytes.count - 1] ^= 0xFF
    try bytes.write(to: fixture.file(for: "damaged"))
    clock.advance(by: .seconds(10))
    #expect(try await layer.value(for: "damaged") == nil)
    #expect(try await layer.value(for: "expiring") == nil)
    let statistics = await layer.statistics
    #expect(statistics.readsInPlace == 0)
    #expect(statistics.damagedEntries == 1)
    #expect(statistics.evictions[.expired] == 1)
    #expect(!FileManager.default.fileExists(atPath: fixture.file(for: "damaged").path))
    #expect(!FileManager.default.fileExists(atPath: fixture.file(for: "expiring").path))
  }

  @Test("hits read in place count in the order of use: the least recently read entry is evicted")
  func readsInPlaceKeepTheOrderOfUse() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open(.init(countLimit: 3))
    for key in ["a", "b", "c"] { try await layer.insert(diskBytes(10), for: key) }
    #expect(try await Self.readsInPlace(layer, key: "a", value: diskBytes(10)) == Self.readsInPlace)
    try await layer.insert(diskBytes(10), for: "d")
    #expect(try await layer.value(for: "b") == nil, "b, read least recently, made room")
    #expect(try await layer.value(for: "a") == diskBytes(10))
    #expect(await layer.keys.count == 3)
  }

  @Test("a hit read in place on a file whose time is a minute old sets it to now, for the order after a restart")
  func readsInPlaceRefreshOldFileTimes() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open()
    try await layer.insert(diskBytes(10), for: "a")
    let old = Date(timeIntervalSinceNow: -600)
    try FileManager.default.setAttributes([.modificationDate: old], ofItemAtPath: fixture.file(for: "a").path)
    // Reopened, so that the index holds the old time too.
    let reopened = try await fixture.open()
    #expect(try await Self.readsInPlace(reopened, key: "a", value: diskBytes(10)) == Self.readsInPlace)
    _ = await reopened.keys  // applies the reads made in place
    let attributes = try FileManager.default.attributesOfItem(atPath: fixture.file(for: "a").path)
    let modified = try #require(attributes[.modificationDate] as? Date)
    #expect(modified.timeIntervalSinceNow > -60)
  }

  @Test("many tasks reading in place while others write and evict: every value read is one that was written")
  func concurrentReadsAndWritesAgree() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open(.init(countLimit: 16))
    try await withThrowingTaskGroup(of: Void.self) { group in
      group.addTask {
        for round in 0..<100 where !Task.isCancelled {
          try await layer.insert(diskBytes(50 + round % 7), for: "k\(round % 24)")
        }
      }
      for task in 0..<3 {
        group.addTask {
          for round in 0..<150 where !Task.isCancelled {
            if let found = try await layer.value(for: "k\((round + task) % 24)") {
              #expect((50..<57).contains(found.count) && found == diskBytes(found.count))
            }
            await Task.yield()
          }
        }
      }
      try await group.waitForAll()
    }
    #expect(await layer.statistics.damagedEntries == 0)
    #expect(await layer.count <= 16)
  }

  @Test("a file deleted behind the layer's back is a miss in place, and leaves the index")
  func aVanishedFileLeavesTheIndex() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open()
    try await layer.insert(diskBytes(10), for: "a")
    try await layer.insert(diskBytes(10), for: "b")
    try FileManager.default.removeItem(at: fixture.file(for: "a"))
    #expect(try await layer.value(for: "a") == nil)
    _ = await layer.keys  // applies what reads in place found
    #expect(await layer.count == 1)
    #expect(await layer.indexViolations.isEmpty)
  }

  /// The index's published names and sizes, for readers on other threads: a name replaced in
  /// the index (a rewrite) is never absent from them, not even for an instant.
  @Test("a name rewritten in the index stays published throughout")
  func aRewrittenNameStaysPublished() async {
    let published = Locked([SHA256.Digest: Int]())
    let name = SHA256.hash(Array("k".utf8))
    let writer = Task.detached {
      var index = DiskIndex(publishing: published)
      for round in 0..<200_000 where !Task.isCancelled {
        index.insert(DiskIndex.Record(name: name, key: "k", size: 10 + round % 3, expiresAt: .max, touchedAt: 0))
      }
      return index.invariantViolations()
    }
    // Once published, the name never goes missing while the writer rewrites it.
    while published.withLock({ $0[name] }) == nil, !Task.isCancelled { await Task.yield() }
    var absences = 0
    for _ in 0..<200_000 where published.withLock({ $0[name] }) == nil { absences += 1 }
    #expect(absences == 0)
    #expect(await writer.value.isEmpty)
  }

  @Test("a key rewritten over and over is never missing to readers on other tasks")
  func aRewrittenKeyIsNeverMissing() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open()
    try await layer.insert(diskBytes(20), for: "k")
    try await withThrowingTaskGroup(of: Void.self) { group in
      group.addTask {
        for round in 0..<60 where !Task.isCancelled {
          try await layer.insert(diskBytes(20, seed: UInt8(round % 200)), for: "k")
        }
      }
      for _ in 0..<2 {
        group.addTask {
          for _ in 0..<150 where !Task.isCancelled {
            let found = try await layer.value(for: "k")
            #expect(found?.count == 20, "a read of a key that always exists missed")
            await Task.yield()
          }
        }
      }
      try await group.waitForAll()
    }
  }
}
