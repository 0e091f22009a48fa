extension DiskLayer {
  /// The limits, expiry and clock of a ``DiskLayer``.
  ///
  /// Sizes count the bytes of the entry files: a 40-byte header, the encoded key and the encoded
  /// value. The file system's rounding up to whole blocks is not counted.
  public struct Configuration: Sendable {
    /// The most bytes the entry files may sum to; a hard limit. Default 256 MiB.
    ///
    /// Before a write, least recently used entries are deleted until the new entry fits, so the
    /// stored entries never sum to more. While a write is under way its temporary file may add up
    /// to one entry's size.
    public var sizeLimit: Int

    /// The most entries the layer holds; `nil` (the default) for no limit.
    public var countLimit: Int?

    /// The largest encoded value the layer stores; larger ones are refused with
    /// ``PersistenceError/Code/valueTooLarge`` before anything is written (as is an entry whose
    /// header, key and value exceed ``sizeLimit``). `nil` (the default) means the smaller of
    /// ``sizeLimit`` and 64 MiB.
    public var maximumEntrySize: Int?

    /// The longest an entry lives in this layer; `nil` for no limit.
    ///
    /// An entry that arrives with an earlier ``CacheEntry/expiresAt`` keeps it.
    public var timeToLive: Duration?

    /// The clock that expiry is read from. Default: the clock of the cache or chain the layer is
    /// put in (see ``CacheEnvironment``), else `WallClock`.
    ///
    /// Expiry instants are stored in the files as wall-clock time, so they keep their meaning
    /// across restarts. Least-recently-used order across restarts comes from the files'
    /// modification times, which are always real time.
    /// This is the clock given here; the layer's `clock` tells the one it reads.
    @FollowsCache public var clock: any CacheClock

    /// Where the layer logs what it recovers from (see <doc:CacheLogging>): damaged files deleted
    /// (``CacheLogLevel/warning``), a deleted directory recreated (``CacheLogLevel/warning``),
    /// temporary files of interrupted writes swept (``CacheLogLevel/info``). Default: the logger of
    /// the cache or chain the layer is put in (see ``CacheEnvironment``), else
    /// `CacheLogger.disabled`. Errors the layer throws are not logged by it: its ``CacheChain``
    /// logs them.
    @FollowsCache public var logger: CacheLogger

    /// Creates a configuration.
    public init(
      sizeLimit: Int = 256 << 20,
      countLimit: Int? = nil,
      maximumEntrySize: Int? = nil,
      timeToLive: Duration? = nil,
      clock: (any CacheClock)? = nil,
      logger: CacheLogger? = nil
    ) {
      self.sizeLimit = sizeLimit
      self.countLimit = countLimit
      self.maximumEntrySize = maximumEntrySize
      self.timeToLive = timeToLive
      self._clock = .clock(clock)
      self._logger = .logger(logger)
    }

    /// The per-entry limit in effect.
    var resolvedMaxEntrySize: Int { maximumEntrySize ?? Swift.min(sizeLimit, 64 << 20) }

    func validate() throws {
      let check = ConfigurationCheck("DiskLayer")
      try check.requirePositive("sizeLimit", sizeLimit)
      try check.requirePositive("countLimit", countLimit)
      if let maximumEntrySize {
        try check.require(
          (1...sizeLimit).contains(maximumEntrySize), "maximumEntrySize", is: "\(maximumEntrySize)",
          mustBe: "in 1...sizeLimit (\(sizeLimit))")
      }
      try check.requirePositive("timeToLive", timeToLive)
    }
  }
}
