import Synchronization

/// Layers composed top-down: a miss falls through to lower layers, and an entry found lower
/// down is copied into the layers above it, keeping its expiry.
///
/// ```swift
/// let chain = try CacheChain<String, Data>([
///     .init(memory),
///     .init(disk, failurePolicy: .skip),   // a failing disk is not fatal
/// ])
/// let data = try await chain.value(for: "avatar/42")
/// ```
///
/// A chain is itself an ``AsyncCacheLayer``, so chains nest.
///
/// Consistency: writes to one key through the chain are applied to the layers one writer at a
/// time, top-down, so the layers never end up holding different values from two overlapping
/// writes. A write overtakes lookups of the same key that are in progress: they still return
/// what they found, but do not copy it upward, because it may be older than the write.
/// ``removeAll()`` waits for writes in progress and overtakes every lookup.
///
/// All operations are `nonisolated`: the chain's state lives behind locks, so callers do not
/// queue on the chain's executor. Safe from any context.
public final actor CacheChain<Key: Hashable & Sendable, Value: Sendable>: AsyncCacheLayer {
  /// A layer of the chain and how its failures are treated.
  public struct Tier: Sendable {
    /// The layer.
    public var layer: any AsyncCacheLayer<Key, Value>
    /// What a failure of this layer means.
    public var failurePolicy: LayerFailurePolicy
    /// A name for statistics and error messages.
    public var name: String

    /// Creates a tier.
    ///
    /// - Parameters:
    ///   - layer: The layer.
    ///   - failurePolicy: What a failure of this layer means; ``LayerFailurePolicy/propagate`` by default.
    ///   - name: A name for statistics and error messages; the layer's type by default.
    public init(
      _ layer: any AsyncCacheLayer<Key, Value>,
      failurePolicy: LayerFailurePolicy = .propagate,
      name: String? = nil
    ) {
      self.layer = layer
      self.failurePolicy = failurePolicy
      self.name = name ?? String(describing: type(of: layer))
    }
  }

  /// How a chain back-fills and reports failures.
  public struct Configuration: Sendable {
    /// When entries found lower down are copied upward. Default ``BackfillPolicy/awaited``.
    public var backfill: BackfillPolicy
    /// Called with every layer failure, whatever the policy, synchronously on the task that saw
    /// it (keep it short): an observer of the chain's events that sees only their
    /// ``CacheEvent/layerFailed(key:failure:)`` (see ``CacheChain/events(bufferingNewest:)``).
    public var onFailure: (@Sendable (LayerFailure) -> Void)?
    /// Where the chain logs layer failures and memory-pressure changes (see <doc:CacheLogging>),
    /// handed on to its layers created without a logger (see ``CacheEnvironment``). Default:
    /// the logger of the cache or chain the chain is put in, else ``CacheLogger/disabled``.
    @FollowsCache public var logger: CacheLogger
    /// The clock handed to the chain's layers created without one (see ``CacheEnvironment``).
    /// Default `nil`: the clock of the cache or chain the chain is put in, if any.
    public var clock: (any CacheClock)?
    /// Puts each layer lookup and write of the chain's reads in a span, if the tracer asks for
    /// layer operations (see ``CacheTracer/tracesLayerOperations``). Default `nil`: the tracer
    /// of the cache or chain the chain is put in, if any.
    public var tracer: (any CacheTracer)?
    /// Called with every layer lookup of the chain's reads (see ``LayerLookupReport``): the
    /// layer, hit, miss or failure, and how long it took. Called synchronously on the task that
    /// looked up: keep it short. Default `nil`: the observer of the cache the chain is put in,
    /// if any. A chain nested in another is one layer of it, reported by the outer chain; it
    /// follows no observer of the outer one's (each lookup is reported once).
    public var onLookup: (@Sendable (LayerLookupReport) -> Void)?
    /// An async function that returns when the service running the chain (``CacheChain/run()``)
    /// should shut down gracefully: pass swift-service-lifecycle's `gracefulShutdown`. Default
    /// `nil`: `run()` ends when its task is cancelled or the chain is closed.
    public var gracefulShutdown: (@Sendable () async throws -> Void)?

    /// Creates a configuration.
    public init(
      backfill: BackfillPolicy = .awaited,
      onFailure: (@Sendable (LayerFailure) -> Void)? = nil,
      logger: CacheLogger? = nil,
      clock: (any CacheClock)? = nil,
      tracer: (any CacheTracer)? = nil,
      onLookup: (@Sendable (LayerLookupReport) -> Void)? = nil,
      gracefulShutdown: (@Sendable () async throws -> Void)? = nil
    ) {
      self.backfill = backfill
      self.onFailure = onFailure
      self._logger = .logger(logger)
      self.clock = clock
      self.tracer = tracer
      self.onLookup = onLookup
      self.gracefulShutdown = gracefulShutdown
    }
  }

  /// The layers, top first.
  public nonisolated let tiers: [Tier]
  /// The chain's configuration.
  public nonisolated let configuration: Configuration
  /// The memory layer that serves hits synchronously: the top layer if it is a
  /// ``MemoryLayer``, or the front of a nested chain on top.
  nonisolated let front: MemoryLayer<Key, Value>?
  /// The top layer when it is not a ``MemoryLayer`` but can answer lookups without suspending
  /// (operators over a memory layer), or the same of a nested chain on top.
  nonisolated let synchronousFront: SynchronousLookupFunction<Key, Value>?

  /// The logger the chain writes to: its configuration's, or the one of the cache or chain it is in.
  nonisolated let followedLogger: Followed<CacheLogger>
  /// The clock handed to the layers: the configuration's, or the one of the cache or chain it is in.
  nonisolated let followedClock: Followed<any CacheClock>
  /// Whom the chain tells of the tag invalidations its layers learn from elsewhere, after it
  /// records them: the cache or chain it is in.
  nonisolated let followedTagHandler = Followed<TagInvalidationHandler?>(given: nil, fallback: nil)
  /// The tracer of the chain's layer operations: its configuration's, or the one of the cache
  /// or chain it is in.
  nonisolated let followedTracer: Followed<CacheTracing?>
  /// Who is told of each lookup: the configuration's observer, or the one of the cache or chain
  /// the chain is in.
  nonisolated let followedLookupObserver: Followed<LayerLookupObserver?>

  nonisolated let coordinator = WriteCoordinator<Key>()
  /// Delivers the chain's own events (layer failures) to its observers and to `onFailure`.
  nonisolated let eventHub: EventHub<CacheEvent<Key>>
  nonisolated let counters: Locked<[TierStatistics]>
  /// Closing (closing the layers, which later calls wait for too) and running; once closed,
  /// operations throw ``AsyncCacheError/Code/closed``.
  private nonisolated let lifecycle = Lifecycle("CacheChain", refusingSecondRunOf: "chain")
  /// Whether ``run()`` runs. For tests.
  package nonisolated var isRunning: Bool { lifecycle.isRunning }
  /// The tags invalidated through the chain (``invalidate(tag:)``), against which it checks the
  /// entries its layers answer with.
  nonisolated let tagInvalidations = TagInvalidations()
  /// The instants the chain stamps its invalidations and tagged entries with.
  nonisolated let tagStamps = TagStamps()
  private nonisolated let backgroundWork = Locked<(next: UInt64, tasks: [UInt64: Task<Void, Never>])>((0, [:]))

  /// Creates a chain of tiers, top first.
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` when `tiers` is empty.
  public init(_ tiers: [Tier], configuration: Configuration = Configuration()) throws {
    guard !tiers.isEmpty else {
      throw AsyncCacheError.invalidConfiguration("a CacheChain needs at least one layer; it was given none")
    }
    self.tiers = tiers
    self.configuration = configuration
    self.followedLogger = Followed(given: configuration.$logger, fallback: .disabled)
    self.followedClock = Followed(given: configuration.clock, fallback: WallClock())
    self.followedTracer = Followed(given: configuration.tracer.map { Optional(CacheTracing($0)) }, fallback: nil)
    self.followedLookupObserver = Followed(given: configuration.onLookup.map { Optional($0) }, fallback: nil)
    var handler: (@Sendable (CacheEvent<Key>) -> Void)?
    if let onFailure = configuration.onFailure {
      handler = { event in
        if case .layerFailed(_, let failure) = event { onFailure(failure) }
      }
    }
    self.eventHub = EventHub(handler: handler)
    self.counters = Locked(tiers.map { TierStatistics(name: $0.name) })
    switch tiers[0].layer {
    case let memory as MemoryLayer<Key, Value>: (front, synchronousFront) = (memory, nil)
    case let chain as CacheChain<Key, Value>: (front, synchronousFront) = (chain.front, chain.synchronousFront)
    case let layer: (front, synchronousFront) = (nil, layer.synchronousLookupFunction)
    }
    handEnvironmentToTiers()
  }

  /// Follows the clock and logger of the cache or chain the chain is put in, for those its
  /// configuration does not name, and hands them on to its layers (see ``CacheEnvironment``).
  public nonisolated func follow(_ environment: CacheEnvironment) {
    if let handler = environment.tagInvalidationHandler { followedTagHandler.follow(handler) }
    let followsLogger = followedLogger.follow(environment.logger)
    let followsClock = followedClock.follow(environment.clock)
    let followsTracer = environment.tracer.map { followedTracer.follow($0) } ?? false
    let followsObserver = environment.onLookup.map { followedLookupObserver.follow($0) } ?? false
    if followsLogger || followsClock || followsTracer || followsObserver { handEnvironmentToTiers() }
  }

  /// Hands the chain's clock and logger, if it was given or follows them, to every tier, with
  /// the handler of the tag invalidations they learn from elsewhere: the chain records them,
  /// then tells the cache or chain it is in.
  private nonisolated func handEnvironmentToTiers() {
    // The registry and the followed handler, not the chain: a layer keeps the handler.
    let (invalidations, outer) = (tagInvalidations, followedTagHandler)
    let environment = CacheEnvironment(
      clock: followedClock.handedOn, logger: followedLogger.handedOn,
      tagInvalidationHandler: { news in
        if case .tag(let tag, let instant) = news { invalidations.record(tag, at: instant) }
        outer.value?(news)
      }, tracer: followedTracer.handedOn ?? nil)
    for tier in tiers { tier.layer.follow(environment) }
  }

  deinit {
    // The observers' sequences end once they have read what is buffered.
    eventHub.finishAll()
  }

  /// A sequence of the chain's events from now on, for one observer: its layer failures
  /// (``CacheEvent/layerFailed(key:failure:)``) and the evictions of its memory layers (nested
  /// chains' included), buffered as ``EventSequence`` describes. A ``LoadingCache``'s
  /// ``LoadingCache/events(bufferingNewest:)`` includes them.
  ///
  /// - Parameter limit: The most events the sequence buffers for a slow observer; past it, the
  ///   oldest are dropped and reported by a ``CacheEvent/dropped(count:)``. At least 1.
  public nonisolated func events(bufferingNewest limit: Int = 1_000) -> CacheEvents<Key> {
    CacheEvents(capacity: limit, observing: eventHubs)
  }

  /// The hubs whose events ``events(bufferingNewest:)`` delivers, with the index of the layer
  /// each observes.
  nonisolated var eventHubs: [(hub: EventHub<CacheEvent<Key>>, layer: Int)] {
    [(eventHub, 0)] + memoryLayers.map { (hub: $0.layer.eventHub, layer: $0.tier) }
  }

  /// What a ``LoadingCache`` built over the chain takes from it, once, when it is created: the
  /// layers its hits are answered by, the clock the chain hands on, and its memory layers and
  /// event hubs (fixed with the chain's tiers).
  struct Wiring: Sendable {
    /// The chain's ``CacheChain/front``.
    let front: MemoryLayer<Key, Value>?
    /// The chain's ``CacheChain/synchronousFront``.
    let synchronousFront: SynchronousLookupFunction<Key, Value>?
    /// The clock the chain hands on, if it was given one or follows one.
    let clock: (any CacheClock)?
    /// The chain's ``CacheChain/memoryLayers``.
    let memoryLayers: [(layer: MemoryLayer<Key, Value>, tier: Int)]
    /// The chain's ``CacheChain/eventHubs``.
    let eventHubs: [(hub: EventHub<CacheEvent<Key>>, layer: Int)]
  }

  /// What a loading cache built over the chain takes from it (see ``Wiring``).
  nonisolated var wiring: Wiring {
    let memoryLayers = memoryLayers
    return Wiring(
      front: front, synchronousFront: synchronousFront, clock: followedClock.handedOn, memoryLayers: memoryLayers,
      eventHubs: [(eventHub, 0)] + memoryLayers.map { (hub: $0.layer.eventHub, layer: $0.tier) })
  }

  /// The ``MemoryLayer``s of the chain, nested chains' included, each with the index of the
  /// tier that holds it.
  nonisolated var memoryLayers: [(layer: MemoryLayer<Key, Value>, tier: Int)] {
    tiers.enumerated().flatMap { index, tier -> [(layer: MemoryLayer<Key, Value>, tier: Int)] in
      switch tier.layer {
      case let memory as MemoryLayer<Key, Value>: [(memory, index)]
      case let chain as CacheChain<Key, Value>: chain.memoryLayers.map { ($0.layer, index) }
      default: []
      }
    }
  }

  /// Creates a chain of layers, top first, all with the same failure policy.
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` when `layers` is empty.
  public init(
    _ layers: [any AsyncCacheLayer<Key, Value>],
    failurePolicy: LayerFailurePolicy = .propagate,
    configuration: Configuration = Configuration()
  ) throws {
    try self.init(layers.map { Tier($0, failurePolicy: failurePolicy) }, configuration: configuration)
  }

  // MARK: AsyncCacheLayer

  /// Returns the first unexpired entry for `key`, top-down, and copies it into the layers above
  /// the one that had it (per ``Configuration-swift.struct/backfill``).
  ///
  /// - Throws: ``AsyncCacheError/Code/layerFailure`` when a layer whose policy is
  ///   ``LayerFailurePolicy/propagate`` fails; `CancellationError` when cancelled.
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    try checkOpen("entry(for:)")
    let read = ChainRead(of: key, in: self)
    guard let (entry, tier) = try await read.locate() else { return nil }
    await read.copy(entry, foundIn: tier)
    return entry
  }

  /// Returns the first unexpired value for `key`, top-down, back-filling the layers above it.
  ///
  /// - Throws: See ``entry(for:)``.
  public nonisolated func value(for key: Key) async throws -> Value? {
    try await entry(for: key)?.value
  }

  /// Stores `value` for `key` in every layer, expiring at `expiresAt` (`nil` for never).
  ///
  /// - Throws: See ``insert(_:for:)-(CacheEntry<Value>,_)``.
  public nonisolated func insert(_ value: Value, for key: Key, expiresAt: CacheInstant? = nil) async throws {
    try await insert(CacheEntry(value, expiresAt: expiresAt), for: key)
  }

  /// Stores `entry` in every layer, top-down.
  ///
  /// If a layer fails, its policy decides: ``LayerFailurePolicy/skip`` records the failure,
  /// removes the key from that layer and goes on; ``LayerFailurePolicy/propagate`` removes the
  /// key from every layer (so none serves a value the others do not have) and throws.
  ///
  /// - Throws: ``AsyncCacheError/Code/layerFailure``; `CancellationError` if cancelled while
  ///   waiting for an earlier write of the same key (nothing is written then).
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    try checkOpen("insert(_:for:)")
    var entry = entry
    // Stamped before it waits for the key: an invalidation made meanwhile came after the write.
    // An instant given that is later than the stamp is not believed: an invalidation made
    // after the write must kill it.
    if !entry.metadata.tags.isEmpty { entry.metadata = entry.metadata.stamped(tagStamp()) }
    let ticket = try await coordinator.acquireWrite(key)
    defer { coordinator.releaseWrite(ticket) }
    try checkOpen("insert(_:for:)")
    if let error = await write(entry, for: key, to: tiers.indices, operation: .insert, propagating: true) {
      throw error
    }
  }

  /// Removes `key` from every layer, even when one fails.
  ///
  /// - Throws: ``AsyncCacheError/Code/layerFailure`` for the first failed layer whose policy is
  ///   ``LayerFailurePolicy/propagate``, after trying all of them.
  public nonisolated func removeValue(for key: Key) async throws {
    try checkOpen("removeValue(for:)")
    let ticket = try await coordinator.acquireWrite(key)
    defer { coordinator.releaseWrite(ticket) }
    try checkOpen("removeValue(for:)")
    try await removeEverywhere(operation: .remove, key: key) { try await $0.removeValue(for: key) }
  }

  /// Removes every entry from every layer, after the writes in progress, even when one fails.
  ///
  /// - Throws: ``AsyncCacheError/Code/layerFailure`` for the first failed layer whose policy is
  ///   ``LayerFailurePolicy/propagate``, after trying all of them.
  public nonisolated func removeAll() async throws {
    try checkOpen("removeAll()")
    let ticket = try await coordinator.acquireGlobalWrite()
    defer { coordinator.releaseGlobalWrite(ticket) }
    try checkOpen("removeAll()")
    try await removeEverywhere(operation: .removeAll, key: nil) { try await $0.removeAll() }
  }

  /// Passes `level` to every layer.
  public nonisolated func handleMemoryPressure(_ level: MemoryPressureLevel) async {
    for tier in tiers { await tier.layer.handleMemoryPressure(level) }
  }

  // MARK: Closing

  /// Closes the chain and its layers: operations made afterwards throw
  /// ``AsyncCacheError/Code/closed``; writes in progress and background back-fills finish first;
  /// then every layer is closed, top first (``AsyncCacheLayer/close()``: a SQLite layer writes
  /// what it buffers, a Redis layer closes its connections, a memory layer empties), and the
  /// chain's event sequences end once they have delivered what they buffered.
  ///
  /// Every layer is closed even when one fails; each failure is recorded, as a failure of the
  /// layer during ``LayerFailure/Operation/close``. Calling it again, or concurrently, waits for
  /// the first call and throws what it threw. A layer shared with another chain is closed for
  /// both. Nested chains are closed in turn.
  ///
  /// - Throws: ``AsyncCacheError/Code/layerFailure`` for the first layer that failed to close,
  ///   whatever its failure policy (what it could not finish is lost, so the caller must hear).
  public nonisolated func close() async throws {
    try await lifecycle.close { try await self.closeLayers() }
  }

  /// Follows the platform's memory pressure (``followSystemMemoryPressure()``) until the calling
  /// task is cancelled, the configuration's
  /// ``Configuration-swift.struct/gracefulShutdown`` signal returns, or the chain is closed;
  /// then closes the chain and returns: the shape of swift-service-lifecycle's `Service`
  /// requirement, for a chain used without a ``LoadingCache`` (a cache runs its own chain).
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidState`` when the chain runs already; what
  ///   ``close()`` throws.
  public nonisolated func run() async throws {
    try await lifecycle.run(orUntil: configuration.gracefulShutdown) { await self.followSystemMemoryPressure() }
    try await close()
  }

  private nonisolated func closeLayers() async throws {
    await waitForBackfills()
    // Waits for the writes in progress, and overtakes the lookups in progress: they copy
    // nothing upward after this.
    if let ticket = try? await coordinator.acquireGlobalWrite() { coordinator.releaseGlobalWrite(ticket) }
    await waitForBackfills()
    var firstFailure: (any Error)?
    for (index, tier) in tiers.enumerated() {
      do {
        try await tier.layer.close()
      } catch {
        record(
          LayerFailure(tierIndex: index, layerName: tier.name, operation: .close, error: error), key: nil, thrown: true)
        if firstFailure == nil { firstFailure = wrap(error, tier: index, operation: .close, key: nil) }
      }
    }
    eventHub.finishAll()
    if let firstFailure { throw firstFailure }
  }

  /// Throws ``AsyncCacheError/Code/closed`` once ``close()`` was called.
  nonisolated func checkOpen(_ operation: @autoclosure () -> String) throws {
    if lifecycle.isClosed { throw AsyncCacheError.closed("CacheChain", operation: operation()) }
  }

  // MARK: Introspection

  /// Per-layer hits, misses, failures and lookup times since the chain was created. Safe from
  /// any context.
  public nonisolated var statistics: Statistics {
    // Each histogram is copied into storage of the snapshot's own, allocated before the lock:
    // were the storage shared, the next lookup would copy it while holding the lock.
    var times = tiers.map { _ in LoadTimeHistogram.allocated() }
    var snapshot = counters.withLock { counters in
      counters.indices.map { index in
        var tier = counters[index]
        tier.lookupTime = LoadTimeHistogram()
        times[index].copyContents(of: counters[index].lookupTime)
        return tier
      }
    }
    for index in snapshot.indices { snapshot[index].lookupTime = times[index] }
    return Statistics(tiers: snapshot)
  }

  /// Waits until every background back-fill started so far has finished.
  public nonisolated func waitForBackfills() async {
    while let task = backgroundWork.withLock({ $0.tasks.values.first }) {
      await task.value
    }
  }

  nonisolated func runInBackground(_ work: @escaping @Sendable () async -> Void) {
    backgroundWork.withLock { state in
      state.next += 1
      let id = state.next
      state.tasks[id] = Task {
        await work()
        _ = self.backgroundWork.withLock { $0.tasks.removeValue(forKey: id) }
      }
    }
  }
}

extension CacheChain {
  /// Counters of one layer of a chain.
  public struct TierStatistics: Sendable {
    /// The tier's name.
    public var name: String
    /// Lookups this layer answered.
    public var hits = 0
    /// Lookups that fell through this layer (failed lookups under ``LayerFailurePolicy/skip`` included).
    public var misses = 0
    /// Failures of this layer, whatever the policy.
    public var failures = 0
    /// How long the layer took to answer the chain's lookups (hits, misses and failures), on the
    /// chain's clock.
    public var lookupTime = LoadTimeHistogram()
    /// The most recent failure.
    public var lastFailure: LayerFailure?
    /// Whether the chain went on without this layer since it last answered a lookup: its next
    /// failures are logged at `.debug`, not `.warning`, so that a layer that is down logs once.
    var isFailing = false

    /// Records that the layer answered a lookup. Returns whether it was failing until now.
    mutating func answered() -> Bool {
      defer { isFailing = false }
      return isFailing
    }
  }

  /// Counters of every layer of a chain, top first.
  public struct Statistics: Sendable {
    /// One entry per tier, top first.
    public var tiers: [TierStatistics]
  }
}
