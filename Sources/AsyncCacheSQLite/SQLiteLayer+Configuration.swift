public import AsyncCache

extension SQLiteLayer {
  /// The limits, timing and clock of a ``SQLiteLayer``.
  public struct Configuration: Sendable {
    /// The most bytes of keys and values the namespace may hold: a hard limit, enforced in the
    /// transaction that writes, by evicting expired and then least recently accessed rows.
    /// Default 100 MiB. The file is larger than this by SQLite's page and index overhead.
    public var sizeLimit: Int

    /// The most rows the namespace may hold, or `nil` for no count limit (the default).
    public var countLimit: Int?

    /// The largest encoded value the layer accepts; larger ones are refused with
    /// `PersistenceError.Code.valueTooLarge` before they reach SQLite. Default: the smaller of
    /// ``sizeLimit`` and 64 MiB.
    public var maximumEntrySize: Int?

    /// The lifetime of entries inserted without an expiry, or `nil` (the default) for none.
    public var timeToLive: Duration?

    /// How long `flush()` and `close()` wait for a lock held by another connection or process
    /// before they fail with `PersistenceError.Code.busy`. Default 5 seconds. Background writes
    /// wait at most 100 ms (reads share the layer's thread), then retry later.
    public var busyTimeout: Duration

    /// How many bytes of written values may wait for their transaction before `insert` waits
    /// for them to be written. Default 32 MiB.
    public var maximumPendingBytes: Int

    /// How many reads may wait to record their access time before the layer writes them in a
    /// transaction of their own. Default 10,000. Otherwise they ride with the next write, whose
    /// evictions they inform.
    public var maximumPendingTouches: Int

    /// The resolution of the least-recently-used order: a read records its access time only
    /// when the row's recorded one is older than this. Default 60 seconds, so that rows read
    /// over and over cost one write a minute, not one per read; `.zero` makes the order exact.
    public var accessTimeResolution: Duration

    /// The clock that expiry and access times are read from, and retries of failed background
    /// writes wait on. Default: for expiry and access times, the clock of the cache or chain the
    /// layer is put in (see `CacheEnvironment`), else `WallClock`; for the retries, `WallClock`.
    /// The layer's `clock` tells the clock expiry is read from.
    @FollowsCache public var clock: any CacheClock

    /// Called with every ``SQLiteLayerEvent`` the layer's ``SQLiteLayer/events(bufferingNewest:)``
    /// sequences get, those of its opening included, synchronously on the layer's connection
    /// thread: keep it short. Default `nil`.
    public var eventHandler: (@Sendable (SQLiteLayerEvent) -> Void)?

    /// An async function that returns when the service running the layer on its own (its
    /// `run()`) should shut down gracefully: pass swift-service-lifecycle's `gracefulShutdown`.
    /// Default `nil`: `run()` ends when its task is cancelled or the layer is closed. A layer in a
    /// `LoadingCache` is closed by the cache's own `run()` or `close()`.
    public var gracefulShutdown: (@Sendable () async throws -> Void)?

    /// Where the layer logs every ``SQLiteLayerEvent`` and its other recoveries: a database emptied
    /// because SQLite reported it corrupt (`error`), a schema reset or a damaged row discarded
    /// (`warning`), a failed background write (`warning`), writes recovered or a schema migrated
    /// (`notice`), a file opened read-only (`warning`). Default: the logger of the cache or chain
    /// the layer is put in (see `CacheEnvironment`), else `CacheLogger.disabled`. Errors the layer
    /// throws are not logged by it: its `CacheChain` logs them.
    @FollowsCache public var logger: CacheLogger

    /// Creates a configuration.
    public init(
      sizeLimit: Int = 100 << 20,
      countLimit: Int? = nil,
      maximumEntrySize: Int? = nil,
      timeToLive: Duration? = nil,
      busyTimeout: Duration = .seconds(5),
      maximumPendingBytes: Int = 32 << 20,
      maximumPendingTouches: Int = 10_000,
      accessTimeResolution: Duration = .seconds(60),
      clock: (any CacheClock)? = nil,
      eventHandler: (@Sendable (SQLiteLayerEvent) -> Void)? = nil,
      logger: CacheLogger? = nil
    ) {
      self.sizeLimit = sizeLimit
      self.countLimit = countLimit
      self.maximumEntrySize = maximumEntrySize
      self.timeToLive = timeToLive
      self.busyTimeout = busyTimeout
      self.maximumPendingBytes = maximumPendingBytes
      self.maximumPendingTouches = maximumPendingTouches
      self.accessTimeResolution = accessTimeResolution
      self._clock = .clock(clock)
      self.eventHandler = eventHandler
      self._logger = .logger(logger)
    }

    /// The per-entry limit in effect.
    var effectiveMaximumEntrySize: Int {
      maximumEntrySize ?? Swift.min(sizeLimit, 64 << 20)
    }

    func validate(sqliteMaximumLength: Int) throws {
      let check = ConfigurationCheck("SQLiteLayer")
      try check.requirePositive("sizeLimit", sizeLimit)
      try check.requirePositive("countLimit", countLimit)
      let entryLimit = effectiveMaximumEntrySize
      try check.requirePositive("maximumEntrySize", entryLimit)
      let ceiling = sqliteMaximumLength - SQLiteRecord.headerSize
      try check.require(
        entryLimit <= ceiling, "maximumEntrySize", is: "\(entryLimit)",
        mustBe: "at most SQLite's limit of \(ceiling) bytes per value")
      try check.requirePositive("timeToLive", timeToLive)
      try check.requireNotNegative("busyTimeout", busyTimeout)
      try check.requirePositive("maximumPendingBytes", maximumPendingBytes)
      try check.requireNotNegative("accessTimeResolution", accessTimeResolution)
      try check.requirePositive("maximumPendingTouches", maximumPendingTouches)
    }
  }
}
