import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

@Suite("Persistent layers logging", .timeLimit(.minutes(3)))
struct PersistenceLoggingTests {
  // MARK: DiskLayer

  @Test("a damaged disk entry found by a lookup is logged as a warning with its key and the damage")
  func damagedDiskEntry() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let logs = RecordingLogHandler()
    let layer = try await fixture.open(.init(logger: logs.logger(minimumLevel: .info)))
    try await layer.insert(Data("hello".utf8), for: "victim")
    var file = try Data(contentsOf: fixture.file(for: "victim"))
    file[file.count - 1] ^= 0x01
    try file.write(to: fixture.file(for: "victim"))

    #expect(try await layer.value(for: "victim") == nil)
    let warning = try #require(logs.records.only)
    #expect(warning.level == .warning && warning.source == "DiskLayer")
    #expect(warning.message == "a damaged entry file was deleted; a miss")
    #expect(warning.metadata["key"] == "victim")
    #expect(warning.metadata["reason"] == "checksumMismatch")
    #expect(warning.metadata["file"] == fixture.file(for: "victim").lastPathComponent)
    #expect(warning.metadata["directory"] == fixture.directory.standardizedFileURL.path)
  }

  @Test("opening a directory logs damaged files, swept temporary files and a summary")
  func opening() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let layer = try await fixture.open()
    try await layer.insert(Data("intact".utf8), for: "intact")
    try await layer.insert(Data("victim".utf8), for: "victim")
    try Data("garbage".utf8).write(to: fixture.file(for: "victim"))
    let leftover = fixture.file(for: "intact").path + ".tmp-0123456789abcdef"
    #expect(FileManager.default.createFile(atPath: leftover, contents: Data("partial".utf8)))

    let logs = RecordingLogHandler()
    _ = try await fixture.open(.init(logger: logs.logger()))
    try #require(logs.records.map(\.level) == [.warning, .info, .debug])
    #expect(logs.records[0].metadata["file"] == fixture.file(for: "victim").lastPathComponent)
    #expect(logs.records[0].metadata["key"] == nil, "a file damaged before its key was read names no key")
    #expect(logs.records[1].message == "removed 1 temporary files left by interrupted writes")
    #expect(logs.records[2].message == "opened with 1 entries")
  }

  @Test("a deleted directory that a write recreates is logged as a warning")
  func recreatedDirectory() async throws {
    let fixture = try DiskFixture()
    defer { fixture.remove() }
    let logs = RecordingLogHandler()
    let layer = try await fixture.open(.init(logger: logs.logger(minimumLevel: .info)))
    try await layer.insert(Data("a".utf8), for: "a")
    try FileManager.default.removeItem(at: fixture.directory)
    try await layer.insert(Data("b".utf8), for: "b")
    let warning = try #require(logs.records.only)
    #expect(warning.message == "the directory was deleted; recreated it, and its 1 entries are gone")
  }

  // MARK: UserDefaultsLayer

  @Test("a damaged or undecodable UserDefaults value is logged as a warning with its key")
  func damagedDefaultsValue() async throws {
    let suite = UserDefaultsLayerTests.TestSuite()
    defer { suite.remove() }
    let logs = RecordingLogHandler()
    let layer = try UserDefaultsLayer<String, Data>(
      suiteName: suite.name, configuration: .init(namespace: "logs", logger: logs.logger()), keyEncoding: .string,
      valueCoder: .data)
    let defaults = suite.defaults
    defaults.set(Data("not a record".utf8), forKey: "asynccache.logs.broken")

    #expect(try await layer.value(for: "broken") == nil)
    let warning = try #require(logs.records.only)
    #expect(warning.level == .warning && warning.source == "UserDefaultsLayer")
    #expect(warning.metadata["key"] == "broken")
    #expect(warning.metadata["suite"] == suite.name && warning.metadata["namespace"] == "logs")
    #expect(warning.metadata["reason"] == "damaged, foreign, or of another format version")
  }

  // MARK: LinuxMemoryPressureSource

  @Test("a pressure source that cannot read the usage warns once, then logs at debug, then info when it recovers")
  func unreadableUsage() async throws {
    let root = try TemporaryDirectory("pressure-logging")
    defer { root.remove() }
    let logs = RecordingLogHandler()
    let clock = ManualClock()
    let source = try LinuxMemoryPressureSource(
      configuration: .init(interval: .seconds(1), clock: clock, root: root.url.path, logger: logs.logger()))
    var levels = source.levels().makeAsyncIterator()

    _ = await logs.waitForRecords(1)
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    _ = await logs.waitForRecords(2)
    await clock.waitForSleepers(1)
    try #require(logs.records.map(\.level) == [.warning, .debug])
    #expect(logs.records[0].message == "cannot read the memory usage; the level stays normal")
    #expect(logs.records[0].source == "LinuxMemoryPressureSource")

    let proc = root.appending("proc")
    try FileManager.default.createDirectory(at: proc, withIntermediateDirectories: true)
    try Data("MemTotal: 1000 kB\nMemAvailable: 10 kB\n".utf8).write(to: proc.appendingPathComponent("meminfo"))
    clock.advance(by: .seconds(1))
    #expect(await levels.next() == .critical)
    #expect(logs.records.map(\.level) == [.warning, .debug, .info])
    #expect(logs.records.last?.message == "memory usage can be read again")
  }
}
