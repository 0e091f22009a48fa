public import Synchronization  // Atomic

/// A cache that always answers: a ``CacheChain`` in front of an origin.
///
/// ```swift
/// let cache = try LoadingCache(
///     layers: [MemoryLayer<Int, User>(configuration: .init(countLimit: 10_000))],
///     origin: ClosureFetcher { id in try await api.user(id) },
///     configuration: .init(timeToLive: .seconds(300)))
///
/// let user = try await cache.value(for: 42)   // memory, then lower layers, then the API
/// ```
///
/// ``value(for:)`` returns a hit in the top ``MemoryLayer`` synchronously, behind a lock and
/// without an actor hop, so concurrent callers do not queue. On a miss it joins the load of the
/// key in flight or starts one, which asks the layers below and then the origin, and stores what
/// the origin returned in every layer.
///
/// Coalescing and cancellation:
/// - N concurrent requests for a key cause one load, hence at most one origin call.
/// - A cancelled request throws `CancellationError` at once and alone; the load is cancelled
///   only when its last request leaves, and the next request starts a fresh load.
/// - An error reaches every request waiting for that load and is not stored: the next request
///   tries again (unless ``Configuration-swift.struct/negativeCaching`` remembers it, or
///   ``Configuration-swift.struct/staleIfError`` answers with a stale value instead).
/// - ``insert(_:for:timeToLive:)``, ``removeValue(for:)`` and ``removeAll()`` win over a load in
///   flight: the load still answers the requests already waiting for it, but does not store its
///   value, and new requests start afresh.
/// - A load runs at the highest priority of the requests waiting for it.
/// - A request that would wait for its own load (the origin, while loading a key, asks for it
///   again, directly or through other keys or caches) fails at once with
///   ``AsyncCacheError/Code/recursiveLoad``.
///
/// Urgent and background work:
/// - Requests (``value(for:)`` and the bulk variants) are *urgent*; the loads of an
///   ``AsyncPrefetcher`` are *background*. A load is urgent while a request waits for it.
/// - A background load does not ask the origin while an urgent load is in flight: it waits
///   until the urgent work ends, or until a request joins it, which promotes it (it then runs
///   at the request's priority, and the prefetcher can no longer cancel it: cancelling only
///   withdraws the prefetcher's interest).
/// - ``demote(_:)`` turns the requests waiting for a key into background work, for content
///   that scrolled away but is still wanted.
///
/// `LoadingCache` is a `final class` whose state lives behind locks. Safe from any context.
public final class LoadingCache<Key: Hashable & Sendable, Value: Sendable>: Sendable, LoadRunner {
  /// The layers, top first.
  public let chain: CacheChain<Key, Value>
  /// Where values come from when no layer has them.
  public let origin: any AsyncFetcher<Key, Value>
  /// ``origin``, when it answers with entries (an ``EntryFetcher``): it is asked with the entry
  /// a load replaces, and may keep it (a revalidation).
  let entryOrigin: (any EntryFetcher<Key, Value>)?
  /// Where the bulk requests' missing values come from, in one call per batch; `nil` to ask
  /// ``origin`` once per key.
  public let batchOrigin: (any AsyncBatchFetcher<Key, Value>)?
  /// The cache's configuration.
  public let configuration: Configuration

  /// What the cache takes from its chain, once: the layers that answer its hits, its memory
  /// layers and event hubs.
  let wiring: CacheChain<Key, Value>.Wiring
  /// The memory layer that answers hits synchronously, if the chain has one on top (the
  /// wiring's, stored apart for the hit path).
  @usableFromInline let front: MemoryLayer<Key, Value>?
  /// The top layer, when it is not a ``MemoryLayer`` but can answer without suspending.
  @usableFromInline let synchronousFront: SynchronousLookupFunction<Key, Value>?

