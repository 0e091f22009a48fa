/// Receives the framework's log records: the seam that sends them to swift-log, `os.Logger`,
/// `print` or a test's recorder.
///
/// ```swift
/// struct PrintLogHandler: CacheLogHandler {
///     func log(_ record: CacheLogRecord) { print(record) }
/// }
/// let logger = CacheLogger(handler: PrintLogHandler(), minimumLevel: .info)
/// ```
///
/// The framework calls ``log(_:)`` synchronously, on the thread of the task or actor that logs
/// (a layer's own I/O thread, a load's task), possibly from many threads at once, and never
/// while it holds one of its locks. Keep it short and non-blocking: hand the record to a logging
/// system that buffers, rather than writing to a file inline. A handler sees only records whose
/// level is at least its ``CacheLogger``'s ``CacheLogger/minimumLevel``.
public protocol CacheLogHandler: Sendable {
  /// Handles one record.
  ///
  /// - Parameter record: The record; its level is at least the logger's minimum.
  func log(_ record: CacheLogRecord)
}

/// A log handler made of a closure.
///
/// ```swift
/// let logger = CacheLogger(handler: ClosureLogHandler { print($0) }, minimumLevel: .debug)
/// ```
///
/// ``CacheLogger/init(minimumLevel:_:)`` makes one for you.
public struct ClosureLogHandler: CacheLogHandler {
  private let body: @Sendable (CacheLogRecord) -> Void

  /// Creates a handler that calls `body` with every record.
  ///
  /// - Parameter body: Called synchronously, from any thread, as ``CacheLogHandler/log(_:)`` is.
  public init(_ body: @escaping @Sendable (CacheLogRecord) -> Void) {
    self.body = body
  }

  /// Calls the closure with `record`.
  ///
  /// - Parameter record: The record.
  public func log(_ record: CacheLogRecord) {
    body(record)
  }
}
