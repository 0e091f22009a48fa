import AsyncCache
import AsyncCacheTesting
import Foundation
import Testing

@Suite("A layer's clock and logger: its configuration's, else the first its cache or chain hands it")
struct LayerEnvironmentTests {
  @Test("an unset setting reads as its default, its projection is nil, and setting it sets both")
  func followsCacheSettings() {
    var configuration = MemoryLayer<String, Int>.Configuration()
    #expect(configuration.clock is WallClock)
    #expect(configuration.$clock == nil)
    #expect(configuration.$logger == nil)
    #expect(!configuration.logger.isEnabled)
    let clock = ManualClock()
    let logs = RecordingLogHandler()
    configuration.clock = clock
    configuration.logger = logs.logger()
    #expect((configuration.$clock as? ManualClock) === clock)
    #expect(configuration.$logger?.handler as? RecordingLogHandler === logs)
    let given = DiskLayer<String, Data>.Configuration(clock: clock)
    #expect((given.$clock as? ManualClock) === clock)
    #expect(given.$logger == nil)
  }

  @Test("a layer given nothing follows the first environment that sets each value, and only it")
  func followsTheFirst() throws {
    let layer = try MemoryLayer<String, Int>()
    #expect(layer.clock is WallClock)
    let first = ManualClock()
    let logs = RecordingLogHandler()
    layer.follow(CacheEnvironment(clock: first))
    layer.follow(CacheEnvironment(clock: ManualClock(), logger: logs.logger()))
    #expect((layer.clock as? ManualClock) === first, "the first clock handed down wins")
    #expect(layer.followedLogger.value.handler as? RecordingLogHandler === logs, "the logger was not set before")
    layer.follow(CacheEnvironment(logger: RecordingLogHandler().logger()))
    #expect(layer.followedLogger.value.handler as? RecordingLogHandler === logs)
  }

  @Test("a layer given a clock and a logger keeps them")
  func keepsWhatItWasGiven() throws {
    let own = ManualClock()
    let ownLogs = RecordingLogHandler()
    let layer = try MemoryLayer<String, Int>(configuration: .init(clock: own, logger: ownLogs.logger()))
    layer.follow(CacheEnvironment(clock: ManualClock(), logger: RecordingLogHandler().logger()))
    #expect((layer.clock as? ManualClock) === own)
    #expect(layer.followedLogger.value.handler as? RecordingLogHandler === ownLogs)
  }

  @Test("records name the layer and carry its context, under the record's own metadata")
  func logsAsTheLayer() {
    let logs = RecordingLogHandler()
    let environment = LayerEnvironment(
      clock: nil, logger: logs.logger(), source: "DiskLayer", context: ["directory": "/tmp/x", "key": "context"])
    environment.log(.warning, "a damaged entry file was deleted; a miss", metadata: ["key": "k"])
    let record = logs.records.first
    #expect(record?.source == "DiskLayer")
    #expect(record?.metadata == ["directory": "/tmp/x", "key": "k"])
    #expect(record?.file.hasSuffix("LayerEnvironmentTests.swift") == true, "the caller's file")
  }

  @Test("an entry that arrived expired is a warning the first time, then debug")
  func expiredArrivals() {
    let logs = RecordingLogHandler()
    let environment = LayerEnvironment(clock: nil, logger: logs.logger(), source: "MemoryLayer")
    let now = CacheInstant(nanosecondsSince1970: 2_000_000_000)
    let expired = CacheInstant(nanosecondsSince1970: 1_000_000_000)
    environment.logExpiredArrival(key: "a", expiresAt: expired, now: now)
    environment.logExpiredArrival(key: "b", expiresAt: expired, now: now)
    #expect(logs.records.map(\.level) == [.warning, .debug])
    #expect(logs.records.first?.metadata["key"] == "a")
    #expect(environment.nextExpiredArrivalLevel() == .debug)
  }
}