  @usableFromInline let loadTable = LoadTable<Key, Value>()
  /// The layer whose coordinator loads each key once for every process that shares it, and its
  /// index in the chain: the first that offers one (see ``LoadCoordinator``).
  let coordination: (tier: Int, coordinator: any LoadCoordinator<Key, Value>)?
  @usableFromInline let nextWaiterID = Atomic<UInt64>(0)
  /// Loads that ended cancelled, abandoned by their requests or not: what ``close()`` reports.
  let loadsEndedCancelled = Atomic<Int>(0)
  /// Closing (stopping prefetchers, finishing loads, which later calls wait for too) and
  /// running.
  let lifecycle = Lifecycle("LoadingCache", refusingSecondRunOf: "cache")
  /// How to stop each running prefetcher of this cache, for ``close()``.
  let prefetchers = Locked<[UInt64: @Sendable () async -> Void]>([:])
  /// Hits of a top layer that is not a ``MemoryLayer`` (a memory layer counts its own).
  @usableFromInline let synchronousHits = Atomic<Int>(0)
  /// Where the cache's events go while someone observes them.
  @usableFromInline let eventHub = EventHub<CacheEvent<Key>>()
  /// How entries' expiry reads (see <doc:FreshnessAndStatistics>).
  @usableFromInline let freshness: FreshnessRules
  /// Whether a hit must read its entry's expiry: a grace period or a refresh ahead is set.
  @usableFromInline let checksFreshness: Bool
  /// Requests wait for loads within the configuration's ``LoadTimeouts``.
  @usableFromInline let hasLoadTimeouts: Bool
  /// The tracer of the loads, if the configuration names one.
  let tracing: CacheTracing?
  /// The lead of a refresh ahead or an extension, when every value has the same lifetime.
  @usableFromInline let configuredLead: ConfiguredLead
  /// A hit on an entry that expires more than this after now is fresh with nothing due (see
  /// ``FreshnessRules/freshMargin(lead:)``): the hit path's one comparison. `Int64.max` when
  /// the lead depends on the value: no hit is told fresh by it alone.
  @usableFromInline let freshMargin: Int64

  /// What a hit needs to tell whether a refresh ahead or an extension is due.
  @usableFromInline
  enum ConfiguredLead: Sendable {
    /// Every value has the configured lifetime: the lead is this (nanoseconds).
    case fixed(Int64)
    /// No value has a lifetime (or reads refresh and extend nothing).
    case none
    /// The lifetime depends on the value (``Configuration-swift.struct/timeToLiveForValue``).
    case perValue
  }

