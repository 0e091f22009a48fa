extension UserDefaultsLayer {
  /// The namespace, size limit, expiry and clock of a ``UserDefaultsLayer``.
  public struct Configuration: Sendable {
    /// The part of the suite this layer owns: its entries are stored under defaults keys that
    /// start with `asynccache.<namespace>.`, and ``UserDefaultsLayer/removeAll()`` removes only
    /// those. Give two layers that share a suite different namespaces. Not empty, no `.`.
    /// Default `"default"`.
    public var namespace: String

    /// The largest encoded value one entry may hold; larger ones are refused with
    /// ``PersistenceError/Code/valueTooLarge``.
    /// Default 64 KiB: UserDefaults loads a whole suite into memory and rewrites it on change, so
    /// it suits small values only.
    public var maximumEntrySize: Int

    /// The longest an entry lives in this layer; `nil` (the default) for no limit.
    ///
    /// An entry that arrives with an earlier ``CacheEntry/expiresAt`` keeps it.
    public var timeToLive: Duration?

    /// The clock that expiry is read from. Default: the clock of the cache or chain the layer is
    /// put in (see ``CacheEnvironment``), else `WallClock`: stored expiries are wall-clock instants,
    /// meaningful across launches.
    /// This is the clock given here; the layer's `clock` tells the one it reads.
    @FollowsCache public var clock: any CacheClock

    /// Where the layer logs what it recovers from (see <doc:CacheLogging>): damaged, foreign or
    /// undecodable stored values removed (``CacheLogLevel/warning``), and a suite that could not be
    /// written after such a removal (``CacheLogLevel/warning``). Default: the logger of the cache
    /// or chain the layer is put in (see ``CacheEnvironment``), else `CacheLogger.disabled`. Errors
    /// the layer throws are not logged by it: its ``CacheChain`` logs them.
    @FollowsCache public var logger: CacheLogger

    /// Creates a configuration.
    public init(
      namespace: String = "default",
      maximumEntrySize: Int = 64 * 1024,
      timeToLive: Duration? = nil,
      clock: (any CacheClock)? = nil,
      logger: CacheLogger? = nil
    ) {
      self.namespace = namespace
      self.maximumEntrySize = maximumEntrySize
      self.timeToLive = timeToLive
      self._clock = .clock(clock)
      self._logger = .logger(logger)
    }

    func validate() throws {
      let check = ConfigurationCheck("UserDefaultsLayer")
      // Bytes, not characters: `contains(".")` misses a "." that a combining mark joins into one
      // character, and the stored prefix would then reach into another namespace.
      let bytes = namespace.nfcNormalized.utf8
      try check.require(
        !bytes.isEmpty && !bytes.contains(UInt8(ascii: ".")) && !bytes.contains(0), "namespace",
        is: namespace.debugDescription, mustBe: "non-empty and contain no \".\" or NUL")
      try check.requirePositive("maximumEntrySize", maximumEntrySize)
      try check.requirePositive("timeToLive", timeToLive)
    }
  }
}
