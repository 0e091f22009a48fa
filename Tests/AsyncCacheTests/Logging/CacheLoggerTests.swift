import AsyncCacheTesting
import Foundation
import Testing

@testable import AsyncCache

@Suite("CacheLogger")
struct CacheLoggerTests {
  /// Counts evaluations of the autoclosures a logging call is given.
  final class Evaluations: Sendable {
    private let count = Locked(0)
    var value: Int { count.withLock { $0 } }

    func message() -> String {
      count.withLock { $0 += 1 }
      return "message"
    }

    func metadata() -> [String: String] {
      count.withLock { $0 += 1 }
      return ["k": "v"]
    }

    func source() -> String? {
      count.withLock { $0 += 1 }
      return "Source"
    }
  }

  /// A handler that fails the test if it is ever called.
  struct UnexpectedHandler: CacheLogHandler {
    func log(_ record: CacheLogRecord) {
      Issue.record("unexpected log record: \(record)")
    }
  }

  @Test("a disabled logger evaluates neither the message, nor the metadata, nor the source, at any level")
  func disabledEvaluatesNothing() {
    let logger = CacheLogger.disabled
    let evaluations = Evaluations()
    for level in CacheLogLevel.allCases {
      logger.log(level, evaluations.message(), metadata: evaluations.metadata(), source: evaluations.source())
    }
    logger.trace(evaluations.message(), metadata: evaluations.metadata(), source: evaluations.source())
    logger.debug(evaluations.message(), metadata: evaluations.metadata(), source: evaluations.source())
    logger.info(evaluations.message(), metadata: evaluations.metadata(), source: evaluations.source())
    logger.notice(evaluations.message(), metadata: evaluations.metadata(), source: evaluations.source())
    logger.warning(evaluations.message(), metadata: evaluations.metadata(), source: evaluations.source())
    logger.error(evaluations.message(), metadata: evaluations.metadata(), source: evaluations.source())
    logger.critical(evaluations.message(), metadata: evaluations.metadata(), source: evaluations.source())
    #expect(evaluations.value == 0)
    #expect(!logger.isEnabled)
    #expect(CacheLogLevel.allCases.allSatisfy { !logger.isEnabled(for: $0) })
    #expect(logger.handler == nil)
  }

  @Test("below the minimum level nothing is evaluated and the handler is not called")
  func belowMinimumEvaluatesNothing() {
    let logger = CacheLogger(handler: UnexpectedHandler(), minimumLevel: .warning)
    let evaluations = Evaluations()
    logger.trace(evaluations.message(), metadata: evaluations.metadata(), source: evaluations.source())
    logger.debug(evaluations.message(), metadata: evaluations.metadata(), source: evaluations.source())
    logger.info(evaluations.message(), metadata: evaluations.metadata(), source: evaluations.source())
    logger.notice(evaluations.message(), metadata: evaluations.metadata(), source: evaluations.source())
    #expect(evaluations.value == 0)
    #expect(logger.isEnabled)
  }

  @Test(
    "records of the minimum level and above reach the handler, the others do not", arguments: CacheLogLevel.allCases)
  func minimumLevelFilters(minimum: CacheLogLevel) {
    let handler = RecordingLogHandler()
    let logger = handler.logger(minimumLevel: minimum)
    for level in CacheLogLevel.allCases { logger.log(level, "\(level)", source: "Test") }
    let expected = CacheLogLevel.allCases.filter { $0 >= minimum }
    #expect(handler.records.map(\.level) == expected)
    #expect(handler.records.map(\.message) == expected.map(\.rawValue))
    #expect(CacheLogLevel.allCases.map { logger.isEnabled(for: $0) } == CacheLogLevel.allCases.map { $0 >= minimum })
  }

  @Test("each level method logs at its level")
  func levelMethods() {
    let handler = RecordingLogHandler()
    let logger = handler.logger()
    logger.trace("t")
    logger.debug("d")
    logger.info("i")
    logger.notice("n")
    logger.warning("w")
    logger.error("e")
    logger.critical("c")
    #expect(handler.records.map(\.level) == CacheLogLevel.allCases)
    #expect(handler.records.map(\.message) == ["t", "d", "i", "n", "w", "e", "c"])
  }

