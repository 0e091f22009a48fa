/// What a layer reads its time from and logs to: the clock and logger its configuration names,
/// else those of the first cache or chain it is put in (see ``CacheEnvironment``), else the wall
/// clock and no logging.
///
/// One per layer, made from its configuration's ``FollowsCache`` settings; a layer that holds
/// one conforms to ``EnvironmentFollowingLayer`` and gets ``AsyncCacheLayer/follow(_:)``
/// written for it. Its records name the layer (`source`) and carry the layer's context (its
/// directory, database or namespace). Safe from any context.
package final class LayerEnvironment: Sendable {
  /// The clock the layer reads.
  package let clock: FollowedClock
  /// The logger the layer writes to.
  package let logger: Followed<CacheLogger>
  /// Whom the layer tells of the tag invalidations it learns from elsewhere: the chain it is
  /// in (see ``CacheEnvironment``).
  private let tagInvalidationHandler = Followed<TagInvalidationHandler?>(given: nil, fallback: nil)
  /// The name records are logged under: the layer's type, such as `DiskLayer`.
  private let source: String
  /// What every record of the layer carries, such as its directory; a record's own metadata
  /// wins over it.
  private let context: [String: String]
  /// How the entries that arrive already expired are logged.
  private let expiredArrivals = ExpiredArrivals()

  /// The environment of a layer given `clock` and `logger` (each `nil` to follow), that logs
  /// as `source` with `context` added to every record.
  package init(
    clock: (any CacheClock)?, logger: CacheLogger?, source: String, context: [String: String] = [:]
  ) {
    self.clock = FollowedClock(given: clock)
    self.logger = Followed(given: logger, fallback: .disabled)
    self.source = source
    self.context = context
  }

  /// Follows the clock and the logger of `environment`, for those the layer was not given and
  /// does not follow yet.
  package func follow(_ environment: CacheEnvironment) {
    clock.follow(environment.clock)
    logger.follow(environment.logger)
    if let handler = environment.tagInvalidationHandler { tagInvalidationHandler.follow(handler) }
  }

  /// Tells the chain the layer is in (the first it was put in) of what it learnt from elsewhere
  /// about tag invalidations.
  package func tell(_ news: LearntInvalidation) {
    tagInvalidationHandler.value?(news)
  }

  /// Logs as the layer, with its context added to `metadata`. Evaluates nothing when the logger
  /// drops `level`.
  package func log(
    _ level: CacheLogLevel,
    _ message: @autoclosure () -> String,
    metadata: @autoclosure () -> [String: String] = [:],
    file: String = #fileID,
    function: String = #function,
    line: UInt = #line
  ) {
    logger.value.log(
      level, message(), metadata: context.isEmpty ? metadata() : metadata().merging(context) { mine, _ in mine },
      source: source, file: file, function: function, line: line)
  }

  /// The level to log the next entry that arrived already expired at: a warning the first time,
  /// then debug (see `ExpiredArrivals`).
  package func nextExpiredArrivalLevel() -> CacheLogLevel { expiredArrivals.nextLevel() }

  /// Logs an entry for `key` that arrived already expired by the layer's clock, and was not
  /// stored: a warning the first time, then at debug.
  package func logExpiredArrival(
    key: Any, expiresAt: CacheInstant, now: CacheInstant, file: String = #fileID, function: String = #function,
    line: UInt = #line
  ) {
    log(
      nextExpiredArrivalLevel(), "an entry " + ExpiredArrivals.describe(expiresAt: expiresAt, now: now),
      metadata: ["key": CacheLogger.describe(key), "expiresAt": "\(expiresAt)", "now": "\(now)"], file: file,
      function: function, line: line)
  }
}

/// A layer whose clock and logger are a ``LayerEnvironment``: its ``AsyncCacheLayer/follow(_:)``
/// passes the environment it is handed on to it.
package protocol EnvironmentFollowingLayer: AsyncCacheLayer {
  /// The layer's clock and logger.
  nonisolated var layerEnvironment: LayerEnvironment { get }
}

extension EnvironmentFollowingLayer {
  /// Follows the clock and the logger of the cache or chain the layer is put in, for those its
  /// configuration does not name (see ``CacheEnvironment``).
  public nonisolated func follow(_ environment: CacheEnvironment) {
    layerEnvironment.follow(environment)
  }

  /// The clock the layer reads.
  package nonisolated var followedClock: FollowedClock { layerEnvironment.clock }

  /// The logger the layer writes to.
  package nonisolated var followedLogger: Followed<CacheLogger> { layerEnvironment.logger }
}
