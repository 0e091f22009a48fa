/// Where a cache component sends its log records, and from which level: put one in a
/// configuration to see what the framework does.
///
/// Logging is off by default: every configuration's `logger` is ``disabled``. Turn it on with
/// a handler and a minimum level:
///
/// ```swift
/// let logger = CacheLogger(minimumLevel: .info) { record in print(record) }
/// let users = try LoadingCache(
///     layers: [MemoryLayer<Int, User>()],
///     origin: ClosureFetcher { id in try await api.user(id) },
///     configuration: .init(logger: logger))
/// ```
///
/// **Cost when off.** The logging methods are inlined into the code that calls them and take
/// their message and metadata as autoclosures: when the logger is ``disabled``, or the level is
/// below ``minimumLevel``, a call costs one comparison of two bytes, and neither the message
/// nor the metadata is evaluated, so nothing is formatted and nothing is allocated. Hits in a
/// ``MemoryLayer`` (and ``LoadingCache/value(for:)`` when it hits) run no logging code at all.
///
/// A `CacheLogger` is an immutable value. Safe from any context.
public struct CacheLogger: Sendable {
  /// Where records go; `nil` for ``disabled``.
  public let handler: (any CacheLogHandler)?
  /// The least severe level that reaches the handler; ``CacheLogLevel/critical`` for ``disabled``.
  public let minimumLevel: CacheLogLevel
  /// The severity from which records are built: the minimum level's, or more than any level's
  /// when there is no handler, so that one comparison decides.
  @usableFromInline let threshold: UInt8

  /// Creates a logger that passes the records of `minimumLevel` and above to `handler`.
  ///
  /// - Parameters:
  ///   - handler: Where records go.
  ///   - minimumLevel: The least severe level that reaches the handler. Default
  ///     ``CacheLogLevel/info``: retries, recoveries and failures, not every load.
  public init(handler: some CacheLogHandler, minimumLevel: CacheLogLevel = .info) {
    self.handler = handler
    self.minimumLevel = minimumLevel
    self.threshold = minimumLevel.severity
  }

  /// Creates a logger that calls `body` with the records of `minimumLevel` and above.
  ///
  /// ```swift
  /// let logger = CacheLogger(minimumLevel: .debug) { print($0) }
  /// ```
  ///
  /// - Parameters:
  ///   - minimumLevel: The least severe level that reaches `body`. Default ``CacheLogLevel/info``.
  ///   - body: Called synchronously, from any thread, as ``CacheLogHandler/log(_:)`` is.
  public init(minimumLevel: CacheLogLevel = .info, _ body: @escaping @Sendable (CacheLogRecord) -> Void) {
    self.init(handler: ClosureLogHandler(body), minimumLevel: minimumLevel)
  }

  /// Creates a logger that passes the records of `minimumLevel` and above to a function shaped
  /// as swift-log's `Logger.log(level:_:metadata:source:file:function:line:)`, so that the
  /// bridge to swift-log is that method, with no dependency of this package:
  ///
  /// ```swift
  /// import Logging
  ///
  /// let logger = Logger(label: "images")
  /// let cacheLogger = CacheLogger(minimumLevel: .info, forwardingTo: logger.log(level:_:metadata:source:file:function:line:))
  /// ```
  ///
  /// The level is passed as `Level(rawValue:)` of the record's level (the seven levels have
  /// swift-log's raw values), the message and each metadata value through their string
  /// literal initializers, and the source, file, function and line as they are. swift-log
  /// applies its own log level on top of `minimumLevel`.
  ///
  /// - Parameters:
  ///   - minimumLevel: The least severe level that reaches `log`. Default ``CacheLogLevel/info``.
  ///   - log: Called synchronously, from any thread, with each record.
  public init<
    Level: RawRepresentable & SendableMetatype, Message: ExpressibleByStringLiteral & SendableMetatype,
    MetadataValue: ExpressibleByStringLiteral & SendableMetatype
  >(
    minimumLevel: CacheLogLevel = .info,
    forwardingTo log:
      @escaping @Sendable (
        Level, @autoclosure () -> Message, @autoclosure () -> [String: MetadataValue]?, @autoclosure () -> String?,
        String, String, UInt
      ) -> Void
  ) where Level.RawValue == String, Message.StringLiteralType == String, MetadataValue.StringLiteralType == String {
    self.init(minimumLevel: minimumLevel) { record in
      // Every CacheLogLevel's raw value is one of swift-log's; a `Level` that lacks it gets none.
      guard let level = Level(rawValue: record.level.rawValue) else { return }
      log(
        level, Message(stringLiteral: record.message),
        record.metadata.mapValues { MetadataValue(stringLiteral: $0) }, record.source,
        record.file, record.function, record.line)
    }
  }

  private init() {
    handler = nil
    minimumLevel = .critical
    threshold = .max
  }

  /// A logger that logs nothing, at the cost of one comparison per call: the default of every
  /// configuration.
  public static var disabled: CacheLogger { CacheLogger() }

  /// Whether any record reaches a handler: `false` for ``disabled``.
  @inlinable
  public var isEnabled: Bool { threshold <= CacheLogLevel.critical.severity }

