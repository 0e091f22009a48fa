extension MemoryLayer {
  /// The limits, expiry and clock of a ``MemoryLayer``.
  public struct Configuration: Sendable {
    /// The most entries the layer holds. `0` stores nothing. Default 10,000.
    public var countLimit: Int

    /// The most the costs of all entries may sum to. Default `Int.max` (no limit).
    public var costLimit: Int

    /// The cost of a value, e.g. `{ $0.count }` for `Data`; `nil` makes every entry cost 0.
    /// Called outside the layer's locks; must not return a negative number.
    public var cost: (@Sendable (Value) -> Int)?

    /// The longest an entry lives in this layer; `nil` for no limit.
    ///
    /// An entry that arrives with an earlier ``CacheEntry/expiresAt`` keeps it.
    public var timeToLive: Duration?

    /// The fraction of the limits (or of the current totals, when smaller) that the layer trims
    /// to on ``MemoryPressureLevel/warning``, in `0...1`. Default `0.5`.
    public var warningTrimFraction: Double

    /// The number of lock-striped segments, a power of two up to 256; `nil` (the default) picks
    /// one from the processor count and the count limit.
    ///
    /// More segments let more threads hit the layer at once. Each segment evicts by itself, so
    /// `1` gives the exact order of the ``evictionPolicy`` (exact LRU, or one W-TinyLFU over
    /// the whole layer) at the price of one lock for all callers. Under the adaptive policy the
    /// segments share one window target; keep at least a few hundred entries per segment.
    public var segmentCount: Int?

    /// How the layer chooses the entries that leave when it is full. Default
    /// ``EvictionPolicy/adaptive``, which follows the workload; ``EvictionPolicy/leastRecentlyUsed``
    /// has the cheapest hit and the smallest entry.
    ///
    /// Each segment runs the policy over its share of the limits.
    public var evictionPolicy: EvictionPolicy

    /// The clock that expiry is read from: `now` when an entry is written; when it is looked
    /// up, ``CacheClock/coarseNow``, or for ``WallClock`` a time the library publishes (see
    /// <doc:FreshnessAndStatistics>). Default: the clock of the cache or chain the layer is put in (see
    /// `CacheEnvironment`), else `WallClock`.
    /// This is the clock given here; the layer's `clock` tells the one it reads.
    public var clock: any CacheClock {
      get { clockGiven ?? WallClock() }
      set { clockGiven = newValue }
    }
    /// The clock set on this configuration; `nil` to follow the cache's or chain's.
    package var clockGiven: (any CacheClock)?

    /// Where the layer logs the entries it refuses because they arrived already expired by its
    /// clock (a warning the first time, then debug; see ``EvictionReason/expiredOnArrival``).
    /// Default: the logger of the cache or chain the layer is put in (see ``CacheEnvironment``),
    /// else ``CacheLogger/disabled``. Hits and evictions never log.
    public var logger: CacheLogger {
      get { loggerGiven ?? .disabled }
      set { loggerGiven = newValue }
    }
    /// The logger set on this configuration; `nil` to follow the cache's or chain's.
    package var loggerGiven: CacheLogger?

    /// Creates a configuration.
    public init(
      countLimit: Int = 10_000,
      costLimit: Int = .max,
      cost: (@Sendable (Value) -> Int)? = nil,
      timeToLive: Duration? = nil,
      warningTrimFraction: Double = 0.5,
      segmentCount: Int? = nil,
      evictionPolicy: EvictionPolicy = .adaptive,
      clock: (any CacheClock)? = nil,
      logger: CacheLogger? = nil
    ) {
      self.countLimit = countLimit
      self.costLimit = costLimit
      self.cost = cost
      self.timeToLive = timeToLive
      self.warningTrimFraction = warningTrimFraction
      self.segmentCount = segmentCount
      self.evictionPolicy = evictionPolicy
      self.clockGiven = clock
      self.loggerGiven = logger
    }

    func validate() throws {
      guard countLimit >= 0 else {
        throw AsyncCacheError.invalidConfiguration("MemoryLayer countLimit is \(countLimit); it must be 0 or more")
      }
      guard costLimit >= 0 else {
        throw AsyncCacheError.invalidConfiguration("MemoryLayer costLimit is \(costLimit); it must be 0 or more")
      }
      if let timeToLive, timeToLive <= .zero {
        throw AsyncCacheError.invalidConfiguration(
          "MemoryLayer timeToLive is \(timeToLive.readable); it must be positive")
      }
      guard (0...1).contains(warningTrimFraction) else {
        throw AsyncCacheError.invalidConfiguration(
          "MemoryLayer warningTrimFraction is \(warningTrimFraction); it must be in 0...1"
        )
      }
      if let segmentCount, segmentCount < 1 || segmentCount > 256 || segmentCount & (segmentCount - 1) != 0 {
        throw AsyncCacheError.invalidConfiguration(
          "MemoryLayer segmentCount is \(segmentCount); it must be a power of two in 1...256"
        )
      }
    }

    /// Enough segments that the processors rarely meet on one lock (16 per processor, at most
    /// 256), few enough that each keeps at least 256 entries in its eviction order (so small
    /// caches get the exact order of their policy).
    static func automaticSegmentCount(countLimit: Int) -> Int {
      var segments = 1
      while segments < 16 * SystemInfo.processorCount, segments < 256 { segments *= 2 }
      while segments > 1, countLimit / segments < 256 { segments /= 2 }
      return segments
    }
  }
}
