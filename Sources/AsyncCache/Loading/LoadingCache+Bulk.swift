extension LoadingCache {
  /// The outcome of a bulk request: the values found or loaded, and the keys that failed.
  public struct BulkValues: Sendable {
    /// The values found in the layers or loaded, by key.
    public var values: [Key: Value]
    /// The error of each key that could not be loaded (`CancellationError` for keys left
    /// unloaded because the request was cancelled).
    public var failures: [Key: any Error]

    /// Creates an outcome.
    public init(values: [Key: Value] = [:], failures: [Key: any Error] = [:]) {
      self.values = values
      self.failures = failures
    }
  }

  /// Returns the values of `keys` that could be found or loaded, and the error of each one that
  /// could not: one key's failure does not fail the others.
  ///
  /// Keys held by the top memory layer are answered at once. The others are requested
  /// together, as urgent work: a key already loading joins that load, and a request for a key
  /// that arrives meanwhile joins this one. The keys that no load covers are looked up in the
  /// layers below, and those still missing are fetched with one ``AsyncBatchFetcher`` call per
  /// batch when the cache has a ``batchOrigin``, or one ``origin`` call per key otherwise.
  /// Duplicate keys are asked once. Cancelling the calling task withdraws the request from
  /// the loads still running (a load no one else waits for is cancelled); their keys fail with
  /// `CancellationError`. Safe from any context.
  public func values(for keys: some Sequence<Key>) async -> BulkValues {
    var result = BulkValues()
    let missing = partition(keys, into: &result.values)
    guard !missing.isEmpty else { return result }
    let collected = await collect(missing, failsFast: false)
    result.values.merge(collected.values) { cached, _ in cached }
    result.failures = collected.failures
    return result
  }

  /// Returns the values of all `keys`, or throws the first error: the request is then
  /// withdrawn from the loads still running (a load no one else waits for is cancelled).
  ///
  /// Keys are requested as in ``values(for:)``. Safe from any context.
  ///
  /// - Throws: The first error of a key's load, or `CancellationError` when the calling task is
  ///   cancelled.
  public func allValues(for keys: some Sequence<Key>) async throws -> [Key: Value] {
    var values: [Key: Value] = [:]
    let missing = partition(keys, into: &values)
    guard !missing.isEmpty else { return values }
    let collected = await collect(missing, failsFast: true)
    if let error = collected.failures.values.first { throw error }
    values.merge(collected.values) { cached, _ in cached }
    return values
  }

  /// Puts the values of `keys` held by the top memory layer into `values`; returns the other
  /// keys, each once, in order.
  private func partition(_ keys: some Sequence<Key>, into values: inout [Key: Value]) -> [Key] {
    var missing: [Key] = []
    var seen = Set<Key>()
    for key in keys where seen.insert(key).inserted {
      if let value = topValue(for: key) {
        values[key] = value
      } else {
        if eventHub.isObserved { eventHub.emit(.miss(key: key)) }
        missing.append(key)
      }
    }
    return missing
  }

  /// Waits for `keys` (distinct, none in the top layer) as one waiter of each key's load,
  /// starting the loads that are not in flight; returns what was collected. When `failsFast`,
  /// it returns at the first failure, withdrawn from the other loads.
  private func collect(_ keys: [Key], failsFast: Bool) async -> (values: [Key: Value], failures: [Key: any Error]) {
    do {
      try checkOpen(failsFast ? "allValues(for:)" : "values(for:)")
    } catch {
      return ([:], Dictionary(keys.map { ($0, error as any Error) }) { first, _ in first })
    }
    let collector = BulkCollector<Key, Value>(keys: keys, failsFast: failsFast)
    let waiter = nextWaiterID.wrappingAdd(1, ordering: .relaxed).newValue
    // The loads whose body makes this request, if any: it must not wait for one of them.
    let dependents = LoadDependencies.loadsOfCurrentTask
    var dependencies: [LoadIdentity] = []
    defer { for target in dependencies { LoadDependencies.shared.remove(dependents, waitingFor: target) } }
    if #available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, visionOS 26.0, *) {
      // A request escalated while it waits raises the priority of its keys' loads too.
      await withTaskPriorityEscalationHandler {
        dependencies = await registerWithinTimeouts(waiter, collector: collector, keys: keys, dependents: dependents)
      } onPriorityEscalated: { _, newPriority in
        self.loadTable.escalate(waiter, keys: keys, to: newPriority)
      }
    } else {
      dependencies = await registerWithinTimeouts(waiter, collector: collector, keys: keys, dependents: dependents)
    }
    let (outstanding, values, failures) = collector.snapshot
    // Failed fast: the other keys are no longer wanted by this request.
    if !outstanding.isEmpty { loadTable.leave(waiter, keys: outstanding) }
    return (values, failures)
  }

  /// Registers `waiter` as ``register(_:collector:keys:dependents:)`` does, within the cache's
  /// ``LoadTimeouts``: each key still outstanding at the soft deadline gets the stale value its
  /// load found, if any (its load goes on); each one outstanding at the hard deadline fails with
  /// ``AsyncCacheError/Code/timedOut`` (its load is cancelled if no one else waits for it). The
  /// deadlines run in a child task, ended with the request, once the keys have joined.
  private func registerWithinTimeouts(
    _ waiter: UInt64, collector: BulkCollector<Key, Value>, keys: [Key], dependents: [LoadIdentity]
  ) async -> [LoadIdentity] {
    guard hasLoadTimeouts else {
      return await register(waiter, collector: collector, keys: keys, dependents: dependents)
    }
    // Each key still outstanding at a deadline gets what the deadline gives.
    let registered = try? await withinLoadTimeouts(
      configuration.loadTimeouts,
      soft: { timeout in
        for key in collector.snapshot.outstanding { self.softTimeOut(waiter, key: key, after: timeout) }
      },
      hard: { timeout in
        for key in collector.snapshot.outstanding { self.hardTimeOut(waiter, key: key, after: timeout) }
      },
      wait: { joined in
        await self.register(waiter, collector: collector, keys: keys, dependents: dependents, joined: joined)
      })
    // `register` never throws: `nil` only if the group could end without it, which it cannot.
    return registered ?? []
  }

  /// Registers `waiter` (collecting into `collector`) with the load of each of `keys`, starting
  /// the loads not in flight, and waits until the collector is done or the task is cancelled.
  ///
  /// When the request is made inside loads (`dependents`), a key whose load waits for one of
  /// them fails with ``AsyncCacheError/Code/recursiveLoad`` instead of joining it. Returns the
  /// loads that `dependents` were recorded as waiting for, to forget once the request ends.
  private func register(
    _ waiter: UInt64, collector: BulkCollector<Key, Value>, keys: [Key], dependents: [LoadIdentity],
    joined: (@Sendable () -> Void)? = nil
  ) async -> [LoadIdentity] {
    var dependencies: [LoadIdentity] = []
    // Never thrown: the outcome of each key, a cancellation's included, is in the collector.
    try? await waitInTable { continuation in
      collector.wait(with: continuation)
      let refused = loadTable.join(
        keys, waiter: waiter, collector: collector, negativeNow: negativeNow, dependents: dependents,
        dependencies: &dependencies)
      joined?()
      for (key, refusal) in refused {
        collector.deliver(.failure(failure(refusal, key: key, joining: .bulk)), for: key)
      }
      return nil
    } leave: {
      loadTable.leave(waiter, keys: keys)
      collector.failOutstanding(with: CancellationError())
    }
    return dependencies
  }

  /// Starts one task for the loads of `started`, a batch of the loads a bulk request started:
  /// their layers, then one `origin` call for the keys still missing.
  func startBatch(
    _ started: [LoadTable<Key, Value>.StartedLoad], origin: any AsyncBatchFetcher<Key, Value>
  ) -> LoadLaunch {
    let items = started.map { BatchItem(id: $0.id, key: $0.key, token: $0.token!, urgentAt: $0.urgentAt) }
    let priority = started.map(\.priority).max() ?? .medium
    // The batch's body runs as each of its loads (see LoadDependencies).
    let loads = items.map { LoadIdentity(table: ObjectIdentifier(loadTable), load: $0.id) }
    let task = Task(priority: priority) {
      await LoadDependencies.$current.withValue(.batch(loads)) {
        guard let tracing = self.tracing else { return await self.runBatch(items, origin: origin) }
        await tracing.span("cache.load_batch") { span in
          span.set("cache.keys.count", items.count)
          await self.runBatch(items, origin: origin)
        }
      }
      self.loadTable.taskEnded(items.map(\.id))
    }
    return LoadLaunch(ids: items.map(\.id), task: task, isBatch: true)
  }

  /// What the lookup of one key of a batch found, and the stale entry it passed over.
  private struct BatchLookup: Sendable {
    let item: BatchItem<Key>
    let found: Result<(entry: CacheEntry<Value>, tier: Int, state: FreshnessRules.State)?, any Error>
    let fallback: Fallback?
  }

  /// The body of a batch: each key's layers (concurrently), then batch origin calls for the
  /// keys still missing; answers each key's load as soon as its outcome is known.
  private func runBatch(_ items: [BatchItem<Key>], origin: any AsyncBatchFetcher<Key, Value>) async {
    let startedAt = configuration.clock.now
    logLoadsStarted(items.lazy.map(\.key))
    if eventHub.isObserved { for item in items { eventHub.emit(.loadStarted(key: item.key)) } }
    // Lookups run concurrently, as the loads of single requests would.
    let lookups = await withTaskGroup(of: BatchLookup?.self) { group in
      for item in items {
        group.addTask {
          // A load abandoned meanwhile is not looked up, nor fetched.
          guard self.loadTable.isLive(item.id) else {
            ChainRead(resuming: item.token, of: self.chain).end()
            // Out of the table: this reports its end, as cancelled.
            self.finish(item.id, key: item.key, startedAt: startedAt, with: .failure(CancellationError()), attempts: 0)
            return nil
          }
          var fallback: Fallback?
          do {
            let found = try await self.locateForLoad(item.key, load: item.id, isRefresh: false, fallback: &fallback)
            return BatchLookup(item: item, found: .success(found), fallback: fallback)
          } catch {
            return BatchLookup(item: item, found: .failure(error), fallback: fallback)
          }
        }
      }
      var lookups: [BatchLookup] = []
      for await lookup in group { if let lookup { lookups.append(lookup) } }
      // The batch asks for its keys in the order they were requested, whatever order the
      // lookups ended in.
      return lookups.sorted { $0.item.id < $1.item.id }
    }
    var missing: [BatchItem<Key>] = []
    var fallbacks: [UInt64: Fallback] = [:]
    for lookup in lookups {
      let item = lookup.item
      fallbacks[item.id] = lookup.fallback
      switch lookup.found {
      case .success(nil):
        missing.append(item)
      case .success(let (found, tier, state)?):
        let entry = await copy(found, in: state, foundIn: tier, ending: ChainRead(resuming: item.token, of: chain))
        finish(
          item.id, key: item.key, startedAt: startedAt, with: .success((entry.value, .layer(tier))), attempts: 0,
          servedStale: state == .stale,
          thenRefresh: state == .stale || state == .refreshDue)
      case .failure(let error):
        // A layer failed the lookup (`.propagate`): a stale entry found above it still serves.
        fail(item, with: error, fallback: lookup.fallback, startedAt: startedAt)
      }
    }
    guard !missing.isEmpty else { return }
    await loadBatch(missing, from: origin, fallbacks: fallbacks, startedAt: startedAt)
  }
}
