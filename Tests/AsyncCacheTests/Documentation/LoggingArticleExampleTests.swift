import AsyncCache
import AsyncCacheTesting
import Testing

// The "Logging" article's swift-log bridge, compiled against a stand-in with the shape of
// swift-log 1.16's `Logger` (the package has no dependencies, so it cannot import the real one):
// the same level names and raw values, `Metadata` as `[String: MetadataValue]` with a `.string`
// case and string literals, a `Message` built from a string interpolation, and
// `log(level:_:metadata:source:file:function:line:)` with autoclosures. If the article's one
// expression stops compiling against this shape, this file stops compiling. (A scratch package
// checked the same expression against the real swift-log 1.16.2.)

/// A stand-in for swift-log's `Logger`: records what it is asked to log.
private struct Logger: Sendable {
  enum Level: String, Codable, CaseIterable, Comparable, Sendable {
    case trace, debug, info, notice, warning, error, critical

    static func < (lhs: Level, rhs: Level) -> Bool {
      allCases.firstIndex(of: lhs)! < allCases.firstIndex(of: rhs)!
    }
  }

  enum MetadataValue: Equatable, Sendable, ExpressibleByStringLiteral {
    case string(String)
    case array([MetadataValue])
    case dictionary([String: MetadataValue])
    init(stringLiteral value: String) { self = .string(value) }
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

// MARK: Tests

@Suite(.timeLimit(.minutes(3)))
struct LoggingArticleExampleTests {
  @Test("the swift-log bridge is swift-log's log method: level, message, metadata, source and location pass")
  func bridge() throws {
    var logger = Logger(label: "com.example.images")
    logger.logLevel = .notice
    // The article's expression:
    let cacheLogger = CacheLogger(
      minimumLevel: .info, forwardingTo: logger.log(level:_:metadata:source:file:function:line:))
    #expect(cacheLogger.minimumLevel == .info)

    cacheLogger.debug("below the cache logger's level: never built", source: "Test")
    cacheLogger.info("below the swift-log logger's level: dropped there", source: "Test")
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

  @Test("every cache log level has the raw value of the swift-log level of the same name")
  func levels() {
    #expect(CacheLogLevel.allCases.map(\.rawValue) == Logger.Level.allCases.map(\.rawValue))
    #expect(Logger.Level.allCases.map { CacheLogLevel($0) } == CacheLogLevel.allCases)
  }

  @Test("a cache logger follows the level a service set on its swift-log logger")
  func followsTheServiceLevel() throws {
    var logger = Logger(label: "catalog")
    logger.logLevel = .debug
    // The "In a server" article's expression:
    let cacheLogger = CacheLogger(
      minimumLevel: CacheLogLevel(logger.logLevel),
      forwardingTo: logger.log(level:_:metadata:source:file:function:line:))
    #expect(cacheLogger.minimumLevel == .debug)
    cacheLogger.trace("below both levels: never built", source: "LoadingCache")
    cacheLogger.debug("load finished", metadata: ["from": "origin", "key": "7"], source: "LoadingCache")
    let entries = logger.entries.withLock { $0 }
    #expect(entries.map(\.level) == [.debug])
    #expect(entries.first?.message.text == "load finished")
  }

  @Test("a level name that is not one of the seven lets every record through to the other logger")
  func unknownLevelName() {
    enum Verbosity: String { case chatty }
    #expect(CacheLogLevel(Verbosity.chatty) == .trace)
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