  /// Whether a record of `level` would reach the handler. Use it to skip work done only for a
  /// log that the logging methods' autoclosures cannot hold. O(1).
  ///
  /// - Parameter level: The level of the record.
  @inlinable
  public func isEnabled(for level: CacheLogLevel) -> Bool {
    level.severity >= threshold
  }

  // MARK: Logging

  /// Passes a record to the handler if `level` is at least ``minimumLevel``.
  ///
  /// Otherwise returns at once, without evaluating `message`, `metadata` or `source`. Safe from
  /// any context; calls the handler synchronously.
  ///
  /// - Parameters:
  ///   - level: How severe the event is.
  ///   - message: A sentence describing it; evaluated only when the record is built.
  ///   - metadata: Details, by name; evaluated only when the record is built.
  ///   - source: The component that logs; `nil` (the default) for the module of `file`.
  ///   - file: The file that logs. Default: the caller's.
  ///   - function: The function that logs. Default: the caller's.
  ///   - line: The line that logs. Default: the caller's.
  @inlinable
  public func log(
    _ level: CacheLogLevel,
    _ message: @autoclosure () -> String,
    metadata: @autoclosure () -> [String: String] = [:],
    source: @autoclosure () -> String? = nil,
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    guard level.severity >= threshold, let handler else { return }
    handler.log(
      CacheLogRecord(
        level: level, message: message(), metadata: metadata(), source: source() ?? Self.module(of: file),
        file: file, function: function, line: line))
  }

  /// Logs at ``CacheLogLevel/trace``: ``log(_:_:metadata:source:file:function:line:)`` with its level.
  @inlinable
  package func trace(
    _ message: @autoclosure () -> String,
    metadata: @autoclosure () -> [String: String] = [:],
    source: @autoclosure () -> String? = nil,
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    log(.trace, message(), metadata: metadata(), source: source(), file: file, function: function, line: line)
  }

  /// Logs at ``CacheLogLevel/debug``: ``log(_:_:metadata:source:file:function:line:)`` with its level.
  @inlinable
  package func debug(
    _ message: @autoclosure () -> String,
    metadata: @autoclosure () -> [String: String] = [:],
    source: @autoclosure () -> String? = nil,
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    log(.debug, message(), metadata: metadata(), source: source(), file: file, function: function, line: line)
  }

  /// Logs at ``CacheLogLevel/info``: ``log(_:_:metadata:source:file:function:line:)`` with its level.
  @inlinable
  package func info(
    _ message: @autoclosure () -> String,
    metadata: @autoclosure () -> [String: String] = [:],
    source: @autoclosure () -> String? = nil,
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    log(.info, message(), metadata: metadata(), source: source(), file: file, function: function, line: line)
  }

  /// Logs at ``CacheLogLevel/notice``: ``log(_:_:metadata:source:file:function:line:)`` with its level.
  @inlinable
  package func notice(
    _ message: @autoclosure () -> String,
    metadata: @autoclosure () -> [String: String] = [:],
    source: @autoclosure () -> String? = nil,
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    log(.notice, message(), metadata: metadata(), source: source(), file: file, function: function, line: line)
  }

  /// Logs at ``CacheLogLevel/warning``: ``log(_:_:metadata:source:file:function:line:)`` with its level.
  @inlinable
  package func warning(
    _ message: @autoclosure () -> String,
    metadata: @autoclosure () -> [String: String] = [:],
    source: @autoclosure () -> String? = nil,
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    log(.warning, message(), metadata: metadata(), source: source(), file: file, function: function, line: line)
  }

  /// Logs at ``CacheLogLevel/error``: ``log(_:_:metadata:source:file:function:line:)`` with its level.
  @inlinable
  package func error(
    _ message: @autoclosure () -> String,
    metadata: @autoclosure () -> [String: String] = [:],
    source: @autoclosure () -> String? = nil,
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    log(.error, message(), metadata: metadata(), source: source(), file: file, function: function, line: line)
  }

  /// Logs at ``CacheLogLevel/critical``: ``log(_:_:metadata:source:file:function:line:)`` with its level.
  @inlinable
  package func critical(
    _ message: @autoclosure () -> String,
    metadata: @autoclosure () -> [String: String] = [:],
    source: @autoclosure () -> String? = nil,
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    log(.critical, message(), metadata: metadata(), source: source(), file: file, function: function, line: line)
  }

  // MARK: Helpers

  /// The module of a `#fileID` (`Module/File.swift`): what swift-log uses as the default source.
  @usableFromInline
  static func module(of fileID: String) -> String {
    guard let slash = fileID.firstIndex(of: "/") else { return fileID }
    return String(fileID[..<slash])
  }

  /// `value` as a metadata string: `String(describing:)`, cut at `limit` characters.
  ///
  /// Used by the framework's components for keys and errors, which may be long.
  package static func describe(_ value: Any, limit: Int = 200) -> String {
    let described = String(describing: value)
    guard described.count > limit else { return described }
    return String(described.prefix(limit)) + "…"
  }
}
