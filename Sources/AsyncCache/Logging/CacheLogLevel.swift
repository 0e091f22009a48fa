/// How severe a ``CacheLogRecord`` is, from ``trace`` (the most detail) to ``critical``.
///
/// The same seven levels, in the same order and with the same raw values, as swift-log's
/// `Logger.Level`, so a bridge maps them one to one (see <doc:CacheLogging>). Levels compare by
/// severity: `.debug < .warning`.
public enum CacheLogLevel: String, Sendable, Hashable, Codable, CaseIterable, Comparable, CustomStringConvertible {
  /// Every step of a load, in detail: load starts, cancelled loads, a prefetcher pausing.
  case trace
  /// What a developer follows when a cache misbehaves: loads that finished or failed, from where.
  case debug
  /// Normal events worth knowing about: a retry of the origin, leftovers of an interrupted write
  /// swept away.
  case info
  /// Events that are normal but significant: a change of memory pressure, an origin given up on
  /// after its retries, a schema migration.
  case notice
  /// Something went wrong and the cache recovered on its own: a layer skipped after it failed, a
  /// failed write-back, a damaged entry discarded.
  case warning
  /// Something went wrong and data was lost: a database that SQLite reported corrupt was emptied.
  case error
  /// The cache cannot go on. Unused by the framework today; available to handlers and callers.
  case critical

  /// The level of the same name as `level`: swift-log's `Logger.Level` (a service's
  /// `logger.logLevel`) has these seven names, so a cache can follow the level a service set,
  /// read once:
  ///
  /// ```swift
  /// import Logging
  ///
  /// var logger = Logger(label: "catalog")
  /// logger.logLevel = .debug
  /// let cacheLogger = CacheLogger(
  ///     minimumLevel: CacheLogLevel(logger.logLevel), forwardingTo: logger.log(level:_:metadata:source:file:function:line:))
  /// ```
  ///
  /// A name that is none of the seven gives ``trace``: every record is built, and the other
  /// logger's own level decides.
  public init(_ level: some RawRepresentable<String>) {
    self = CacheLogLevel(rawValue: level.rawValue) ?? .trace
  }

  /// The level's rank: 0 for ``trace`` up to 6 for ``critical``.
  @inlinable
  var severity: UInt8 {
    switch self {
    case .trace: 0
    case .debug: 1
    case .info: 2
    case .notice: 3
    case .warning: 4
    case .error: 5
    case .critical: 6
    }
  }

  /// Whether `lhs` is less severe than `rhs`.
  @inlinable
  public static func < (lhs: CacheLogLevel, rhs: CacheLogLevel) -> Bool {
    lhs.severity < rhs.severity
  }

  /// The level's name, as swift-log spells it: `"trace"`, `"debug"`, …
  public var description: String { rawValue }
}
