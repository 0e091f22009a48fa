extension MemoryLayer {
  /// The limits, expiry and clock of a ``MemoryLayer``.
  public struct Configuration: Sendable {
    /// The most entries the layer holds. `0` stores nothing. Default 10,000.
    public var countLimit: Int

    /// The most the costs of all entries may sum to. Default `Int.max` (no limit).
    public var costLimit: Int

    /// The cost of a value, e.g. `{ $0.count }` for `Data`; `nil` makes every entry cost 0.
    /// Called outside the layer's locks; must return a number in `0..<2^43` (8 TiB, were costs
    /// bytes; the other bits of the entry's 64 hold its place in the policy and what its tags'
    /// last check found): a write of a value outside it is refused with
    /// ``AsyncCacheError/Code/invalidCost``, naming the key.
    public var cost: (@Sendable (Value) -> Int)?

    /// The longest an entry lives in this layer; `nil` for no limit.
    ///
    /// An entry that arrives with an earlier ``CacheEntry/expiresAt`` keeps it.
    public var timeToLive: Duration?

    /// The fraction of the limits (or of the current totals, when smaller) that the layer trims
    /// to on ``MemoryPressureLevel/warning``, in `0...1`. Default `0.5`.
    public var warningTrimFraction: Double

    /// The number of lock-striped segments, a power of two up to 256; `nil` (the default) picks
    /// one from the processor count and the count limit: one for an adaptive layer of at most
    /// 4,096 entries bounded by its count alone, else enough that the processors rarely meet on
    /// one lock, with at least 256 entries each.
    ///
    /// More segments let more threads hit the layer at once. Each segment evicts by itself, so
    /// `1` gives the exact order of the ``evictionPolicy`` (exact LRU, or one W-TinyLFU over
    /// the whole layer) at the price of one lock for all callers. Under the adaptive policy a
    /// layer of one segment and at most 4,096 entries (bounded by its count alone) chooses its
    /// configuration from shadows of the whole layer (see ``EvictionPolicy/adaptive``); with more
    /// segments they share one window target instead; keep at least a few hundred entries per
    /// segment. Many threads hitting a small adaptive layer at once meet on its one lock, held
    /// longer than for the fixed policies (its shadows are updated under it): give them
    /// ``EvictionPolicy/windowTinyLFU`` or a segment count of your own.
    public var segmentCount: Int?

    /// How the layer chooses the entries that leave when it is full. Default
    /// ``EvictionPolicy/adaptive``, which follows the workload; ``EvictionPolicy/leastRecentlyUsed``
    /// has the cheapest hit and the smallest entry.
    ///
    /// Each segment runs the policy over its share of the limits.
    public var evictionPolicy: EvictionPolicy

    /// The seed of the policy's rare random choices, so that a test or a replay gets the same
    /// evictions every time; `nil` (the default) draws one at random.
    ///
    /// Under the W-TinyLFU policies a candidate that loses its duel for a place in the cache
    /// still wins one time in 128 when it is popular (a defence against hash flooding), and the
    /// adaptive policy's shadow caches draw the same way. The hit ratio does not depend on the
    /// seed: over `cache.hitRatio`'s traces, five runs with random seeds (and five processes'
    /// hash seeds) differ by a few tenths of a point on most rows and by at most 1.2 points on
    /// any (two full runs). Eviction order also depends on the keys' hashes, which Swift seeds
    /// per process, on the segment count (automatic above 4,096 entries: it follows the
    /// processor count) and on the order of concurrent accesses: for a replay that is exact from one process to the next, set
    /// `SWIFT_DETERMINISTIC_HASHING=1`, a ``segmentCount``, and replay from one task.
    public var admissionSeed: UInt64?

    /// Whether the layer estimates its hit-ratio curve (``Statistics/hitRatioCurve``): what it
    /// would hit at ¼× to 4× its capacity. Default `true`. About one lookup in a hundred is
    /// watched until its key's next lookup (an insert into a small table keyed by the hash the
    /// lookup computed, then a removal); once the layer has watched 20,000 lookups, half as
    /// many, and so on, each watch weighing the lookups it stands for. The rest pay one
    /// decrement and one bit of the node they read anyway. The watches hold at most a quarter as
    /// many keys as the layer (256 at least). A layer bounded by a count limit of 51,200 or more
    /// (and not by cost) also keeps a sample of one key in a hundred (fewer beyond 131,072
    /// entries: 7,900 to about 17,000 keys in all), to count the distinct keys of long reuses: a lookup of
    /// one of those takes the sample's lock, and the others pay a multiplication and a
    /// comparison. `memory.hit.1task` compares a loading cache's hit with
    /// and without it.
    public var estimatesHitRatioCurve: Bool

    /// The clock that expiry is read from: `now` when an entry is written; when it is looked
    /// up, ``CacheClock/coarseNow``, or for ``WallClock`` a time the library publishes (see
    /// <doc:FreshnessAndStatistics>). Default: the clock of the cache or chain the layer is put in (see
    /// `CacheEnvironment`), else `WallClock`.
    /// This is the clock given here; the layer's `clock` tells the one it reads.
    @FollowsCache public var clock: any CacheClock

    /// Where the layer logs the entries it refuses because they arrived already expired by its
    /// clock (a warning the first time, then debug; see ``EvictionReason/expiredOnArrival``).
    /// Default: the logger of the cache or chain the layer is put in (see ``CacheEnvironment``),
    /// else ``CacheLogger/disabled``. Hits and evictions never log.
    @FollowsCache public var logger: CacheLogger

    /// Creates a configuration.
    public init(
      countLimit: Int = 10_000,
      costLimit: Int = .max,
      cost: (@Sendable (Value) -> Int)? = nil,
      timeToLive: Duration? = nil,
      warningTrimFraction: Double = 0.5,
      segmentCount: Int? = nil,
      evictionPolicy: EvictionPolicy = .adaptive,
      admissionSeed: UInt64? = nil,
      estimatesHitRatioCurve: Bool = true,
      clock: (any CacheClock)? = nil,
      logger: CacheLogger? = nil
    ) {
      self.estimatesHitRatioCurve = estimatesHitRatioCurve
      self.countLimit = countLimit
      self.costLimit = costLimit
      self.cost = cost
      self.timeToLive = timeToLive
      self.warningTrimFraction = warningTrimFraction
      self.segmentCount = segmentCount
      self.evictionPolicy = evictionPolicy
      self.admissionSeed = admissionSeed
      self._clock = .clock(clock)
      self._logger = .logger(logger)
    }

    func validate() throws {
      let check = ConfigurationCheck("MemoryLayer")
      try check.requireNotNegative("countLimit", countLimit)
      try check.requireNotNegative("costLimit", costLimit)
      try check.requirePositive("timeToLive", timeToLive)
      try check.require(
        (0...1).contains(warningTrimFraction), "warningTrimFraction", is: "\(warningTrimFraction)", mustBe: "in 0...1")
      if let segmentCount {
        try check.require(
          (1...256).contains(segmentCount) && segmentCount & (segmentCount - 1) == 0, "segmentCount",
          is: "\(segmentCount)", mustBe: "a power of two in 1...256")
      }
    }

    /// Enough segments that the processors rarely meet on one lock (16 per processor, at most
    /// 256), few enough that each keeps at least 256 entries in its eviction order; and one
    /// segment for an adaptive layer of at most 4,096 entries bounded by its count alone, whose
    /// configuration a referee then chooses from shadows of the whole layer (segments of a few
    /// hundred entries each see a slice of a loop, longer or shorter than the segment by chance).
    static func automaticSegmentCount(
      countLimit: Int, policy: EvictionPolicy = .adaptive, boundedByCost: Bool = false
    ) -> Int {
      if MemoryStore<Int, Int>.isRefereed(
        policy: policy, countLimit: countLimit, boundedByCost: boundedByCost, segmentCount: 1)
      {
        return 1
      }
      var segments = 1
      while segments < 16 * SystemInfo.processorCount, segments < 256 { segments *= 2 }
      while segments > 1, countLimit / segments < 256 { segments /= 2 }
      return segments
    }
  }
}
