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
      if let value = cachedValue(for: key) { values[key] = value } else { missing.append(key) }
    }
    return missing
  }

  /// Waits for `keys` (distinct, none in the top layer) as one waiter of each key's load,
  /// starting the loads that are not in flight; returns what was collected. When `failsFast`,
  /// it returns at the first failure, withdrawn from the other loads.
  private func collect(_ keys: [Key], failsFast: Bool) async -> (values: [Key: Value], failures: [Key: any Error]) {
    let collector = BulkCollector<Key, Value>(keys: keys, failsFast: failsFast)
    let waiter = nextWaiterID.wrappingAdd(1, ordering: .relaxed).newValue
    await withTaskCancellationHandler {
      await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
        collector.wait(with: continuation)
        let priority = Task.currentPriority
        let escalations = inFlight.withLock { state -> [Task<Void, Never>] in
          // Decided under the lock, as for a single request: either this sees the
          // cancellation, or `onCancel` finds the waiters registered.
          if Task.isCancelled { return [] }
          var escalations: [Task<Void, Never>] = []
          var started: [(id: UInt64, key: Key)] = []
          for key in keys {
            switch state.join(key, waiter: waiter, continuation: .bulk(collector), priority: priority) {
            case .joined(let task): if let task { escalations.append(task) }
            case .started(let id): started.append((id, key))
            }
          }
          startLoads(started, priority: priority, in: &state)
          return escalations
        }
        for task in escalations { Self.escalate(task, to: priority) }
      }
    } onCancel: {
      withdraw(waiter, from: keys)
      collector.failOutstanding(with: CancellationError())
    }
    let (outstanding, values, failures) = collector.snapshot
    // Failed fast: the other keys are no longer wanted by this request.
    if !outstanding.isEmpty { withdraw(waiter, from: Array(outstanding)) }
    return (values, failures)
  }

  /// Starts the loads `started` (new records in `state`): one batch task per batch with a
  /// batch origin, one task per key without.
  private func startLoads(
    _ started: [(id: UInt64, key: Key)],
    priority: TaskPriority,
    in state: inout InFlightLoadsStateMachine<Key, LoadWaiter<Key, Value>>
  ) {
    guard let batchOrigin else {
      for (id, key) in started {
        let (task, token) = startLoad(id, key: key, priority: priority)
        state.attach(task, token: token, to: id)
      }
      return
    }
    let size = Swift.max(batchOrigin.maximumBatchSize, 1)
    for start in stride(from: 0, to: started.count, by: size) {
      let items = started[start..<Swift.min(start + size, started.count)].map { item in
        BatchItem(id: item.id, key: item.key, token: chain.coordinator.beginRead(item.key))
      }
      let batch = state.startBatch(items.map(\.id))
      let task = Task(priority: priority) { await self.runBatch(items, origin: batchOrigin) }
      state.attachBatch(batch, task: task, tokens: items.map { ($0.id, $0.token) })
    }
  }

  /// Removes `waiter` from the loads of `keys`; cancels the loads (or batches) it was the last
  /// waiter of, and marks their reads overtaken so that a late value is not stored.
  private func withdraw(_ waiter: UInt64, from keys: [Key]) {
    let abandoned = inFlight.withLock { state -> [Task<Void, Never>] in
      var tasks: [Task<Void, Never>] = []
      for key in keys {
        guard let load = state.cancel(waiter: waiter, key: key).abandoned else { continue }
        if let token = load.token { overtake(token) }
        if let task = load.task { tasks.append(task) }
      }
      return tasks
    }
    for task in abandoned { task.cancel() }
  }

  /// The body of a batch: each key's lower layers, then one batch origin call for the keys
  /// still missing; answers each key's load as soon as its outcome is known.
  private func runBatch(_ items: [BatchItem<Key>], origin: any AsyncBatchFetcher<Key, Value>) async {
    var missing: [BatchItem<Key>] = []
    for item in items {
      // A load abandoned meanwhile is not looked up, nor fetched.
      guard inFlight.withLock({ $0.isLive(item.id) }) else {
        chain.coordinator.endRead(item.token)
        continue
      }
      do {
        guard let (entry, tier) = try await chain.locate(item.key) else {
          missing.append(item)
          continue
        }
        if tier > 0 { await chain.backfill(entry, for: item.key, into: 0..<tier, token: item.token) }
        chain.coordinator.endRead(item.token)
        finish(item.id, key: item.key, with: .success((entry.value, .layer(tier))))
      } catch {
        chain.coordinator.endRead(item.token)
        finish(item.id, key: item.key, with: .failure(error))
      }
    }
    let wanted = inFlight.withLock { state in missing.filter { state.isLive($0.id) } }
    for item in missing where !wanted.contains(where: { $0.id == item.id }) {
      chain.coordinator.endRead(item.token)
    }
    guard !wanted.isEmpty else { return }
    let keys = wanted.map(\.key)
    do {
      let values = try await retrying(keys) { try await origin.fetch(keys) }
      for item in wanted {
        guard let value = values[item.key] else {
          chain.coordinator.endRead(item.token)
          let error = AsyncCacheError(
            code: .notFound, message: "the batch origin returned no value for key \(item.key)")
          finish(item.id, key: item.key, with: .failure(error))
          continue
        }
        let entry = CacheEntry(value, expiresAt: expiry(timeToLive: nil))
        _ = await chain.commit(entry, for: item.key, to: chain.tiers.indices, token: item.token, operation: .insert)
        chain.coordinator.endRead(item.token)
        finish(item.id, key: item.key, with: .success((value, .origin)))
      }
    } catch {
      for item in wanted {
        chain.coordinator.endRead(item.token)
        finish(item.id, key: item.key, with: .failure(error))
      }
    }
  }
}

/// One load of a batch: its identifier in the in-flight table, its key, and its read token.
struct BatchItem<Key: Hashable & Sendable>: Sendable {
  let id: UInt64
  let key: Key
  let token: ReadToken<Key>
}