  /// Creates a loading cache.
  ///
  /// - Parameters:
  ///   - chain: The layers, top first. Put a ``MemoryLayer`` on top for synchronous hits.
  ///   - origin: Where values come from when no layer has them.
  ///   - batchOrigin: Where bulk requests load their missing keys from, in one call; `nil`
  ///     (the default) to ask `origin` once per key.
  ///   - configuration: Expiry of loaded values, retries, the clock and the logger. The chain,
  ///     and its layers created without a clock or a logger of their own, follow the ones it
  ///     gives (see ``CacheEnvironment``).
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` naming the first configuration value
  ///   that is out of range.
  public init(
    chain: CacheChain<Key, Value>,
    origin: some AsyncFetcher<Key, Value>,
    batchOrigin: (any AsyncBatchFetcher<Key, Value>)? = nil,
    configuration: Configuration = Configuration()
  ) throws {
    // One clock for the cache and its layers: a chain given a clock lends it to a cache given
    // none.
    var configuration = configuration
    let wiring = chain.wiring
    if configuration.$clock == nil, let chainClock = wiring.clock {
      configuration.$clock = chainClock
    }
    try configuration.validate()
    self.freshness = FreshnessRules(
      staleWhileRevalidate: configuration.staleWhileRevalidate,
      staleIfError: configuration.staleIfError,
      refreshAhead: configuration.refreshAhead,
      jitter: configuration.timeToLiveJitter,
      sliding: configuration.slidingExpiration)
    self.checksFreshness = freshness.checksHits
    self.hasLoadTimeouts = configuration.loadTimeouts.isEnabled
    self.tracing = configuration.tracer.map(CacheTracing.init)
    self.configuredLead =
      if configuration.timeToLiveForValue != nil {
        .perValue
      } else if let share = freshness.dueShare, let lifetime = configuration.timeToLive {
        .fixed(freshness.lead(lifetime: lifetime.saturatingNanoseconds, share: share))
      } else {
        .none
      }
    self.freshMargin =
      switch configuredLead {
      case .fixed(let lead): freshness.freshMargin(lead: lead)
      case .none: freshness.freshMargin(lead: nil)
      // The lead is the value's: every hit on an entry that expires reads the full state.
      case .perValue: .max
      }
    // A memory layer that cuts every entry's life shorter than the grace would hold only stale
    // entries (the stale instant is read back as expiry minus grace).
    if freshness.grace > 0, let layerLifetime = wiring.front?.configuration.timeToLive,
      layerLifetime.saturatingNanoseconds <= freshness.grace
    {
      throw AsyncCacheError.invalidConfiguration(
        "LoadingCache staleWhileRevalidate/staleIfError grace is \(Duration.nanoseconds(freshness.grace).readable); "
          + "the top MemoryLayer's timeToLive (\(layerLifetime.readable)) must be longer")
    }
    self.chain = chain
    self.coordination =
      chain.tiers.indices.lazy.compactMap { tier in
        chain.tiers[tier].layer.loadCoordinator.map { (tier, $0) }
      }.first
    self.origin = origin
    self.entryOrigin = origin as? any EntryFetcher<Key, Value>
    self.batchOrigin = batchOrigin
    self.configuration = configuration
    self.wiring = wiring
    self.front = wiring.front
    // Its requests are what the top layer's hit-ratio curve samples, not a load's second look.
    wiring.front?.store.samplesRequestsOnly.store(true, ordering: .relaxed)
    self.synchronousFront = wiring.synchronousFront
    loadTable.setRunner(self)
    // The cache's clock, the wall clock included: layers that follow one follow the cache's.
    // An invalidation a layer learns from elsewhere turns later requests away from the loads
    // in flight, as one made here does (`invalidate(tag:)`).
    chain.follow(
      CacheEnvironment(
        clock: configuration.clock, logger: configuration.$logger,
        tagInvalidationHandler: { [loadTable] _ in loadTable.detachLoads() },
        tracer: tracing, onLookup: configuration.onLayerLookup))
  }

  /// Creates a loading cache over `layers`, top first, whose failures are propagated.
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` when `layers` is empty, or naming
  ///   the first configuration value that is out of range.
  public convenience init(
    layers: [any AsyncCacheLayer<Key, Value>],
    origin: some AsyncFetcher<Key, Value>,
    batchOrigin: (any AsyncBatchFetcher<Key, Value>)? = nil,
    configuration: Configuration = Configuration()
  ) throws {
    try self.init(
      tiers: layers.map { CacheChain.Tier($0) }, origin: origin, batchOrigin: batchOrigin, configuration: configuration)
  }

