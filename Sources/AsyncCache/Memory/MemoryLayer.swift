/// A bounded in-memory layer with LRU (or W-TinyLFU) eviction and a synchronous lookup.
///
/// `MemoryLayer` is an actor so it can sit in a ``CacheChain`` like any other layer, but all of
/// its operations are `nonisolated` and synchronous: its state lives behind locks, not on the
/// actor's executor. A lookup never suspends and costs one hash and one uncontended lock, so
/// code can ask "is it cached? show it now" from anywhere, and concurrent readers do not queue
/// behind one actor.
///
/// ```swift
/// let thumbnails = try MemoryLayer<URL, Data>(configuration: .init(
///     countLimit: 500,
///     costLimit: 64 << 20,          // 64 MiB
///     cost: { $0.count },
///     timeToLive: .seconds(600)))
/// if let data = thumbnails.value(for: url) { show(data) }
/// ```
///
/// Limits: the layer holds at most ``Configuration-swift.struct/countLimit`` entries whose costs
/// sum to at most ``Configuration-swift.struct/costLimit``; inserting past either evicts entries
/// chosen by the ``Configuration-swift.struct/evictionPolicy``: by default
/// ``EvictionPolicy/leastRecentlyUsed``, or W-TinyLFU, which keeps the entries that are asked for
/// often and lets one-hit keys pass through. The entry an insert writes is never the one it evicts.
/// An entry that alone costs more than the cost limit is refused. Every eviction is counted by
/// ``EvictionReason`` in ``statistics``.
///
/// Expiry: an entry expires at the earlier of its own ``CacheEntry/expiresAt`` and
/// ``Configuration-swift.struct/timeToLive`` after it was inserted, read from the injected
/// ``Configuration-swift.struct/clock``. Expired entries are not returned; they are removed
/// when found, by ``removeExpired()``, or by eviction. Inserts reckon it from the clock's `now`.
/// With ``WallClock``, lookups check it against a time the library publishes every few
/// milliseconds (no clock call), or against the exact time when the entry expires within 50 ms
/// of that, so an entry is returned until exactly its expiry (unless the publishing thread runs
/// more than 46 ms late); with a clock of your own, against its ``CacheClock/coarseNow``, so an
/// entry may be returned as long past its expiry as that lags, never before. See
/// <doc:FreshnessAndStatistics>.
public final actor MemoryLayer<Key: Hashable & Sendable, Value: Sendable>: EnvironmentFollowingLayer {
  @usableFromInline
  nonisolated let store: MemoryStore<Key, Value>

  /// The configuration the layer was created with.
  public nonisolated let configuration: Configuration

  /// Creates a memory layer.
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` naming the first configuration
  ///   value that is out of range.
  public init(configuration: Configuration = Configuration()) throws {
    try self.init(
      configuration: configuration, admissionSeed: configuration.admissionSeed ?? .random(in: .min ... .max))
  }

  /// Creates a memory layer whose W-TinyLFU draws its rare random admissions from `admissionSeed`
  /// (whatever the configuration says), so that tests and benchmarks replay exactly.
  package init(configuration: Configuration, admissionSeed: UInt64) throws {
    try self.init(configuration: configuration, admissionSeed: admissionSeed, allowsReferee: true)
  }

  /// Creates a memory layer as ``init(configuration:admissionSeed:)`` does; with `allowsReferee`
  /// false, an adaptive layer sizes its window with the ghosts whatever its size (for the tests
  /// that hold the ghosts to their reference model in a small layer); `keySampling` for the tests
  /// of the hit-ratio curve's counted distances in a small layer.
  init(
    configuration: Configuration, admissionSeed: UInt64, allowsReferee: Bool,
    keySampling: KeySample.Parameters = .standard
  ) throws {
    try configuration.validate()
    self.configuration = configuration
    self.store = MemoryStore(
      countLimit: configuration.countLimit,
      costLimit: configuration.costLimit,
      cost: configuration.cost,
      timeToLive: configuration.timeToLive,
      trimFraction: configuration.warningTrimFraction,
      segmentCount: configuration.segmentCount
        ?? Configuration.automaticSegmentCount(
          countLimit: configuration.countLimit, policy: configuration.evictionPolicy,
          boundedByCost: configuration.cost != nil && configuration.costLimit != .max),
      policy: configuration.evictionPolicy,
      allowsReferee: allowsReferee,
      seed: admissionSeed,
      samplesReuse: configuration.estimatesHitRatioCurve,
      keySampling: keySampling,
      environment: LayerEnvironment(clock: configuration.$clock, logger: configuration.$logger, source: "MemoryLayer")
    )
  }

  deinit {
    store.eventHub.finishAll()
  }

  // MARK: Reading

  /// Returns the unexpired entry for `key`, with its metadata, marking it most recently used.
  ///
  /// Safe from any context. Never suspends. O(1) expected.
  @inlinable
  public nonisolated func entry(for key: Key) -> CacheEntry<Value>? {
    store.entry(for: key)
  }

  /// Returns the unexpired value for `key`, marking it most recently used.
  ///
  /// Safe from any context. Never suspends. O(1) expected.
  @inlinable
  public nonisolated func value(for key: Key) -> Value? {
    store.value(for: key)
  }

  /// Returns the unexpired value for `key`, its expiry and the time it was checked against (see
  /// ``MemoryStore/timedValue(for:countingRequest:)``): a loading cache's hit, which reads the
  /// entry's freshness when the cache has freshness rules.
  ///
  /// A method of the layer rather than a call of `layer.store`, so that a caller holding the
  /// layer in an optional (`front?.timedValue(for:)`) does not retain the store around the
  /// call: a reference count written by every hit makes cores fight over its cache line.
  ///
  /// Specialized for the caller's types but never inlined: inlined into the cache's `async`
  /// hit path, the lookup's code made that function's frame larger, and every hit about 10 ns
  /// slower (`memory.hit.1task`).
  @inlinable
  @inline(never)
  nonisolated func timedValue(for key: Key, countingRequest: Bool) -> (value: Value, expiry: Int64, now: Int64)? {
    store.timedValue(for: key, countingRequest: countingRequest)
  }

  /// The expiry an entry that expires at `expiry` gets when extended (a loading cache's sliding
  /// expiry): `extended(now)`, by the layer's clock, or the layer's own time-to-live from now if
  /// that comes first; `nil` when that gains less than `minimumGain` nanoseconds.
  nonisolated func extendedExpiry(
    from expiry: Int64, to extended: (_ now: CacheInstant) -> CacheInstant, minimumGain: Int64
  ) -> Int64? {
    let now = store.clock.now
    let target = store.cappedExpiry(extended(now).nanosecondsSince1970, now: now.nanosecondsSince1970)
    return target.subtractingReportingOverflow(expiry).partialValue >= minimumGain ? target : nil
  }

  /// Gives the entry for `key`, if it is `held` (its expiry and metadata), `entry`'s expiry
  /// (capped by ``Configuration-swift.struct/timeToLive``) and metadata, keeping the value it
  /// holds: see ``AsyncCacheLayer/revalidate(_:for:replacing:)``. Safe from any context. Never
  /// suspends (`async` only so that it, not the protocol's default, answers calls on the
  /// concrete type from `async` code). O(1).
  ///
  /// - Throws: ``EntryMetadataError`` when the metadata is over one of its limits.
  public nonisolated func revalidate(
    _ entry: CacheEntry<Value>, for key: Key, replacing held: CacheEntry<Value>
  ) async throws -> Bool {
    if !entry.metadata.isEmpty { try entry.metadata.validate() }
    return store.revalidate(
      key, from: held.expiresAt?.nanosecondsSince1970 ?? .max, heldMetadata: held.metadata,
      to: entry.expiresAt?.nanosecondsSince1970 ?? .max, metadata: entry.metadata)
  }

  /// Moves the expiry of the entry for `key` from `expiry` to `target` (nanoseconds since 1970)
  /// if it still expires at `expiry` (no write replaced it); returns the entry it moved (value,
  /// new expiry and metadata, read together), `nil` when it did not. Does not change recency or
  /// statistics.
  nonisolated func moveExpiry(of key: Key, from expiry: Int64, to target: Int64) -> CacheEntry<Value>? {
    store.extendExpiry(of: key, from: expiry, to: target)
  }

  /// Keeps room in the admission window for `entries` entries while a prefetcher runs (see
  /// ``MemoryStore/reserveWindow(entries:)``); `nil` under a policy without a window.
  nonisolated func reserveAdmissionWindow(entries: Int) -> UInt64? {
    store.reserveWindow(entries: entries)
  }

  /// Ends a reservation of ``reserveAdmissionWindow(entries:)``.
  nonisolated func releaseAdmissionWindow(_ id: UInt64) {
    store.releaseWindow(id)
  }

  /// The hits the layer counted as a loading cache's requests.
  nonisolated var requestHits: Int { store.totals.requestHits }

  /// Where the layer's evictions are reported while someone observes them.
  nonisolated var eventHub: EventHub<CacheEvent<Key>> { store.eventHub }

  /// Whether the layer holds an unexpired entry for `key`, without counting a hit or a miss and
  /// without changing its recency. Safe from any context. Never suspends.
  public nonisolated func contains(_ key: Key) -> Bool {
    store.contains(key)
  }

  // MARK: Writing

  /// Stores `entry` for `key`, evicting entries the eviction policy chooses while over a limit
  /// (never this one).
  ///
  /// The entry expires at the earlier of `entry.expiresAt` and ``Configuration-swift.struct/timeToLive``
  /// from now. An already expired entry is not stored (and removes the previous one).
  /// Safe from any context. Never suspends. O(1) amortized, plus the evictions. The entry's
  /// ``EntryMetadata`` is kept with it (``entry(for:)`` returns it); an entry without metadata
  /// costs nothing for it. Metadata is not part of an entry's cost: the cost function sees the
  /// value alone (metadata is at most about 20 KB per entry, usually tens of bytes).
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidCost`` when the cost function returns a cost outside
  ///   `0..<2^43`; ``EntryMetadataError`` when the metadata is over one of its limits. The layer
  ///   is unchanged then.
  @inlinable
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) throws {
    try store.insert(entry, for: key)
  }

  /// Stores `value` for `key`, expiring after `timeToLive` (or per the configuration when
  /// `nil`). Safe from any context. Never suspends.
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidCost`` when the cost function returns a cost outside
  ///   `0..<2^43`.
  @inlinable
  public nonisolated func insert(_ value: Value, for key: Key, timeToLive: Duration? = nil) throws {
    let expiresAt = timeToLive.map { store.clock.now.advanced(by: $0) }
    try store.insert(CacheEntry(value, expiresAt: expiresAt), for: key)
  }

  /// Removes the entry for `key`. Safe from any context. Never suspends.
  public nonisolated func removeValue(for key: Key) {
    store.removeValue(for: key)
  }

  /// Removes every entry. Safe from any context. Never suspends.
  public nonisolated func removeAll() {
    store.removeAll()
  }

  /// Makes the entries filed under `tag` and produced at or before `instant` misses from now on
  /// (see ``AsyncCacheLayer/invalidate(tag:at:)``): records the instant, in O(1), and a lookup
  /// that comes to such an entry removes it (counted as ``EvictionReason/invalidated``). Until
  /// a tag is invalidated, a hit pays nothing for tags; afterwards, the first hit on an entry
  /// with tags after each invalidation checks them, and the next ones compare a stamp the check
  /// left in the entry. Safe from any context. Never suspends.
  ///
  /// `async` although it never suspends: a synchronous overload would lose, in `async` code, to
  /// the protocol's do-nothing default.
  public nonisolated func invalidate(tag: String, at instant: CacheInstant) async {
    store.tagInvalidations.record(tag, at: instant)
  }

  /// Removes every expired entry and returns how many there were.
  ///
  /// Expired entries are also removed when a lookup finds them and when eviction reaches them;
  /// call this to reclaim their memory sooner. Safe from any context. O(n).
  @discardableResult
  public nonisolated func removeExpired() -> Int {
    store.removeExpired()
  }

  /// Trims the layer to ``Configuration-swift.struct/warningTrimFraction`` of its limits on
  /// ``MemoryPressureLevel/warning`` and empties it on ``MemoryPressureLevel/critical``.
  /// Safe from any context. Never suspends.
  ///
  /// `async` although it never suspends: a synchronous overload would lose, in `async` code, to
  /// the protocol's do-nothing default.
  public nonisolated func handleMemoryPressure(_ level: MemoryPressureLevel) async {
    store.handleMemoryPressure(level)
  }

  /// Empties the layer (without counting evictions) and ends its event sequences, once they
  /// have delivered what they buffered. The layer stays usable, unobserved by them. Called by
  /// the ``LoadingCache/close()`` or ``CacheChain/close()`` that holds it. Safe from any
  /// context; never suspends, never throws.
  ///
  /// It says what it dropped, at notice: the entries, and their total cost when they have costs.
  public nonisolated func close() async throws {
    let (count, cost) = (store.count, store.totalCost)
    store.removeAll()
    store.eventHub.finishAll()
    layerEnvironment.log(
      .notice, "closed; dropped \(count) \(count == 1 ? "entry" : "entries")\(cost > 0 ? " (total cost \(cost))" : "")",
      metadata: ["count": "\(count)", "cost": "\(cost)"])
  }

  /// The clock the layer reads: its configuration's, the one it follows, or the ``WallClock``.
  public nonisolated var clock: any CacheClock { store.clock.clock }

  /// The layer's clock and logger.
  package nonisolated var layerEnvironment: LayerEnvironment { store.environment }

  // MARK: Introspection

  /// The number of entries held, expired ones included until they are removed. O(1).
  public nonisolated var count: Int { store.count }

  /// The sum of the costs of the entries held (at most `Int.max` on 32-bit platforms). O(1).
  public nonisolated var totalCost: Int { Int(clamping: store.totalCost) }

  /// The keys of the entries held, in no particular order. O(n).
  public nonisolated var keys: [Key] { store.keys }

  /// The layer's evictions from now on, as ``CacheEvent/eviction(key:reason:layer:)`` events
  /// with layer 0, in a buffer of at most `limit` events (values under 1 count as 1) that drops
  /// the oldest when the observer falls behind. Safe from any context.
  ///
  /// While nobody observes them, evictions cost no event. To see them with a loading cache's
  /// other events, use ``LoadingCache/events(bufferingNewest:)``, which includes the evictions
  /// of the memory layers of its chain.
  public nonisolated func events(bufferingNewest limit: Int = 1_000) -> CacheEvents<Key> {
    CacheEvents(capacity: limit, observing: [(store.eventHub, 0)])
  }

  /// Hits, misses and evictions since the layer was created, and the hit-ratio curve.
  /// O(segments): the curve reads each segment's histograms (376 buckets each) once.
  public nonisolated var statistics: Statistics {
    let totals = store.totals
    // The capacity the curve scales: the count limit, or what a layer bounded by cost holds.
    let capacity = store.isBoundedByCost || store.countLimit == .max ? totals.count : store.countLimit
    return Statistics(
      count: totals.count,
      totalCost: Int(clamping: totals.cost),
      hits: totals.hits,
      misses: totals.misses,
      evictions: totals.evictions,
      hitRatioCurve: store.hitRatioCurve(capacity: capacity)
    )
  }
}

extension MemoryLayer {
  /// A snapshot of a memory layer's counters.
  public struct Statistics: Sendable, Hashable {
    /// The number of entries held.
    public var count: Int
    /// The sum of the costs of the entries held.
    public var totalCost: Int
    /// Lookups that found an unexpired entry.
    public var hits: Int
    /// Lookups that found nothing, or an expired entry.
    public var misses: Int
    /// Entries dropped or refused, by reason.
    public var evictions: EvictionCounts
    /// The hit ratio an LRU cache would have at ¼×, ½×, 1×, 2× and 4× the layer's capacity (its
    /// count limit; for a layer bounded by cost, the entries it holds), estimated from a sample
    /// of the lookups (of a loading cache's requests, for its top layer); `nil` before the first
    /// lookup sampled, when the capacity is 0, or when ``Configuration/estimatesHitRatioCurve``
    /// is off.
    public var hitRatioCurve: HitRatioCurve?

    /// The fraction of lookups that hit, 0 to 1; 0 before the first lookup. Under a
    /// ``LoadingCache`` each request that misses the top layer is looked up there again by its
    /// load: read the cache's own ``LoadingCache/Statistics-swift.struct/hitRatio`` for requests.
    public var hitRatio: Double {
      hits + misses == 0 ? 0 : Double(hits) / Double(hits + misses)
    }
  }
}
