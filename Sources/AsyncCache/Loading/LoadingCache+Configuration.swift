extension LoadingCache {
  /// Expiry of loaded values, retries, and the clock it is read from.
  ///
  /// An entry the cache stores is *fresh* for its lifetime (``timeToLive``, or what
  /// ``timeToLiveForValue`` says, shortened by ``timeToLiveJitter``), then *stale* for a grace
  /// period, the longer of ``staleWhileRevalidate`` and ``staleIfError``, then *expired*. The
  /// grace is part of the expiry the layers store, so every layer keeps a stale entry until it
  /// expires and a back-filled copy expires with its source. See <doc:FreshnessAndStatistics>.
  public struct Configuration: Sendable {
    /// How long values from the origin (and inserted values without their own time-to-live)
    /// stay fresh; `nil` for ever. Positive. Layers may keep them for less.
    public var timeToLive: Duration?
    /// The lifetime of each loaded value, when it depends on the value (an HTTP response's
    /// `max-age`, say); `nil` from the closure for a value that never expires. When set,
    /// ``timeToLive`` applies to inserted values only. With ``refreshAhead``, it is also called
    /// on reads of entries that expire, to find their lifetime. Default `nil`.
    public var timeToLiveForValue: (@Sendable (Key, Value) -> Duration?)?
    /// The share of a loaded value's lifetime taken off at random, in `0..<1`, so that values
    /// loaded together do not expire together: with 0.1, a 10-minute lifetime becomes 9 to 10
    /// minutes. Default 0.
    public var timeToLiveJitter: Double
    /// How long after it turns stale an entry is still served at once, while one background
    /// load refreshes it (stale-while-revalidate). Default zero: a stale entry is not served.
    /// At most 100 years count: a longer one is taken as 100 years, so that stored expiries stay
    /// within the instants a clock holds.
    public var staleWhileRevalidate: Duration
    /// How long after it turns stale an entry is kept to be served when a load of its key fails
    /// (stale-if-error); each such failure is reported as ``CacheEvent/servedStale(key:error:)``.
    /// Default zero. At most 100 years count: a longer one (`.seconds(Int64.max)` for "for ever") is
    /// taken as 100 years, so that stored expiries stay within the instants a clock holds.
    public var staleIfError: Duration
    /// The share of its lifetime, in `0<..<1`, after which reading a fresh entry refreshes it
    /// in the background, so that entries read often never turn stale. Default `nil`: none.
    ///
    /// Layers store no write time, so a refresh falls due when the fresh time left is at most
    /// `1 - refreshAhead` of the configured lifetime, less ``timeToLiveJitter``'s largest cut:
    /// with 0.8 and no jitter, at 80% of the lifetime, to the nanosecond (reckoned in integer
    /// nanoseconds), as the hit reads the time (with ``WallClock`` up to about 4 ms late: see
    /// <doc:FreshnessAndStatistics>). An entry inserted with a much shorter time-to-live than
    /// the configured one falls due sooner.
    public var refreshAhead: Double?
    /// Whether reading an entry extends its life (sliding expiry), so that entries read often
    /// never expire and idle ones do. Default `false`.
    ///
    /// A request that finds a fresh entry with less than half of its lifetime left (the same
    /// reckoning as ``refreshAhead`` at 0.5) extends it to a full lifetime from now: in the top
    /// ``MemoryLayer`` at once, and in the layers below in the background, a write since the read
    /// winning. So an entry read at least once every half lifetime never expires, one unread for
    /// a full lifetime always does, and each key costs the layers below at most one write per
    /// half lifetime. A load that finds such an entry below the top extends it in every layer.
    /// The writes below are best effort: one overtaken by a write of the key (or by a load's
    /// value, or by another extension's) is dropped, and the next extension makes up for it. An
    /// extension overtakes no load: a load that starts while it is written below still stores
    /// its value, after it.
    /// Needs ``timeToLive`` or ``timeToLiveForValue``; cannot be combined with ``refreshAhead``.
    public var slidingExpiration: Bool
    /// Which origin errors are remembered, and for how long; `nil` (the default) for none.
    public var negativeCaching: NegativeCachingPolicy?
    /// The clock expiry is computed from, and retry delays and load timeouts are slept on.
    /// Default ``WallClock``.
    ///
    /// The cache hands its clock to its layers: those created without a clock of their own
    /// follow it (see ``CacheEnvironment``), so one clock set here drives them all. A cache
    /// given none over a chain given one (``CacheChain/Configuration-swift.struct/clock``) takes
    /// the chain's. A
    /// top ``MemoryLayer`` tells whether a hit is fresh by its clock's ``CacheClock/coarseNow``,
    /// or for ``WallClock`` a time the library publishes (read once per hit of an entry that
    /// expires, and shared by the freshness rules; see <doc:FreshnessAndStatistics>).
    /// Refresh-ahead and sliding-expiry points are compared in integer nanoseconds, exact under
    /// `ManualClock`.
    /// Its projection (`$clock`) is the clock set here; `nil` for the chain's, or the wall clock.
    @FollowsCache public var clock: any CacheClock
    /// When the origin is asked again after it fails. Default ``RetryPolicy/never``.
    public var retryPolicy: RetryPolicy
    /// How long a request waits for a slow load before it gets a stale value (soft) or an error
    /// (hard). Default ``LoadTimeouts/none``. A request may set its own
    /// (``LoadingCache/value(for:timeouts:)``).
    public var loadTimeouts: LoadTimeouts
    /// Where the cache logs its loads, retries and memory-pressure changes (see <doc:CacheLogging>).
    /// Default ``CacheLogger/disabled``. Hits never log.
    ///
    /// The cache hands the logger it is given to its chain and layers: those created without a
    /// logger of their own follow it (see ``CacheEnvironment``), as do the cache's prefetchers.
    /// Its projection (`$logger`) is the logger set here; `nil` for none, not handed to the
    /// layers.
    @FollowsCache public var logger: CacheLogger
    /// Called once with every load that ends (see ``LoadReport``): its key, outcome, source,
    /// duration and attempts. Unlike ``LoadingCache/events(bufferingNewest:)``, it loses nothing
    /// and costs hits nothing: the observer a metrics reporter needs. Called synchronously, on
    /// the task that ends the load, before its requests resume: keep it short, and do not wait
    /// there for the cache. Default `nil`.
    public var onLoadEnded: (@Sendable (LoadReport<Key>) -> Void)?
    /// Puts each load, each origin call and, if it asks, each layer operation of a load in a
    /// span (see ``CacheTracer`` and <doc:Tracing>). Handed to the cache's chain, unless the
    /// chain was given its own. Hits get no span. Default `nil`: no spans.
    public var tracer: (any CacheTracer)?
    /// Called with every layer lookup of the cache's loads (see ``LayerLookupReport``): the
    /// layer, hit, miss or failure, and how long it took; what a per-layer latency histogram
    /// records. Handed to the cache's chain, unless the chain was given its own
    /// (``CacheChain/Configuration-swift.struct/onLookup``). Hits of a top ``MemoryLayer`` are
    /// not lookups of the chain. Called synchronously: keep it short. Default `nil`.
    public var onLayerLookup: (@Sendable (LayerLookupReport) -> Void)?
    /// An async function that returns when the service running the cache (``LoadingCache/run()``)
    /// should shut down gracefully, and throws when its task is cancelled: pass
    /// swift-service-lifecycle's `gracefulShutdown`. ``LoadingCache/run()`` then closes the
    /// cache, letting the loads in flight finish. Default `nil`: `run()` ends when its task is
    /// cancelled or the cache is closed.
    public var gracefulShutdown: (@Sendable () async throws -> Void)?
    /// Whether ``LoadingCache/run()`` follows the platform's memory pressure while it runs
    /// (see ``LoadingCache/followSystemMemoryPressure()``). Default `true`.
    public var followsMemoryPressureWhileRunning: Bool
    /// Where jitter draws from: a number in `0..<1` per call. Tests replace it.
    package var randomUnit: @Sendable () -> Double = { Double.random(in: 0..<1) }

    /// Creates a configuration.
    public init(
      timeToLive: Duration? = nil,
      staleWhileRevalidate: Duration = .zero,
      staleIfError: Duration = .zero,
      refreshAhead: Double? = nil,
      slidingExpiration: Bool = false,
      timeToLiveJitter: Double = 0,
      timeToLiveForValue: (@Sendable (Key, Value) -> Duration?)? = nil,
      negativeCaching: NegativeCachingPolicy? = nil,
      clock: (any CacheClock)? = nil,
      retryPolicy: RetryPolicy = .never,
      loadTimeouts: LoadTimeouts = .none,
      logger: CacheLogger? = nil,
      onLoadEnded: (@Sendable (LoadReport<Key>) -> Void)? = nil,
      onLayerLookup: (@Sendable (LayerLookupReport) -> Void)? = nil,
      tracer: (any CacheTracer)? = nil,
      gracefulShutdown: (@Sendable () async throws -> Void)? = nil,
      followsMemoryPressureWhileRunning: Bool = true
    ) {
      self.timeToLive = timeToLive
      self.staleWhileRevalidate = staleWhileRevalidate
      self.staleIfError = staleIfError
      self.refreshAhead = refreshAhead
      self.slidingExpiration = slidingExpiration
      self.timeToLiveJitter = timeToLiveJitter
      self.timeToLiveForValue = timeToLiveForValue
      self.negativeCaching = negativeCaching
      self._clock = .clock(clock)
      self.retryPolicy = retryPolicy
      self.loadTimeouts = loadTimeouts
      self._logger = .logger(logger)
      self.onLoadEnded = onLoadEnded
      self.tracer = tracer
      self.onLayerLookup = onLayerLookup
      self.gracefulShutdown = gracefulShutdown
      self.followsMemoryPressureWhileRunning = followsMemoryPressureWhileRunning
    }

    /// Throws ``AsyncCacheError/Code/invalidConfiguration`` naming the first value out of range.
    func validate() throws {
      let check = ConfigurationCheck("LoadingCache")
      try check.requirePositive("timeToLive", timeToLive)
      try check.requireNotNegative("staleWhileRevalidate", staleWhileRevalidate)
      try check.requireNotNegative("staleIfError", staleIfError)
      if let refreshAhead {
        try check.require(
          refreshAhead > 0 && refreshAhead < 1, "refreshAhead", is: "\(refreshAhead)", mustBe: "in 0<..<1")
      }
      if slidingExpiration, refreshAhead != nil {
        throw check.invalid(
          "slidingExpiration and refreshAhead cannot be combined: an entry read late in its life is either "
            + "extended or refreshed")
      }
      if slidingExpiration, timeToLive == nil, timeToLiveForValue == nil {
        throw check.invalid("slidingExpiration needs a timeToLive or a timeToLiveForValue to extend entries by")
      }
      try check.require(
        timeToLiveJitter >= 0 && timeToLiveJitter < 1, "timeToLiveJitter", is: "\(timeToLiveJitter)",
        mustBe: "in 0..<1")
      try negativeCaching?.validate()
      try loadTimeouts.validate(in: "LoadingCache loadTimeouts:")
    }
  }
}