  /// Creates a loading cache over the layers of `tiers`, top first, each with the failure policy
  /// its tier gives it: a service that wants a shared tier skipped while it is down writes
  /// `tiers: [.init(memory), .init(redis, failurePolicy: .skip)]`.
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` when `tiers` is empty, or naming
  ///   the first configuration value that is out of range.
  public convenience init(
    tiers: [CacheChain<Key, Value>.Tier],
    origin: some AsyncFetcher<Key, Value>,
    batchOrigin: (any AsyncBatchFetcher<Key, Value>)? = nil,
    configuration: Configuration = Configuration()
  ) throws {
    let chain = try CacheChain(tiers)
    try self.init(chain: chain, origin: origin, batchOrigin: batchOrigin, configuration: configuration)
  }

  // MARK: Reading

  /// Returns the value for `key` as ``value(for:)`` does, with `timeouts` instead of the
  /// configuration's ``Configuration-swift.struct/loadTimeouts`` if it has to wait for a load.
  ///
  /// - Throws: What ``value(for:)`` throws; ``AsyncCacheError/Code/timedOut`` when the request
  ///   waits longer than `timeouts.hard`; ``AsyncCacheError/Code/invalidConfiguration`` when
  ///   `timeouts` are out of range (not positive, or a soft timeout not shorter than the hard one).
  public nonisolated(nonsending) func value(for key: Key, timeouts: LoadTimeouts) async throws -> Value {
    try timeouts.validate(in: "value(for:timeouts:)")
    if let value = topValue(for: key) { return value }
    if eventHub.isObserved { eventHub.emit(.miss(key: key)) }
    return try await load(key, timeouts: timeouts)
  }

  /// Returns the value for `key` from the first layer that has it, or loads it.
  ///
  /// Safe from any context. A hit in the top ``MemoryLayer`` never suspends and never leaves
  /// the caller's executor (the method is `nonisolated(nonsending)`, so a caller on the main
  /// actor stays there): it costs one hash and one uncontended lock. A miss joins or starts the
  /// key's load (see the type's documentation for coalescing and cancellation).
  ///
  /// - Throws: The origin's error; ``AsyncCacheError/Code/layerFailure`` when a layer whose
  ///   policy is ``LayerFailurePolicy/propagate`` fails; ``AsyncCacheError/Code/recursiveLoad``
  ///   when the request is made while loading `key` (see <doc:Semantics>); `CancellationError`
  ///   when the calling task is cancelled (the shared load goes on for the other requests).
  @inlinable
  public nonisolated(nonsending) func value(for key: Key) async throws -> Value {
    if let value = topValue(for: key) { return value }
    if eventHub.isObserved { eventHub.emit(.miss(key: key)) }
    return try await load(key)
  }

  /// The value the top layer may answer a request for `key` with, without suspending; counts
  /// and reports the hit.
  @inlinable
  @inline(__always)
  func topValue(for key: Key) -> Value? {
    // One lookup for every configuration, so that a plain hit and one under freshness rules run
    // the same code. Optional chaining, not `if let front`: binding the reference would retain
    // and release it on every hit, and a reference count shared by all callers bounces between
    // cores.
    if let (value, expiry, now) = front?.timedValue(for: key, countingRequest: true) {
      // Without freshness rules the layer's own expiry decided; with them, nearly every hit is
      // fresh with nothing due, told by one comparison.
      if !checksFreshness || FreshnessRules.isPlainlyFresh(expiry: expiry, now: now, margin: freshMargin) {
        if eventHub.isObserved { eventHub.emit(.hit(key: key)) }
        return value
      }
      guard let value = servable(value, expiry: expiry, now: now, for: key, countingRequest: true) else {
        return nil
      }
      if eventHub.isObserved { eventHub.emit(.hit(key: key)) }
      return value
    }
    if !checksFreshness, synchronousFront != nil, let value = synchronousValue(for: key) {
      synchronousHits.wrappingAdd(1, ordering: .relaxed)
      if eventHub.isObserved { eventHub.emit(.hit(key: key)) }
      return value
    }
    return nil
  }

  /// Returns the value for `key` if the top layer holds it and can tell without suspending (a
  /// ``MemoryLayer``, or a ``SynchronousLookupLayer`` such as operators over one), without
  /// loading.
  ///
  /// Safe from any context. Never suspends. Returns `nil` when the top layer cannot answer
  /// synchronously. A peek, not a request: it is not counted in ``statistics`` (the layer
  /// counts its own hit or miss) and reports no event.
  ///
  /// With a grace period or a refresh ahead configured, only a top ``MemoryLayer`` answers (it
  /// tells when its entries expire), and a stale value is returned only while it may be served
  /// at once; it is then refreshed in the background, as ``value(for:)`` would.
  @inlinable
  public func cachedValue(for key: Key) -> Value? {
    if checksFreshness { return servableValue(for: key) }
    if let value = front?.value(for: key) { return value }
    return synchronousFront != nil ? synchronousValue(for: key) : nil
  }

  /// The value for `key` from ``synchronousFront``, or `nil` when it has none or must suspend.
  /// A failure is not reported here: the request then loads, and the chain, which asks the
  /// layer again, handles the failure as its policy says.
  @inlinable
  func synchronousValue(for key: Key) -> Value? {
    guard case .found(let value)? = try? synchronousFront?(key) else { return nil }
    return value
  }

  // MARK: Writing

  /// Stores `value` for `key` in every layer; it wins over a load of `key` in flight.
  ///
  /// - Parameters:
  ///   - value: The value to store.
  ///   - key: Its key.
  ///   - timeToLive: How long the value lives; ``Configuration-swift.struct/timeToLive`` when `nil`.
  /// - Throws: ``AsyncCacheError/Code/layerFailure`` (see
  ///   ``CacheChain/insert(_:for:)-(CacheEntry<Value>,_)``).
  public nonisolated(nonsending) func insert(_ value: Value, for key: Key, timeToLive: Duration? = nil) async throws {
    let entry = CacheEntry(value, expiresAt: insertedExpiry(timeToLive: timeToLive))
    try await writing(key) { try await chain.insert(entry, for: key) }
  }

  /// Stores `value` with `metadata` (its validators and tags) for `key` in every layer; it wins
  /// over a load of `key` in flight.
  ///
  /// - Parameters:
  ///   - value: The value to store.
  ///   - key: Its key.
  ///   - timeToLive: How long the value lives; ``Configuration-swift.struct/timeToLive`` when `nil`.
  ///   - metadata: What the value's origin said about it (see ``EntryMetadata``).
  /// - Throws: ``EntryMetadataError`` when the metadata is over one of its limits (nothing is
  ///   stored then); ``AsyncCacheError/Code/layerFailure`` (see
  ///   ``CacheChain/insert(_:for:)-(CacheEntry<Value>,_)``).
  public nonisolated(nonsending) func insert(
    _ value: Value, for key: Key, timeToLive: Duration? = nil, metadata: EntryMetadata
  ) async throws {
    try metadata.validate()
    let entry = CacheEntry(value, expiresAt: insertedExpiry(timeToLive: timeToLive), metadata: metadata)
    try await writing(key) { try await chain.insert(entry, for: key) }
  }

  /// Stores `value` filed under `tags` for `key` in every layer, so that ``invalidate(tag:)``
  /// of any of them drops it; it wins over a load of `key` in flight.
  ///
  /// - Parameters:
  ///   - value: The value to store.
  ///   - key: Its key.
  ///   - timeToLive: How long the value lives; ``Configuration-swift.struct/timeToLive`` when `nil`.
  ///   - tags: The tags to file it under (see ``EntryMetadata/tags``).
  /// - Throws: ``EntryMetadataError`` when there are too many tags or one is empty or too long
  ///   (nothing is stored then); ``AsyncCacheError/Code/layerFailure`` (see
  ///   ``CacheChain/insert(_:for:)-(CacheEntry<Value>,_)``).
  public nonisolated(nonsending) func insert(
    _ value: Value, for key: Key, timeToLive: Duration? = nil, tags: Set<String>
  ) async throws {
    try await insert(value, for: key, timeToLive: timeToLive, metadata: EntryMetadata(tags: tags))
  }

  /// Invalidates `tag`: every entry filed under it (``EntryMetadata/tags``), in every layer, is
  /// a miss from now on, and the next request for its key loads it anew. O(1) whatever the
  /// number of entries: the cache records when the tag was invalidated and tells a dead entry
  /// from its metadata when it reads it (see <doc:Semantics#Tags>).
  ///
  /// Once it returns, no request answers with an entry filed under `tag` that was written or
  /// loaded before the call: a load in flight that brings such an entry answers the requests
  /// that joined it before, and is stored nowhere. Later requests join no load that was in
  /// flight, whatever its key (any of them may bring such an entry): they start afresh. The
  /// errors negative caching remembers stay. The layers
  /// that keep entries across restarts or share them with other processes record the
  /// invalidation there too (``AsyncCacheLayer/invalidate(tag:at:)``): SQLite and files keep
  /// it across a restart, and a `RedisLayer` announces it to the other instances.
  ///
  /// - Throws: ``EntryMetadataError`` when `tag` could be no entry's tag (empty, or longer than
  ///   ``EntryMetadata/maximumTagLength`` bytes); ``AsyncCacheError/Code/layerFailure`` for the
  ///   first layer whose policy is ``LayerFailurePolicy/propagate`` that failed to record it
  ///   (this cache holds the tag's entries dead all the same).
  public nonisolated(nonsending) func invalidate(tag: String) async throws {
    try EntryMetadata.validate(tag: tag)
    try checkOpen("invalidate(tag:)")
    // Before and after, as a write does (see `writing`), but keeping the errors negative caching
    // remembers: they are no entries.
    loadTable.detachLoads()
    defer { loadTable.detachLoads() }
    try await chain.invalidate(tag: tag)
  }

  /// Removes `key` from every layer; a load of `key` in flight will not store its value.
  ///
  /// - Throws: ``AsyncCacheError/Code/layerFailure`` (see ``CacheChain/removeValue(for:)``).
  public nonisolated(nonsending) func removeValue(for key: Key) async throws {
    try await writing(key) { try await chain.removeValue(for: key) }
  }

  /// Removes every entry from every layer; no load in flight will store its value.
  ///
  /// - Throws: ``AsyncCacheError/Code/layerFailure`` (see ``CacheChain/removeAll()``).
  public nonisolated(nonsending) func removeAll() async throws {
    try await writing(nil) { try await chain.removeAll() }
  }

  /// Runs a write of `key` (of every key when `nil`) so that no request joins a load older
  /// than the write once it returns. Loads in flight are made unjoinable before the write, and
  /// again after it: a load that starts *during* the write is overtaken (it will not store what
  /// it read), and it must not answer the requests that come after the write either.
  private nonisolated(nonsending) func writing(_ key: Key?, _ write: () async throws -> Void) async throws {
    try checkOpen(key == nil ? "removeAll()" : "a write")
    detach(key)
    defer { detach(key) }
    try await write()
  }

  private func detach(_ key: Key?) {
    loadTable.detach(key)
  }

  deinit {
    eventHub.finishAll()
  }

  // MARK: Introspection

  /// This cache's events from now on, and the evictions of the ``MemoryLayer``s of its chain
  /// (nested chains' included), in a buffer that holds at most `limit` events (values under 1
  /// count as 1; it grows as needed) and drops the oldest when the observer falls behind. Safe
  /// from any context.
  ///
  /// Each call subscribes one more observer. While nobody observes, no event is built: a hit
  /// costs one more atomic load. With observers, each event takes the producer's lock and one
  /// per observer, briefly (so concurrent hits contend while observed); an observer that falls
  /// behind is told how many events it lost by ``CacheEvent/dropped(count:)``, and never slows
  /// the cache beyond that. The sequence ends when the cache is deinitialized, after the events
  /// already buffered.
  public func events(bufferingNewest limit: Int = 1_000) -> CacheEvents<Key> {
    CacheEvents(capacity: limit, observing: [(hub: eventHub, layer: 0)] + wiring.eventHubs)
  }

  /// The number of requests waiting for a load of `key`. Safe from any context. O(loads in flight).
  public func waitingRequestCount(for key: Key) -> Int {
    loadTable.waiterCount(for: key)
  }

  /// The waits that requests made inside this cache's loads have recorded, or that requests made
  /// inside other loads recorded for this cache's loads (see ``LoadDependencies``); zero at rest.
  package var recordedLoadWaits: Int {
    LoadDependencies.shared.waitCount(involving: ObjectIdentifier(loadTable))
  }

  /// Returns once at least `count` requests wait for a load of `key` (for tests: it replaces
  /// polling; `AsyncCacheTesting` offers it as `waitForRequests(_:for:)`), or once the calling
  /// task is cancelled.
  package func waitForWaiters(_ count: Int, for key: Key) async {
    await loadTable.waitUntil(orCancellation: true) { $0.waiterCount(for: key) >= count }
  }

  /// Returns once no load is in flight, background refreshes included (for tests: it replaces
  /// polling; `AsyncCacheTesting` offers it as `waitUntilIdle()`), or once the calling task is
  /// cancelled.
  package func waitForNoLoads() async {
    // Abandoned loads are out of `loads` while their body still runs and reports its end.
    await loadTable.waitUntil(orCancellation: true) { $0.isIdle }
  }
}

/// Raises the priority of `task`, the shared work of waiters one of which now runs at `priority`.
@usableFromInline
func escalate(_ task: Task<Void, Never>, to priority: TaskPriority) {
  if #available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, visionOS 26.0, *) {
    task.escalatePriority(to: priority)
  } else {
    // Awaiting a task from a higher-priority task escalates it.
    Task.detached(priority: priority) { await task.value }
  }
}