  @Test("a record carries the message, metadata, source and the caller's file, function and line")
  func recordContents() throws {
    let handler = RecordingLogHandler()
    let logger = handler.logger(minimumLevel: .info)
    let line: UInt = #line + 1
    logger.warning("layer failed", metadata: ["key": "42", "layer": "disk"], source: "CacheChain")
    let record = try #require(handler.records.first)
    #expect(record.level == .warning)
    #expect(record.message == "layer failed")
    #expect(record.metadata == ["key": "42", "layer": "disk"])
    #expect(record.source == "CacheChain")
    #expect(record.file == #fileID)
    #expect(record.function == #function)
    #expect(record.line == line)
  }

  @Test("without a source, a record names the caller's module, as swift-log does")
  func defaultSource() throws {
    let handler = RecordingLogHandler()
    handler.logger().info("hello")
    #expect(try #require(handler.records.first).source == "AsyncCacheTests")
    #expect(CacheLogger.module(of: "Module/File.swift") == "Module")
    #expect(CacheLogger.module(of: "NoSlash") == "NoSlash")
  }

  @Test("the levels are swift-log's, in its order, with its names")
  func levels() {
    #expect(
      CacheLogLevel.allCases.map(\.rawValue) == ["trace", "debug", "info", "notice", "warning", "error", "critical"])
    #expect(CacheLogLevel.allCases == CacheLogLevel.allCases.sorted())
    #expect(CacheLogLevel.debug < .warning && !(CacheLogLevel.error < .notice))
    #expect(CacheLogLevel(rawValue: "notice") == .notice)
    #expect("\(CacheLogLevel.warning)" == "warning")
  }

  @Test("a record prints on one line, metadata sorted by name")
  func recordDescription() {
    let record = CacheLogRecord(
      level: .warning, message: "layer failed", metadata: ["layer": "disk", "key": "42"], source: "CacheChain")
    #expect(record.description == "warning CacheChain: layer failed [key=42, layer=disk]")
    #expect(CacheLogRecord(level: .info, message: "m", source: "S").description == "info S: m")
  }

  @Test("the closure initializer and ClosureLogHandler pass every record at or above the minimum")
  func closureHandler() {
    let received = Locked<[CacheLogRecord]>([])
    let logger = CacheLogger(minimumLevel: .notice) { record in received.withLock { $0.append(record) } }
    logger.info("dropped")
    logger.notice("kept", metadata: ["n": "1"], source: "S")
    #expect(received.withLock { $0.map(\.message) } == ["kept"])
    #expect(logger.minimumLevel == .notice)
    #expect(logger.handler is ClosureLogHandler)
  }

  @Test("default minimum level is info")
  func defaultMinimum() {
    #expect(CacheLogger(handler: RecordingLogHandler()).minimumLevel == .info)
    #expect(CacheLogger { _ in }.minimumLevel == .info)
  }

  @Test("long values are cut for metadata")
  func describe() {
    #expect(CacheLogger.describe("short") == "short")
    let long = String(repeating: "x", count: 500)
    #expect(CacheLogger.describe(long) == String(repeating: "x", count: 200) + "…")
    #expect(CacheLogger.describe(long, limit: 10) == "xxxxxxxxxx…")
  }

  @Test("logging is off by default in every configuration")
  func offByDefault() throws {
    #expect(!LoadingCache<String, Int>.Configuration().logger.isEnabled)
    #expect(!CacheChain<String, Int>.Configuration().logger.isEnabled)
    #expect(AsyncPrefetcher<String, Int>.Configuration().logger == nil)
    #expect(!DiskLayer<String, Data>.Configuration().logger.isEnabled)
    #expect(!UserDefaultsLayer<String, Data>.Configuration().logger.isEnabled)
    #expect(!LinuxMemoryPressureSource.Configuration().logger.isEnabled)
    let cache = try LoadingCache(layers: [MemoryLayer<String, Int>()], origin: ClosureFetcher { _ in 0 })
    #expect(!cache.chain.followedLogger.value.isEnabled)
  }

  @Test("the chain that a loading cache builds from layers logs with the cache's logger")
  func chainInheritsLogger() throws {
    let handler = RecordingLogHandler()
    let cache = try LoadingCache(
      layers: [MemoryLayer<String, Int>()], origin: ClosureFetcher { _ in 0 },
      configuration: .init(logger: handler.logger(minimumLevel: .notice)))
    let chainLogger = cache.chain.followedLogger.value
    #expect(chainLogger.minimumLevel == .notice)
    #expect(chainLogger.handler as? RecordingLogHandler === handler)
  }
}
