import AsyncCacheTesting
import Testing

@testable import AsyncCache

/// A copy of the shapes of swift-log's `Logger.log(level:_:metadata:source:file:function:line:)`
/// and of the types it takes (swift-log 1.16), which this package cannot depend on.
private struct SwiftLogShapedLogger: Sendable {
  enum Level: String, Codable, CaseIterable { case trace, debug, info, notice, warning, error, critical }

  struct Message: ExpressibleByStringLiteral, Equatable, ExpressibleByStringInterpolation {
    var value: String
    init(stringLiteral value: String) { self.value = value }
  }

  enum MetadataValue: Equatable, Sendable, ExpressibleByStringLiteral {
    case string(String)
    init(stringLiteral value: String) { self = .string(value) }
  }

  typealias Metadata = [String: MetadataValue]

  struct Entry: Equatable, Sendable {
    var level: Level
    var message: String
    var metadata: Metadata?
    var source: String?
    var file: String
    var function: String
    var line: UInt
  }

  let entries = Locked<[Entry]>([])

  func log(
    level: Level,
    _ message: @autoclosure () -> Message,
    metadata: @autoclosure () -> Metadata? = nil,
    source: @autoclosure () -> String? = nil,
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    let entry = Entry(
      level: level, message: message().value, metadata: metadata(), source: source(), file: file, function: function,
      line: line)
    entries.withLock { $0.append(entry) }
  }
}

@Suite("CacheLogger from swift-log's log method")
struct SwiftLogShapeTests {
  @Test("swift-log's log method is the bridge: levels by raw value, message, metadata and origin as they are")
  func bridge() {
    let logger = SwiftLogShapedLogger()
    let cacheLogger = CacheLogger(
      minimumLevel: .debug, forwardingTo: logger.log(level:_:metadata:source:file:function:line:))
    cacheLogger.trace("dropped below the minimum")
    cacheLogger.warning(
      "layer failed", metadata: ["key": "42"], source: "CacheChain", file: "M/F.swift", function: "f()", line: 7)
    cacheLogger.notice("no metadata")
    #expect(
      logger.entries.withLock { $0 } == [
        .init(
          level: .warning, message: "layer failed", metadata: ["key": "42"], source: "CacheChain", file: "M/F.swift",
          function: "f()", line: 7),
        .init(
          level: .notice, message: "no metadata", metadata: [:], source: "AsyncCacheTests",
          file: logger.entries.withLock { $0.last?.file ?? "" }, function: "bridge()",
          line: logger.entries.withLock { $0.last?.line ?? 0 }),
      ])
    for level in CacheLogLevel.allCases {
      #expect(SwiftLogShapedLogger.Level(rawValue: level.rawValue) != nil, "\(level) has a swift-log raw value")
    }
  }
}
