import AsyncCache
import AsyncCacheTesting
import Testing

@Suite(.timeLimit(.minutes(3)))
struct RecordingLogHandlerTests {
  @Test func itRecordsEveryRecordInOrder() {
    let handler = RecordingLogHandler()
    let logger = handler.logger()
    logger.debug("one", metadata: ["key": "a"], source: "Test")
    logger.warning("two", source: "Test")
    #expect(handler.records.map(\.message) == ["one", "two"])
    #expect(handler.records.first?.metadata == ["key": "a"])
    #expect(handler.records.allSatisfy { $0.source == "Test" })
  }

  @Test func itFiltersByLevel() {
    let handler = RecordingLogHandler()
    let logger = handler.logger()
    for level in CacheLogLevel.allCases { logger.log(level, "\(level)") }
    #expect(handler.records(atLeast: .warning).map(\.level) == [.warning, .error, .critical])
    #expect(handler.records(atLeast: .trace).count == CacheLogLevel.allCases.count)
  }

  @Test func itsLoggerAppliesTheMinimumLevel() {
    let handler = RecordingLogHandler()
    let logger = handler.logger(minimumLevel: .notice)
    logger.info("dropped")
    logger.notice("kept")
    #expect(handler.records.map(\.message) == ["kept"])
    #expect(logger.minimumLevel == .notice)
  }

  @Test func removeAllForgetsTheRecords() {
    let handler = RecordingLogHandler()
    handler.logger().info("old")
    handler.removeAll()
    #expect(handler.records.isEmpty)
    handler.logger().info("new")
    #expect(handler.records.map(\.message) == ["new"])
  }

  @Test func waitForRecordsReturnsAtOnceWhenEnoughAreRecorded() async {
    let handler = RecordingLogHandler()
    handler.logger().info("a")
    handler.logger().info("b")
    let records = await handler.waitForRecords(2)
    #expect(records.map(\.message) == ["a", "b"])
  }

  @Test func waitForRecordsWaitsForMatchingRecordsLoggedLater() async {
    let handler = RecordingLogHandler()
    let logger = handler.logger()
    logger.warning("w0")
    let waiter = Task { await handler.waitForRecords(3) { $0.level == .warning } }
    // Whatever the order of these logs and the waiter's registration, it returns after the third.
    logger.info("not a warning")
    logger.warning("w1")
    logger.warning("w2")
    #expect(await waiter.value.map(\.message) == ["w0", "w1", "w2"])
  }

  @Test func aCancelledWaitReturnsTheMatchesSoFar() async {
    let handler = RecordingLogHandler()
    handler.logger().info("only one")
    let waiter = Task { await handler.waitForRecords(5) }
    waiter.cancel()
    #expect(await waiter.value.map(\.message) == ["only one"])
  }

  @Test func itRecordsFromManyTasksAtOnce() async {
    let handler = RecordingLogHandler()
    let logger = handler.logger()
    await withTaskGroup(of: Void.self) { group in
      for task in 0..<8 {
        group.addTask { for index in 0..<100 { logger.info("\(task).\(index)") } }
      }
    }
    #expect(handler.records.count == 800)
    #expect(await handler.waitForRecords(800).count == 800)
  }
}
