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
public final class LoadingCache<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  /// The layers, top first.
  public let chain: CacheChain<Key, Value>
  /// Where values come from when no layer has them.
  public let origin: any AsyncFetcher<Key, Value>
  /// Where the bulk requests' missing values come from, in one call per batch; `nil` to ask
  /// ``origin`` once per key.
  public let batchOrigin: (any AsyncBatchFetcher<Key, Value>)?
  /// The cache's configuration.
  public let configuration: Configuration

  /// The memory layer that answers hits synchronously, if the chain has one on top.
  @usableFromInline let front: MemoryLayer<Key, Value>?
  /// The top layer, when it is not a ``MemoryLayer`` but can answer without suspending.
  @usableFromInline let synchronousFront: SynchronousLookupFunction<Key, Value>?

  @usableFromInline let inFlight = Locked(InFlightLoadsStateMachine<Key, LoadWaiter<Key, Value>>())
  @usableFromInline let nextWaiterID = Atomic<UInt64>(0)
  /// Hits of a top layer that is not a ``MemoryLayer`` (a memory layer counts its own).
  @usableFromInline let synchronousHits = Atomic<Int>(0)
  /// Where the cache's events go while someone observes them.
  @usableFromInline let eventHub = CacheEventHub<Key>()
  /// How entries' expiry reads (see <doc:FreshnessAndStatistics>).
  @usableFromInline let freshness: FreshnessRules
  /// Whether a hit must read its entry's expiry: a grace period or a refresh ahead is set.
  @usableFromInline let checksFreshness: Bool
  /// The lead of a refresh ahead or an extension, when every value has the same lifetime.
  @usableFromInline let configuredLead: ConfiguredLead

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
  ///   - configuration: Expiry of loaded values, retries and the clock.
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` naming the first configuration value
  ///   that is out of range.
  public init(
    chain: CacheChain<Key, Value>,
    origin: some AsyncFetcher<Key, Value>,
    batchOrigin: (any AsyncBatchFetcher<Key, Value>)? = nil,
    configuration: Configuration = Configuration()
  ) throws {
    try configuration.validate()
    self.freshness = FreshnessRules(
      staleWhileRevalidate: configuration.staleWhileRevalidate,
      staleIfError: configuration.staleIfError,
      refreshAhead: configuration.refreshAhead,
      jitter: configuration.timeToLiveJitter,
      sliding: configuration.slidingExpiration)
    self.checksFreshness = freshness.checksHits
    self.configuredLead =
      if configuration.timeToLiveForValue != nil {
        .perValue
      } else if let share = freshness.dueShare, let lifetime = configuration.timeToLive {
        .fixed(freshness.lead(lifetime: lifetime.saturatingNanoseconds, share: share))
      } else {
        .none
      }
    // A memory layer that cuts every entry's life shorter than the grace would hold only stale
    // entries (the stale instant is read back as expiry minus grace).
    if freshness.grace > 0, let layerLifetime = chain.front?.configuration.timeToLive,
      layerLifetime.saturatingNanoseconds <= freshness.grace
    {
      throw AsyncCacheError.invalidConfiguration(
        "LoadingCache staleWhileRevalidate/staleIfError grace is \(Duration.nanoseconds(freshness.grace)); "
          + "the top MemoryLayer's timeToLive (\(layerLifetime)) must be longer")
    }
    self.chain = chain
    self.origin = origin
    self.batchOrigin = batchOrigin
    self.configuration = configuration
    self.front = chain.front
    self.synchronousFront = chain.synchronousFront
  }

  /// Creates a loading cache over `layers`, top first, whose failures are propagated.
  ///
  /// The chain it builds logs with the configuration's ``Configuration-swift.struct/logger``.
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` when `layers` is empty, or naming
  ///   the first configuration value that is out of range.
  public convenience init(
    layers: [any AsyncCacheLayer<Key, Value>],
    origin: some AsyncFetcher<Key, Value>,
    batchOrigin: (any AsyncBatchFetcher<Key, Value>)? = nil,
    configuration: Configuration = Configuration()
  ) throws {
    let chain = try CacheChain(layers, configuration: CacheChain.Configuration(logger: configuration.logger))
    try self.init(chain: chain, origin: origin, batchOrigin: batchOrigin, configuration: configuration)
  }

  // MARK: Reading

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
  func topValue(for key: Key) -> Value? {
    if !checksFreshness {
      // Optional chaining, not `if let front`: binding the reference would retain and release it
      // on every hit, and a reference count shared by all callers bounces between cores.
      if let value = front?.requestValue(for: key) {
        if eventHub.isObserved { eventHub.emit(.hit(key: key)) }
        return value
      }
      if synchronousFront != nil, let value = synchronousValue(for: key) {
        synchronousHits.wrappingAdd(1, ordering: .relaxed)
        if eventHub.isObserved { eventHub.emit(.hit(key: key)) }
        return value
      }
    } else if let value = servableValue(for: key, countingRequest: true) {
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
  /// - Throws: ``AsyncCacheError/Code/layerFailure`` (see ``CacheChain/insert(_:for:)-(CacheEntry<Value>,_)``).
  public nonisolated(nonsending) func insert(_ value: Value, for key: Key, timeToLive: Duration? = nil) async throws {
    let entry = CacheEntry(value, expiresAt: insertedExpiry(timeToLive: timeToLive))
    try await writing(key) { try await chain.insert(entry, for: key) }
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
    detach(key)
    defer { detach(key) }
    try await write()
  }

  private func detach(_ key: Key?) {
    inFlight.withLock { state in
      if let key { state.detach(key) } else { state.detachAll() }
    }
  }

  deinit {
    eventHub.finishAll()
  }

  // MARK: Introspection

  /// Requests, loads, load times, freshness and eviction counters, per layer and for the whole
  /// cache, and the size of the in-flight table. Safe from any context. O(layers + segments of
  /// the chain's memory layers).
  public var statistics: Statistics {
    // Read before the top layer's counter: a declined hit counts there first, so it can only be
    // seen there and not yet here (a brief overcount), never the other way round.
    // The snapshot's histogram gets storage of its own, allocated before the lock: were the
    // storage shared, the next load would copy it while holding the lock.
    var loadTime = LoadTimeHistogram.allocated()
    let (counters, loadsInFlight, requestsWaiting, urgentLoads, loadsAtGate, negativeEntries) = inFlight.withLock {
      var counters = $0.counters
      loadTime.copyContents(of: $0.counters.loadTime)
      counters.loadTime = loadTime
      return (counters, $0.loads.count, $0.waiterCount, $0.urgentLoads, $0.loadsAtGate, $0.negatives.count)
    }
    // Requests the top layer answered without a load: a memory layer counts them with its hits.
    let topHits = (front?.store.totals.requestHits ?? 0) + synchronousHits.load(ordering: .relaxed)
    var layers = chain.statistics.tiers.map { tier in
      LayerStatistics(
        name: tier.name, hits: tier.hits, misses: tier.misses, failures: tier.failures, evictions: EvictionCounts())
    }
    for (memory, tier) in chain.memoryLayers {
      layers[tier].evictions = layers[tier].evictions + memory.statistics.evictions
    }
    // The top layer counted hits of entries the cache would not serve; those requests loaded.
    let answeredAtTop = Swift.max(topHits - counters.declinedTopHits, 0)
    layers[0].hits += answeredAtTop
    return Statistics(
      hits: answeredAtTop + counters.layerAnswers,
      misses: counters.originAnswers,
      loads: counters.loads,
      coalescedRequests: counters.coalesced,
      loadFailures: counters.failures,
      loadTime: counters.loadTime,
      retries: counters.retries,
      cancelledRequests: counters.cancelledWaiters,
      cancelledLoads: counters.cancelledLoads,
      loadsInFlight: loadsInFlight,
      requestsWaiting: requestsWaiting,
      urgentLoadsInFlight: urgentLoads,
      loadsWaitingForUrgentWork: loadsAtGate,
      refreshes: counters.refreshes,
      refreshesCoalesced: counters.refreshesCoalesced,
      refreshFailures: counters.refreshFailures,
      staleServed: counters.staleServed,
      staleServedOnError: counters.staleServedOnError,
      negativeHits: counters.negativeHits,
      negativeEntries: negativeEntries,
      evictions: layers.reduce(EvictionCounts()) { $0 + $1.evictions },
      layers: layers
    )
  }

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
    let hubs = [(hub: eventHub, layer: 0)] + chain.memoryLayers.map { (hub: $0.layer.store.eventHub, layer: $0.tier) }
    return CacheEvents(capacity: limit, observing: hubs)
  }

  /// The number of requests waiting for a load of `key`. Safe from any context. O(loads in flight).
  public func waitingRequestCount(for key: Key) -> Int {
    inFlight.withLock { $0.waiterCount(for: key) }
  }

  /// The waits that requests made inside this cache's loads have recorded, or that requests made
  /// inside other loads recorded for this cache's loads (see ``LoadDependencies``); zero at rest.
  package var recordedLoadWaits: Int {
    LoadDependencies.shared.waitCount(involving: ObjectIdentifier(inFlight))
  }

  /// Returns once at least `count` requests wait for a load of `key` (for tests: it replaces
  /// polling; `AsyncCacheTesting` offers it as `waitForRequests(_:for:)`).
  package func waitForWaiters(_ count: Int, for key: Key) async {
    await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
      if !inFlight.withLock({ $0.watch(key, count: count, continuation: continuation) }) {
        continuation.resume()
      }
    }
  }

  /// Returns once no load is in flight, background refreshes included (for tests: it replaces
  /// polling; `AsyncCacheTesting` offers it as `waitUntilIdle()`).
  package func waitForNoLoads() async {
    while !inFlight.withLock({ $0.loads.isEmpty }) {
      await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
        let idle = inFlight.withLock { state in
          if state.loads.isEmpty { return true }
          state.idleWatchers.append(continuation)
          return false
        }
        if idle { continuation.resume() }
      }
    }
  }

  // MARK: Loading

  // The path of a request that misses is inlinable, like the hit path, so that it is specialized
  // for the caller's key and value types: unspecialized generic code costs metadata lookups and
  // value-witness calls per request, which dominate when thousands of requests join one load.
  // The work done once per load (`startLoad`, `run`) stays out of line.

  /// Joins the load of `key` in flight or starts one, and waits for it.
  @inlinable
  nonisolated(nonsending) func load(_ key: Key) async throws -> Value {
    let waiter = nextWaiterID.wrappingAdd(1, ordering: .relaxed).newValue
    if #available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, visionOS 26.0, *) {
      // A request escalated while it waits raises its load's priority too.
      return try await withTaskPriorityEscalationHandler {
        try await self.wait(for: key, as: waiter)
      } onPriorityEscalated: { _, newPriority in
        if let task = self.inFlight.withLock({ $0.escalate(waiter: waiter, key: key, to: newPriority) }) {
          escalate(task, to: newPriority)
        }
      }
    } else {
      return try await wait(for: key, as: waiter)
    }
  }

  @inlinable
  nonisolated(nonsending) func wait(for key: Key, as waiter: UInt64) async throws -> Value {
    // The loads whose body makes this request, if any: it must not wait for one of them.
    let dependents = LoadDependencies.loadsOfCurrentTask
    var dependency: LoadIdentity?
    defer { if let dependency { LoadDependencies.shared.remove(dependents, waitingFor: dependency) } }
    return try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Value, any Error>) in
        // Decided under the lock: the cancellation flag is set before `onCancel` runs, so
        // either this sees it and never joins, or `onCancel` finds the waiter.
        let escalation = inFlight.withLock {
          state -> (failure: (any Error)?, task: Task<Void, Never>?, priority: TaskPriority) in
          // Read under the lock: an escalation after this finds the waiter registered.
          let priority = Task.currentPriority
          if Task.isCancelled { return (CancellationError(), nil, priority) }
          if !state.negatives.isEmpty, let error = rememberedError(for: key, in: &state) {
            return (error, nil, priority)
          }
          if !dependents.isEmpty {
            switch dependOnLoad(state.joinable[key], of: key, from: dependents) {
            case .success(let target): dependency = target
            case .failure(let error): return (error, nil, priority)
            }
          }
          switch state.join(key, waiter: waiter, continuation: .request(continuation), priority: priority) {
          case .joined(let task):
            return (nil, task, priority)
          case .started(let id):
            if !dependents.isEmpty { dependency = dependOnStartedLoad(id, from: dependents) }
            let (task, token) = startLoad(id, key: key, priority: priority)
            state.attach(task, token: token, to: id)
            return (nil, nil, priority)
          }
        }
        if let failure = escalation.failure {
          continuation.resume(throwing: failure)
        } else if let task = escalation.task {
          escalate(task, to: escalation.priority)
        }
      }
    } onCancel: {
      let (continuation, abandoned) = inFlight.withLock { state in
        let (continuation, abandoned) = state.cancel(waiter: waiter, key: key)
        // A late value of an abandoned load must not be stored: a fresh load may follow. Marked
        // under the lock, so no later request can start that fresh load before it is marked.
        if let token = abandoned?.token { overtake(token) }
        return (continuation, abandoned)
      }
      continuation?.resume(throwing: CancellationError())
      abandoned?.task?.cancel()
    }
  }

  /// Starts load `id` of `key`: registers its read with the chain and runs it in a task.
  ///
  /// An unstructured task: it is shared, so it must not be cancelled with the request that
  /// started it, but it inherits that request's task-local values (tracing context, the current
  /// test), as single-flight loads conventionally run in the first caller's context.
  ///
  /// The body runs as the load's (see ``LoadDependencies``), so that a request it makes for a key
  /// whose load waits for this one fails instead of waiting for ever.
  @usableFromInline
  func startLoad(_ id: UInt64, key: Key, priority: TaskPriority) -> (Task<Void, Never>, ReadToken<Key>) {
    let token = chain.coordinator.beginRead(key)
    let load = LoadIdentity(table: ObjectIdentifier(inFlight), load: id)
    let task = Task(priority: priority) {
      await LoadDependencies.$current.withValue(.load(load)) { await self.run(id, key: key, token: token) }
    }
    return (task, token)
  }

  /// Records that `dependents` (the loads whose body makes a request for `key`) wait for `id`,
  /// the joinable load of `key`, if there is one, and returns it; fails with
  /// ``AsyncCacheError/Code/recursiveLoad`` when that load waits for one of them (or is one),
  /// recording nothing. `nil` when no load of `key` is joinable: the request starts one, which
  /// ``dependOnStartedLoad(_:from:)`` records. Called under the in-flight lock, on misses made
  /// inside a load only.
  @usableFromInline
  func dependOnLoad(
    _ id: UInt64?, of key: Key, from dependents: [LoadIdentity]
  ) -> Result<LoadIdentity?, AsyncCacheError> {
    guard let id else { return .success(nil) }
    let target = LoadIdentity(table: ObjectIdentifier(inFlight), load: id)
    guard LoadDependencies.shared.add(dependents, waitingFor: target, checkingCycles: true) else {
      return .failure(.recursiveLoad(key))
    }
    return .success(target)
  }

  /// Records that `dependents` wait for load `id`, just started by their request: a new load
  /// waits for nothing yet, so this closes no cycle.
  @usableFromInline
  func dependOnStartedLoad(_ id: UInt64, from dependents: [LoadIdentity]) -> LoadIdentity {
    let target = LoadIdentity(table: ObjectIdentifier(inFlight), load: id)
    _ = LoadDependencies.shared.add(dependents, waitingFor: target, checkingCycles: false)
    return target
  }

  /// Marks the read of an abandoned load as overtaken, so that a late value is not stored.
  @usableFromInline
  func overtake(_ token: ReadToken<Key>) {
    chain.coordinator.overtake(token)
  }

  /// The body of load `id`: the layers below, then the origin; then answers the waiters.
  ///
  /// With freshness rules (<doc:FreshnessAndStatistics>), a stale entry a layer returns is
  /// served at once while stale-while-revalidate allows it, and refreshed afterwards; otherwise
  /// the lookup goes on to the layers below and the origin, keeping the stale entry to serve if
  /// they fail (stale-if-error). A refresh serves nothing stale at once: it is the one that
  /// brings the fresh value.
  private func run(_ id: UInt64, key: Key, token: ReadToken<Key>) async {
    let startedAt = configuration.clock.now
    logLoadStarted(key)
    let isRefresh = checksFreshness && inFlight.withLock { $0.isRefresh(id) }
    if eventHub.isObserved { eventHub.emit(isRefresh ? .refreshStarted(key: key) : .loadStarted(key: key)) }
    var result: Result<(Value, LoadSource), any Error>
    var tokenHandedOff = false
    var refreshAfterwards = false
    var foundStale = false
    var fallback: Fallback?
    do {
      if let (entry, tier, state) = try await locateForLoad(key, isRefresh: isRefresh, fallback: &fallback) {
        refreshAfterwards = state == .stale || state == .refreshDue
        foundStale = state == .stale
        // A prefetch into the lower layers leaves the top layer alone.
        let top = tier > 0 && skipsTopLayer(id) ? 1 : 0
        let (entry, layers) = storing(entry, state: state, for: key, foundIn: tier, top: top)
        if !layers.isEmpty {
          switch chain.configuration.backfill {
          case .awaited:
            await chain.backfill(entry, for: key, into: layers, token: token)
          case .background:
            tokenHandedOff = true
            chain.backfillInBackground(entry, for: key, into: layers, token: token)
          }
        }
        result = .success((entry.value, .layer(tier)))
      } else {
        let value = try await fetchRetrying(key, load: id)
        let entry = CacheEntry(value, expiresAt: loadedExpiry(for: key, value: value))
        let top = skipsTopLayer(id) && chain.tiers.count > 1 ? 1 : 0
        _ = await chain.commit(entry, for: key, to: top..<chain.tiers.count, token: token, operation: .insert)
        result = .success((value, .origin))
      }
    } catch {
      result = .failure(error)
    }
    var staleAfter: (any Error)?
    if case .failure(let error) = result, let stale = staleValue(after: error, fallback: fallback, key: key) {
      result = .success(stale)
      staleAfter = error
    }
    if !tokenHandedOff { chain.coordinator.endRead(token) }
    finish(
      id, key: key, startedAt: startedAt, with: result, servedStale: foundStale, staleAfter: staleAfter,
      thenRefresh: refreshAfterwards)
  }

  /// Removes load `id` of `key` from the table and answers its waiters; counts its requests as
  /// hits or misses and records its duration, unless it was abandoned.
  ///
  /// - Parameters:
  ///   - startedAt: When the load started, on the cache's clock.
  ///   - servedStale: The load answers with a stale value at once (stale-while-revalidate).
  ///   - staleAfter: The error the load failed with, when it answers with a stale value instead
  ///     (stale-if-error).
  ///   - thenRefresh: Start a background refresh of `key` once the load is out of the table, in
  ///     the same critical section: no request can start a second one in between.
  func finish(
    _ id: UInt64,
    key: Key,
    startedAt: CacheInstant,
    with result: Result<(Value, LoadSource), any Error>,
    servedStale: Bool = false,
    staleAfter: (any Error)? = nil,
    thenRefresh: Bool = false
  ) {
    // A load that answers with a stale value after an error failed all the same.
    let failed: Bool = if case .failure = result { true } else { staleAfter != nil }
    logLoadFinished(key, with: result)
    var negative: (error: any Error, expiry: Int64, limit: Int)?
    if case .failure(let error) = result, let policy = configuration.negativeCaching,
      !(error is CancellationError), !AsyncCacheError.isRecursiveLoad(error), policy.remembers(error)
    {
      let expiry = configuration.clock.now.advanced(by: policy.timeToLive).nanosecondsSince1970
      negative = (error, expiry, policy.countLimit)
    }
    let duration = startedAt.duration(to: configuration.clock.now)
    let answeredFromLayer: Bool = if case .success((_, .layer)) = result { true } else { false }
    let waiters = inFlight.withLock { state in
      // An abandoned load is out of the table: its requests left, and it is not counted. It
      // ended as cancelled, whatever it brought.
      guard state.loads[id] != nil else {
        if eventHub.isObserved { eventHub.emit(.loadFailed(key: key, error: CancellationError(), duration: duration)) }
        return [LoadWaiter<Key, Value>]()
      }
      state.counters.loadTime.record(duration)
      // Reported before the load leaves the table, so before anyone can see it gone (the event
      // locks are leaves).
      if eventHub.isObserved { reportEnd(of: key, with: result, staleAfter: staleAfter, duration: duration) }
      // A write during the load made it unjoinable: its error is as stale as its value, and no
      // one asked for the key since, so nothing is refreshed.
      let waiters = state.finish(id, failed: failed) { state in
        if servedStale { state.counters.staleServed += 1 }
        if staleAfter != nil { state.counters.staleServedOnError += 1 }
        if let negative {
          state.negatives.remember(negative.error, for: key, expiry: negative.expiry, limit: negative.limit)
        }
        if thenRefresh { startRefresh(key, in: &state) }
      }
      let requests = waiters.count { $0.isRequest }
      if answeredFromLayer { state.counters.layerAnswers += requests } else { state.counters.originAnswers += requests }
      return waiters
    }
    let value = result.map(\.0)
    let source = result.map(\.1)
    for waiter in waiters { waiter.resume(value: value, source: source, key: key) }
  }

  /// Reports the end of a load of `key`: with a value, an error, or an error and the stale value
  /// served instead.
  private func reportEnd(
    of key: Key, with result: Result<(Value, LoadSource), any Error>, staleAfter: (any Error)?, duration: Duration
  ) {
    switch (result, staleAfter) {
    case (.success, let error?):
      eventHub.emit(.loadFailed(key: key, error: error, duration: duration))
      eventHub.emit(.servedStale(key: key, error: error))
    case (.success((_, let source)), nil):
      eventHub.emit(.loadFinished(key: key, source: source, duration: duration))
    case (.failure(let error), _):
      eventHub.emit(.loadFailed(key: key, error: error, duration: duration))
    }
  }

  /// Whether load `id` stores below the top layer only (read when it decides where to store).
  private func skipsTopLayer(_ id: UInt64) -> Bool {
    inFlight.withLock { $0.loads[id]?.skipsTopLayer ?? false }
  }

  /// Waits, if loads `ids` (one load, or a batch's) are background work, until no urgent load
  /// is in flight or one of them is promoted.
  ///
  /// - Throws: `CancellationError` when the task is cancelled, or none of the loads is wanted
  ///   any more (they were abandoned, and the task is about to be cancelled).
  func waitForUrgentWork(loads ids: [UInt64]) async throws {
    try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
        let decision = inFlight.withLock {
          state -> InFlightLoadsStateMachine<Key, LoadWaiter<Key, Value>>.GateDecision in
          Task.isCancelled ? .abandoned : state.enterGate(ids, continuation: continuation)
        }
        switch decision {
        case .proceed: continuation.resume()
        case .abandoned: continuation.resume(throwing: CancellationError())
        case .held: break
        }
      }
    } onCancel: {
      let continuation = inFlight.withLock { state -> UnsafeContinuation<Void, any Error>? in
        guard let gate = ids.first(where: { state.loads[$0]?.gate != nil }).flatMap({ state.loads[$0]?.gate })
        else { return nil }
        return state.leaveGate(gate)
      }
      continuation?.resume(throwing: CancellationError())
    }
  }

  /// Asks the origin, again after transient failures, per the retry policy. Runs inside the
  /// key's one load, so all its waiters share the loop.
  private func fetchRetrying(_ key: Key, load id: UInt64) async throws -> Value {
    try await retrying([key]) {
      try await waitForUrgentWork(loads: [id])
      return try await origin.fetch(key)
    }
  }

  /// Runs `attempt` for the loads of `keys`, again after transient failures, per the retry
  /// policy, and reports the retries and the final failure of each key.
  func retrying<Success>(_ keys: [Key], _ attempt: () async throws -> Success) async throws -> Success {
    try await retrying({ keys }, attempt)
  }

  /// Runs `attempt` as ``retrying(_:_:)-(_,_)`` does, reporting the keys `keys()` returns after
  /// each failure (a batch's keys still wanted).
  func retrying<Success>(_ keys: () -> [Key], _ attempt: () async throws -> Success) async throws -> Success {
    let policy = configuration.retryPolicy
    var attempts = 1
    while true {
      do {
        return try await attempt()
      } catch is CancellationError {
        throw CancellationError()
      } catch {
        if Task.isCancelled { throw CancellationError() }
        // A recursive load fails the same way however often it is tried.
        let isFatal = AsyncCacheError.isRecursiveLoad(error) || policy.classify(error) == .fatal
        // No delay either when the error asks for a longer one than the policy allows: give up.
        let mayRetry = !isFatal && attempts < policy.maximumAttempts
        let delay = mayRetry ? policy.delay(beforeRetry: attempts, after: error, unit: Double.random(in: 0..<1)) : nil
        guard let delay else {
          logGivingUp(on: keys(), attempts: attempts, error: error, isFatal: isFatal)
          for key in keys() {
            configuration.onLoadEvent?(.failed(key: key, attempts: attempts, error: error, isFatal: isFatal))
          }
          throw error
        }
        logRetry(of: keys(), attempt: attempts, error: error, delay: delay)
        inFlight.withLock { $0.counters.retries += 1 }
        for key in keys() {
          configuration.onLoadEvent?(.retrying(key: key, attempt: attempts, error: error, delay: delay))
          if eventHub.isObserved { eventHub.emit(.retrying(key: key, attempt: attempts, error: error, delay: delay)) }
        }
        let clock = configuration.clock
        try await clock.sleep(until: clock.now.advanced(by: delay), tolerance: nil)
        attempts += 1
      }
    }
  }

  /// The expiry of a value inserted now: `timeToLive`, or the configured one, then the grace.
  func insertedExpiry(timeToLive: Duration?) -> CacheInstant? {
    guard let lifetime = timeToLive ?? configuration.timeToLive else { return nil }
    return freshness.expiry(now: configuration.clock.now, lifetime: lifetime)
  }

  /// The expiry of `value`, loaded for `key` now: its lifetime per the configuration, shortened
  /// by jitter, then the grace.
  func loadedExpiry(for key: Key, value: Value) -> CacheInstant? {
    guard var lifetime = lifetime(of: key, value) else { return nil }
    let jitter = configuration.timeToLiveJitter
    if jitter > 0 { lifetime = lifetime * (1 - jitter * configuration.randomUnit()) }
    return freshness.expiry(now: configuration.clock.now, lifetime: lifetime)
  }

}

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
    public var staleWhileRevalidate: Duration
    /// How long after it turns stale an entry is kept to be served when a load of its key fails
    /// (stale-if-error); each such failure is reported as ``LoadEvent/servedStale(key:error:)``.
    /// Default zero.
    public var staleIfError: Duration
    /// The share of its lifetime, in `0<..<1`, after which reading a fresh entry refreshes it
    /// in the background, so that entries read often never turn stale. Default `nil`: none.
    ///
    /// Layers store no write time, so a refresh falls due when the fresh time left is at most
    /// `1 - refreshAhead` of the configured lifetime, less ``timeToLiveJitter``'s largest cut:
    /// with 0.8 and no jitter, at 80% of the lifetime, to the nanosecond (reckoned in integer
    /// nanoseconds), as the hit's clock reads it (``CacheClock/coarseNow``: see
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
    /// value) is dropped, and the next extension makes up for it. An extension overtakes
    /// nothing: a load that starts while it is written below still stores its value, after it.
    /// Needs ``timeToLive`` or ``timeToLiveForValue``; cannot be combined with ``refreshAhead``.
    public var slidingExpiration: Bool
    /// Which origin errors are remembered, and for how long; `nil` (the default) for none.
    public var negativeCaching: NegativeCachingPolicy?
    /// The clock expiry is computed from, and retry delays are slept on. Default ``WallClock``.
    ///
    /// A top ``MemoryLayer`` tells whether a hit is fresh by its own clock's
    /// ``CacheClock/coarseNow`` (read once per hit of an entry that expires, and shared by the
    /// freshness rules): give both the same clock. Refresh-ahead and sliding-expiry points are
    /// compared in integer nanoseconds, exact under `ManualClock`.
    public var clock: any CacheClock
    /// When the origin is asked again after it fails. Default ``RetryPolicy/never``.
    public var retryPolicy: RetryPolicy
    /// Called with every ``LoadEvent`` (retries, final failures, stale values served after a
    /// failure), on the load's task: keep it short. Default `nil`.
    public var onLoadEvent: (@Sendable (LoadEvent<Key>) -> Void)?
    /// Where the cache logs its loads, retries and memory-pressure changes (see <doc:CacheLogging>);
    /// also used by the chain that ``LoadingCache/init(layers:origin:batchOrigin:configuration:)``
    /// builds, and by the cache's prefetchers unless they have a logger of their own. Default
    /// ``CacheLogger/disabled``. Hits never log.
    public var logger: CacheLogger
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
      clock: any CacheClock = WallClock(),
      retryPolicy: RetryPolicy = .never,
      onLoadEvent: (@Sendable (LoadEvent<Key>) -> Void)? = nil,
      logger: CacheLogger = .disabled
    ) {
      self.timeToLive = timeToLive
      self.staleWhileRevalidate = staleWhileRevalidate
      self.staleIfError = staleIfError
      self.refreshAhead = refreshAhead
      self.slidingExpiration = slidingExpiration
      self.timeToLiveJitter = timeToLiveJitter
      self.timeToLiveForValue = timeToLiveForValue
      self.negativeCaching = negativeCaching
      self.clock = clock
      self.retryPolicy = retryPolicy
      self.onLoadEvent = onLoadEvent
      self.logger = logger
    }

    /// Throws ``AsyncCacheError/Code/invalidConfiguration`` naming the first value out of range.
    func validate() throws {
      if let timeToLive, timeToLive <= .zero {
        throw AsyncCacheError.invalidConfiguration("LoadingCache timeToLive is \(timeToLive); it must be positive")
      }
      guard staleWhileRevalidate >= .zero else {
        throw AsyncCacheError.invalidConfiguration(
          "LoadingCache staleWhileRevalidate is \(staleWhileRevalidate); it must be zero or more")
      }
      guard staleIfError >= .zero else {
        throw AsyncCacheError.invalidConfiguration(
          "LoadingCache staleIfError is \(staleIfError); it must be zero or more")
      }
      if let refreshAhead, !(refreshAhead > 0 && refreshAhead < 1) {
        throw AsyncCacheError.invalidConfiguration(
          "LoadingCache refreshAhead is \(refreshAhead); it must be in 0<..<1")
      }
      if slidingExpiration, refreshAhead != nil {
        throw AsyncCacheError.invalidConfiguration(
          "LoadingCache slidingExpiration and refreshAhead cannot be combined: an entry read late in its life "
            + "is either extended or refreshed")
      }
      if slidingExpiration, timeToLive == nil, timeToLiveForValue == nil {
        throw AsyncCacheError.invalidConfiguration(
          "LoadingCache slidingExpiration needs a timeToLive or a timeToLiveForValue to extend entries by")
      }
      guard timeToLiveJitter >= 0, timeToLiveJitter < 1 else {
        throw AsyncCacheError.invalidConfiguration(
          "LoadingCache timeToLiveJitter is \(timeToLiveJitter); it must be in 0..<1")
      }
      try negativeCaching?.validate()
    }
  }

  /// A snapshot of a loading cache's counters, for the whole cache and per layer.
  ///
  /// A *request* is a call of ``LoadingCache/value(for:)`` or one key of a bulk request;
  /// ``LoadingCache/cachedValue(for:)`` peeks and prefetches are not requests. Each request is a
  /// hit or a miss once it is answered; a request answered by negative caching is neither (it is
  /// a ``negativeHits``), nor is one cancelled while it waited.
  public struct Statistics: Sendable, Hashable {
    /// Requests answered by a layer: by the top layer without a load (stale values served at
    /// once included), or by a load that found the value in a layer below (or kept a stale one
    /// when the origin failed).
    public var hits: Int
    /// Requests answered by a load that did not find the value in a layer: with the origin's
    /// value, or with an error (the origin's, or a failing layer's).
    public var misses: Int
    /// The share of requests that were hits, from 0 to 1; 0 before any request.
    public var hitRatio: Double { hits + misses == 0 ? 0 : Double(hits) / Double(hits + misses) }
    /// Loads started (each asks the layers below the top and, on a miss there, the origin).
    public var loads: Int
    /// Requests that joined a load already in flight instead of starting one.
    public var coalescedRequests: Int
    /// Loads that ended with an error.
    public var loadFailures: Int
    /// How long loads took, from start to end on the cache's clock (waits for urgent work and
    /// retry delays included); a load abandoned by all its requests is not recorded.
    public var loadTime: LoadTimeHistogram
    /// Origin calls made again after a transient failure (see ``RetryPolicy``): one per retry
    /// of a load or of a batch.
    public var retries: Int
    /// Requests whose task was cancelled while they waited.
    public var cancelledRequests: Int
    /// Loads cancelled because their last request left.
    public var cancelledLoads: Int
    /// Loads running now (joinable or not).
    public var loadsInFlight: Int
    /// Requests (and prefetches) waiting now.
    public var requestsWaiting: Int
    /// Loads in flight that a request waits for (see ``LoadingCache`` on urgent work).
    public var urgentLoadsInFlight: Int
    /// Background loads holding back from the origin until the urgent work ends.
    public var loadsWaitingForUrgentWork: Int
    /// Background refreshes started, of stale entries and of entries read late in their
    /// lifetime (``Configuration-swift.struct/refreshAhead``); each is also counted in ``loads``.
    public var refreshes: Int
    /// Refreshes not started because a load of the key was in flight already.
    public var refreshesCoalesced: Int
    /// Refreshes that failed; each is also counted in ``loadFailures``.
    public var refreshFailures: Int
    /// Stale values served at once (stale-while-revalidate): each request the top layer answered
    /// with one, and each load that found one below it.
    public var staleServed: Int
    /// Loads that failed and kept a stale value, answering their requests with it instead of the
    /// error (stale-if-error); refreshes included. Each is also counted in ``loadFailures``.
    public var staleServedOnError: Int
    /// Requests (each key of a bulk request, and prefetches) answered with an error remembered by
    /// negative caching, without a load.
    public var negativeHits: Int
    /// Errors remembered by negative caching now (expired ones until they are found).
    public var negativeEntries: Int
    /// Entries evicted by the ``MemoryLayer``s of the chain (nested chains' included), by reason;
    /// other layers report theirs in their own statistics.
    public var evictions: EvictionCounts
    /// Each layer of the chain, top first.
    public var layers: [LayerStatistics]
  }

  /// A snapshot of one layer's counters, as the cache sees it.
  public struct LayerStatistics: Sendable, Hashable {
    /// The layer's name in the chain.
    public var name: String
    /// Lookups the layer answered: the chain's, during loads, and for the top layer also the
    /// requests it answered without a load. A top ``MemoryLayer`` shared by several loading
    /// caches counts the request hits of all of them.
    public var hits: Int
    /// The chain's lookups during loads that fell through the layer.
    public var misses: Int
    /// Failures of the layer, whatever its ``LayerFailurePolicy``.
    public var failures: Int
    /// Entries the layer evicted, by reason, if it is a ``MemoryLayer``; none otherwise.
    public var evictions: EvictionCounts
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
