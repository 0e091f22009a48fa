import AsyncCache
import AsyncCacheTesting
import Testing

// The "Logging" article's swift-log bridge, compiled against a stand-in with the shape of
// swift-log's `Logger` (the package has no dependencies, so it cannot import the real one): the
// same level names, `Metadata` as `[String: MetadataValue]` with a `.string` case, a `Message`
// built from a string interpolation, and `log(level:_:metadata:source:file:function:line:)` with
// autoclosures. If the article's code stops compiling against this shape, this file stops
// compiling.

/// A stand-in for swift-log's `Logger`: records what it is asked to log.
private struct Logger: Sendable {
  enum Level: String, Codable, CaseIterable, Comparable, Sendable {
    case trace, debug, info, notice, warning, error, critical

    static func < (lhs: Level, rhs: Level) -> Bool {
      allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
  }

  enum MetadataValue: Equatable, Sendable {
    case string(String)
    case array([MetadataValue])
    case dictionary([String: MetadataValue])
  }

  typealias Metadata = [String: MetadataValue]

  struct Message: ExpressibleByStringInterpolation, Equatable, Sendable {
    var text: String
    init(stringLiteral value: String) { text = value }
  }

  struct Entry: Equatable, Sendable {
    var level: Level
    var message: Message
    var metadata: Metadata?
    var source: String?
    var file: String
    var function: String
    var line: UInt
  }

  let label: String
  var logLevel: Level = .info
  let entries = Locked<[Entry]>([])

  init(label: String) { self.label = label }

  func log(
    level: Level,
    _ message: @autoclosure () -> Message,
    metadata: @autoclosure () -> Metadata? = nil,
    source: @autoclosure () -> String? = nil,
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    guard level >= logLevel else { return }
    let entry = Entry(
      level: level, message: message(), metadata: metadata(), source: source(), file: file, function: function,
      line: line)
    entries.withLock { $0.append(entry) }
  }
}

// MARK: The article's code, as it appears there

/// Sends the cache's log records to a swift-log `Logger`.
private struct SwiftLogHandler: CacheLogHandler {
  let logger: Logger

  func log(_ record: CacheLogRecord) {
    logger.log(
      level: Logger.Level(record.level),
      "\(record.message)",
      metadata: record.metadata.mapValues { .string($0) },
      source: record.source,
      file: record.file, function: record.function, line: record.line)
  }
}

extension Logger.Level {
  /// The swift-log level of a cache log level: the same seven, by the same names.
  fileprivate init(_ level: CacheLogLevel) {
    switch level {
    case .trace: self = .trace
    case .debug: self = .debug
    case .info: self = .info
    case .notice: self = .notice
    case .warning: self = .warning
    case .error: self = .error
    case .critical: self = .critical
    }
  }
}

extension CacheLogger {
  /// A cache logger that logs through `logger`, from its log level up.
  fileprivate init(_ logger: Logger) {
    self.init(
      handler: SwiftLogHandler(logger: logger), minimumLevel: CacheLogLevel(rawValue: logger.logLevel.rawValue)!)
  }
}

// MARK: Tests

@Suite(.timeLimit(.minutes(1)))
struct LoggingArticleExampleTests {
  @Test("the swift-log bridge passes level, message, metadata as strings, source and location through")
  func bridge() throws {
    var logger = Logger(label: "com.example.cache")
    logger.logLevel = .notice
    let cacheLogger = CacheLogger(logger)
    #expect(cacheLogger.minimumLevel == .notice)

    cacheLogger.info("dropped below the level", source: "Test")
    let line: UInt = #line + 1
    cacheLogger.warning("layer failed", metadata: ["key": "42", "layer": "disk"], source: "CacheChain")
    let entry = try #require(logger.entries.withLock { $0 }.first)
    #expect(logger.entries.withLock { $0.count } == 1)
    #expect(entry.level == .warning)
    #expect(entry.message.text == "layer failed")
    #expect(entry.metadata == ["key": .string("42"), "layer": .string("disk")])
    #expect(entry.source == "CacheChain")
    #expect(entry.file == #fileID && entry.function == #function && entry.line == line)
  }

  @Test("every cache log level maps to the swift-log level of the same name")
  func levels() {
    for level in CacheLogLevel.allCases {
      #expect(Logger.Level(level).rawValue == level.rawValue)
      #expect(Logger.Level(rawValue: level.rawValue) == Logger.Level(level))
    }
  }

  @Test("the article's quick start: a closure logger on a loading cache reports a skipped layer")
  func quickStart() async throws {
    let lines = Locked<[String]>([])
    let logger = CacheLogger(minimumLevel: .info) { record in lines.withLock { $0.append("\(record)") } }
    let disk = FakeLayer<String, String>()
    disk.fail(.lookup, with: DiskDown())
    let chain = try CacheChain<String, String>(
      [.init(try MemoryLayer<String, String>()), .init(disk, failurePolicy: .skip, name: "disk")],
      configuration: .init(logger: logger))
    let cache = try LoadingCache(
      chain: chain, origin: ClosureFetcher { "value of \($0)" }, configuration: .init(logger: logger))
    #expect(try await cache.value(for: "42") == "value of 42")
    #expect(
      lines.withLock { $0 } == [
        "warning CacheChain: layer 1 (disk) failed during lookup; the chain goes on without it "
          + "[error=DiskDown, key=42, layer=disk, operation=lookup, tier=1]"
      ])
  }

  struct DiskDown: Error, CustomStringConvertible {
    var description: String { "DiskDown" }
  }
}
