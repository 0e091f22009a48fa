public import Synchronization  // Atomic, used by inlinable code

// The life of a load: a request joins the load of its key or starts one; the load table starts
// its task, which looks the key up in the layers below, then asks the origin, stores what it
// found or loaded through the chain, and answers the waiters.
extension LoadingCache {

  // The path of a request that misses is inlinable, like the hit path, so that it is specialized
  // for the caller's key and value types: unspecialized generic code costs metadata lookups and
  // value-witness calls per request, which dominate when thousands of requests join one load.
  // The work done once per load (`startLoad`, `run`) stays out of line.

  /// Joins the load of `key` in flight or starts one, and waits for it, within the cache's
  /// load timeouts.
  @inlinable
  nonisolated(nonsending) func load(_ key: Key) async throws -> Value {
    try checkOpen("value(for:)")
    if hasLoadTimeouts { return try await load(key, timeouts: configuration.loadTimeouts) }
    let waiter = nextWaiterID.wrappingAdd(1, ordering: .relaxed).newValue
    return try await wait(escalating: key, as: waiter)
  }

  /// Waits for the load of `key` as `waiter`; a request escalated while it waits raises its
  /// load's priority too.
  /// `joined`, if given, is called once the request has joined its load (or failed to).
  @inlinable
  nonisolated(nonsending) func wait(
    escalating key: Key, as waiter: UInt64, joined: (@Sendable () -> Void)? = nil
  ) async throws -> Value {
    if #available(macOS 26.0, iOS 26.0, tvOS 26.0, watchOS 26.0, visionOS 26.0, *) {
      return try await withTaskPriorityEscalationHandler {
        try await self.wait(for: key, as: waiter, joined: joined)
      } onPriorityEscalated: { _, newPriority in
        if let task = self.loadTable.withLock({ $0.escalate(waiter: waiter, key: key, to: newPriority) }) {
          escalate(task, to: newPriority)
        }
      }
    } else {
      return try await wait(for: key, as: waiter, joined: joined)
    }
  }

  /// Joins the load of `key` or starts one, and waits for it within `timeouts` (see
  /// ``LoadTimeouts`` and ``withinLoadTimeouts(_:soft:hard:wait:)``).
  @usableFromInline
  nonisolated(nonsending) func load(_ key: Key, timeouts: LoadTimeouts) async throws -> Value {
    try checkOpen("value(for:)")
    let waiter = nextWaiterID.wrappingAdd(1, ordering: .relaxed).newValue
    guard timeouts.isEnabled else { return try await wait(escalating: key, as: waiter) }
    return try await withinLoadTimeouts(
      timeouts,
      soft: { self.softTimeOut(waiter, key: key, after: $0) },
      hard: { self.hardTimeOut(waiter, key: key, after: $0) },
      wait: { joined in try await self.wait(escalating: key, as: waiter, joined: joined) })
  }

  /// Runs `wait` (a request's wait for its load, or a bulk request's for its keys) with the
  /// deadlines of `timeouts` beside it, counted from now: at the soft deadline `soft` runs, then
  /// at the hard one `hard`, each acting on the waiter through the load table as a cancellation
  /// does. The wait and the deadlines are child tasks of the request, so its cancellation reaches
  /// them all. The first deadline is slept for only once `wait` has joined its loads (it calls
  /// `joined`), so that a deadline always finds the waiter, whichever child runs first. Returns
  /// or throws what `wait` does; the deadlines end with it.
  func withinLoadTimeouts<Success: Sendable>(
    _ timeouts: LoadTimeouts,
    soft: @escaping @Sendable (Duration) -> Void,
    hard: @escaping @Sendable (Duration) -> Void,
    wait: @escaping @Sendable (_ joined: @escaping @Sendable () -> Void) async throws -> Success
  ) async throws -> Success {
    let clock = configuration.clock
    let start = clock.now
    let (joined, join) = AsyncStream<Never>.makeStream()
    return try await withThrowingTaskGroup(of: Success?.self) { group in
      group.addTask { try await wait { join.finish() } }
      group.addTask {
        for await _ in joined {}
        // A cancelled sleep (the wait ended, or the request was cancelled) ends the deadlines
        // quietly: only the wait says how the request ends.
        if let timeout = timeouts.soft {
          guard (try? await clock.sleep(until: start.advanced(by: timeout), tolerance: nil)) != nil else { return nil }
          soft(timeout)
        }
        if let timeout = timeouts.hard {
          guard (try? await clock.sleep(until: start.advanced(by: timeout), tolerance: nil)) != nil else { return nil }
          hard(timeout)
        }
        return nil
      }
      // The wait's error (the load's, a hard timeout's, a cancellation) ends the group.
      while let outcome = try await group.next() {
        guard let value = outcome else { continue }
        group.cancelAll()
        return value
      }
      // Unreachable: the wait ends with a value or an error.
      throw CancellationError()
    }
  }

  /// The soft timeout of `waiter` (a request for `key`, or a bulk request) passed: it gets the stale value its
  /// load found, if that may still be served, and leaves the load to go on; otherwise it gets
  /// one as soon as the load finds it (``offerStale(_:for:)``).
  func softTimeOut(_ waiter: UInt64, key: Key, after timeout: Duration) {
    let now = configuration.clock.now
    let outcome = loadTable.withLock { state in
      state.softTimeOut(waiter: waiter, key: key, after: timeout) { isServable($0.entry, for: key, at: now) }
    }
    guard case .served(let continuation, let stale) = outcome else { return }
    answerAtSoftTimeout([(continuation, timeout)], with: stale, key: key)
  }

  /// Answers requests past their soft timeout with `stale`, the load's stale value.
  func answerAtSoftTimeout(
    _ waiters: [(LoadWaiter<Key, Value>, timeout: Duration)], with stale: Fallback, key: Key
  ) {
    for (waiter, timeout) in waiters {
      logSoftTimeout(key, after: timeout)
      if eventHub.isObserved { eventHub.emit(.softTimeout(key: key, timeout: timeout)) }
      waiter.resume(value: .success(stale.entry.value), source: .success(.layer(stale.tier)), key: key)
    }
  }

  /// The hard timeout of `waiter` (a request for `key`, or a bulk request) passed: it fails with
  /// ``AsyncCacheError/Code/timedOut``, and leaves its load as a cancelled request would.
  func hardTimeOut(_ waiter: UInt64, key: Key, after timeout: Duration) {
    let (continuation, abandoned) = loadTable.withLock { state in
      let left = state.timeOut(waiter: waiter, key: key)
      if let token = left.abandoned?.token { chain.overtake(token) }
      return left
    }
    guard let continuation else { return }
    logHardTimeout(key, after: timeout)
    if eventHub.isObserved { eventHub.emit(.hardTimeout(key: key, timeout: timeout)) }
    let error = AsyncCacheError.timedOut(key, after: timeout)
    // Delivered as the load's outcome, so that a bulk request's collector gets it too.
    continuation.resume(value: .failure(error), source: .failure(error), key: key)
    abandoned?.task?.cancel()
  }

  /// Offers `stale`, an entry load `id` of `key` passed over, to the requests of the load whose
  /// soft timeout passes (or passed) before the load ends.
  func offerStale(_ stale: Fallback, for id: UInt64, key: Key) {
    let now = configuration.clock.now
    guard isServable(stale.entry, for: key, at: now) else { return }
    let waiting = loadTable.withLock { $0.offerStale(stale, for: id) }
    if !waiting.isEmpty { answerAtSoftTimeout(waiting, with: stale, key: key) }
  }

  @inlinable
  nonisolated(nonsending) func wait(
    for key: Key, as waiter: UInt64, joined: (@Sendable () -> Void)? = nil
  ) async throws -> Value {
    // The loads whose body makes this request, if any: it must not wait for one of them.
    let dependents = LoadDependencies.loadsOfCurrentTask
    var dependencies: [LoadIdentity] = []
    defer { for target in dependencies { LoadDependencies.shared.remove(dependents, waitingFor: target) } }
    return try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Value, any Error>) in
        // Decided under the lock: the cancellation flag is set before `onCancel` runs, so
        // either this sees it and never joins, or `onCancel` finds the waiter.
        let escalation = loadTable.withLock {
          state -> (failure: (any Error)?, task: Task<Void, Never>?, priority: TaskPriority) in
          // Read under the lock: an escalation after this finds the waiter registered.
          let priority = Task.currentPriority
          if Task.isCancelled { return (CancellationError(), nil, priority) }
          let outcome = join(
            key, waiter: waiter, continuation: .request(continuation), kind: .request, priority: priority,
            dependents: dependents, dependencies: &dependencies, in: &state)
          switch outcome {
          case .failed(let error): return (error, nil, priority)
          case .waiting(let task): return (nil, task, priority)
          }
        } first: { escalation in
          // Outside the lock (an escalation runs the task's handlers, which may lock the table),
          // before the table's watchers hear of the join.
          if let task = escalation.task { escalate(task, to: escalation.priority) }
        }
        joined?()
        if let failure = escalation.failure { continuation.resume(throwing: failure) }
      }
    } onCancel: {
      let (continuation, abandoned) = loadTable.withLock { leave(waiter, key: key, in: &$0) }
      continuation?.resume(throwing: CancellationError())
      abandoned?.task?.cancel()
    }
  }

  /// Starts the tasks of `loads`, registered in the table by one change: one task per load, or,
  /// with a ``batchOrigin``, one per batch of the loads a bulk request started.
  @usableFromInline
  func launch(_ loads: [LoadTable<Key, Value>.Machine.StartedLoad]) -> [LoadLaunch] {
    var launches: [LoadLaunch] = []
    var batchable: [LoadTable<Key, Value>.Machine.StartedLoad] = []
    for load in loads {
      if load.batchable, batchOrigin != nil {
        batchable.append(load)
      } else {
        let task = startLoad(load.id, key: load.key, token: load.token!, priority: load.priority)
        launches.append(LoadLaunch(ids: [load.id], task: task, priority: load.priority, isBatch: false))
      }
    }
    if let batchOrigin, !batchable.isEmpty {
      let size = Swift.max(batchOrigin.maximumBatchSize, 1)
      for start in stride(from: 0, to: batchable.count, by: size) {
        let batch = Array(batchable[start..<Swift.min(start + size, batchable.count)])
        launches.append(startBatch(batch, origin: batchOrigin))
      }
    }
    return launches
  }

  /// What joining the load of a key came to.
  @usableFromInline
  enum JoinOutcome {
    /// The request fails at once: with an error negative caching remembers, or because it
    /// would wait for its own load (``AsyncCacheError/Code/recursiveLoad``).
    case failed(any Error)
    /// The request waits for a load; escalate this task (the load's) when given.
    case waiting(escalate: Task<Void, Never>?)
  }

  /// Joins `waiter` to the load of `key`, or starts one (which the load table then runs): the
  /// one way in for a request, each key of a bulk request and a prefetch. Call under the load
  /// table's lock.
  ///
  /// A key whose error negative caching remembers fails without a load. With `dependents` (the
  /// loads whose body makes this request), the load the request now waits for is recorded in
  /// `dependencies`, to forget once the request ends, unless it waits for one of them: then
  /// the request fails with ``AsyncCacheError/Code/recursiveLoad``, recording nothing.
  @inlinable
  func join(
    _ key: Key,
    waiter: UInt64,
    continuation: LoadWaiter<Key, Value>,
    kind: LoadTable<Key, Value>.Machine.JoinKind,
    priority: TaskPriority,
    skipsTopLayer: Bool = false,
    dependents: [LoadIdentity],
    dependencies: inout [LoadIdentity],
    in state: inout LoadTable<Key, Value>.Machine
  ) -> JoinOutcome {
    // Checked under the table's lock, where close() sets it: a request either joins before the
    // close, which then waits for its load, or fails.
    if closedFlag.load(ordering: .relaxed) { return .failed(closedError(joining: kind)) }
    if !state.negatives.isEmpty, let error = rememberedError(for: key, in: &state) { return .failed(error) }
    if !dependents.isEmpty {
      switch dependOnLoad(state.joinable[key], of: key, from: dependents) {
      case .success(let target): if let target { dependencies.append(target) }
      case .failure(let error): return .failed(error)
      }
    }
    switch state.join(
      key, waiter: waiter, continuation: continuation, priority: priority, kind: kind, skipsTopLayer: skipsTopLayer)
    {
    case .joined(let task):
      return .waiting(escalate: task)
    case .started(let id):
      if !dependents.isEmpty { dependencies.append(dependOnStartedLoad(id, from: dependents)) }
      return .waiting(escalate: nil)
    }
  }

  /// Begins the chain read of a load of `key` (see ``LoadRunner/beginRead(_:)``).
  @usableFromInline
  func beginRead(_ key: Key) -> ReadToken<Key> {
    chain.beginRead(key)
  }

  /// Starts load `id` of `key`, whose read of the chain is `token`, in a task of its own, which
  /// tells the table when it ends.
  ///
  /// An unstructured task: it is shared, so it must not be cancelled with the request that
  /// started it, but it inherits that request's task-local values (tracing context, the current
  /// test), as single-flight loads conventionally run in the first caller's context.
  ///
  /// The body runs as the load's (see ``LoadDependencies``), so that a request it makes for a key
  /// whose load waits for this one fails instead of waiting for ever.
  @usableFromInline
  func startLoad(_ id: UInt64, key: Key, token: ReadToken<Key>, priority: TaskPriority) -> Task<Void, Never> {
    let load = LoadIdentity(table: ObjectIdentifier(loadTable), load: id)
    return Task(priority: priority) {
      await LoadDependencies.$current.withValue(.load(load)) { await self.run(id, key: key, token: token) }
      self.loadTable.withLock { $0.taskEnded([id]) }
    }
  }

  /// Records that `dependents` (the loads whose body makes a request for `key`) wait for `id`,
  /// the joinable load of `key`, if there is one, and returns it; fails with
  /// ``AsyncCacheError/Code/recursiveLoad`` when that load waits for one of them (or is one),
  /// recording nothing. `nil` when no load of `key` is joinable: the request starts one, which
  /// ``dependOnStartedLoad(_:from:)`` records. Called under the load table's lock, on misses made
  /// inside a load only.
  @usableFromInline
  func dependOnLoad(
    _ id: UInt64?, of key: Key, from dependents: [LoadIdentity]
  ) -> Result<LoadIdentity?, AsyncCacheError> {
    guard let id else { return .success(nil) }
    let target = LoadIdentity(table: ObjectIdentifier(loadTable), load: id)
    guard LoadDependencies.shared.add(dependents, waitingFor: target, checkingCycles: true) else {
      return .failure(.recursiveLoad(key))
    }
    return .success(target)
  }

  /// Records that `dependents` wait for load `id`, just started by their request: a new load
  /// waits for nothing yet, so this closes no cycle.
  @usableFromInline
  func dependOnStartedLoad(_ id: UInt64, from dependents: [LoadIdentity]) -> LoadIdentity {
    let target = LoadIdentity(table: ObjectIdentifier(loadTable), load: id)
    _ = LoadDependencies.shared.add(dependents, waitingFor: target, checkingCycles: false)
    return target
  }

  /// Removes `waiter` (a request, a key of a bulk request, or a prefetch of `key`) from its
  /// load; returns its continuation, if it was still waiting, and the load if it was its last
  /// waiter. The read of an abandoned load is marked overtaken here, under the table's lock, so
  /// that its late value is not stored: no request can start the fresh load that may follow
  /// before it is marked. Call under the load table's lock.
  @usableFromInline
  func leave(
    _ waiter: UInt64, key: Key, in state: inout LoadTable<Key, Value>.Machine
  ) -> (continuation: LoadWaiter<Key, Value>?, abandoned: LoadTable<Key, Value>.Machine.Abandoned?) {
    let left = state.cancel(waiter: waiter, key: key)
    if let token = left.abandoned?.token { chain.overtake(token) }
    return left
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
    let isRefresh = checksFreshness && loadTable.withLock { $0.isRefresh(id) }
    if eventHub.isObserved { eventHub.emit(isRefresh ? .refreshStarted(key: key) : .loadStarted(key: key)) }
    var result: Result<(Value, LoadSource), any Error>
    var refreshAfterwards = false
    var foundStale = false
    var fallback: Fallback?
    var attempts = 0
    do {
      if let (entry, tier, state) = try await locateForLoad(key, load: id, isRefresh: isRefresh, fallback: &fallback) {
        refreshAfterwards = state == .stale || state == .refreshDue
        foundStale = state == .stale
        // A prefetch into the lower layers leaves the top layer alone.
        let top = tier > 0 && skipsTopLayer(id) ? 1 : 0
        let (entry, layers) = storing(entry, state: state, for: key, foundIn: tier, top: top)
        await chain.endRead(token, copying: entry, into: layers)
        result = .success((entry.value, .layer(tier)))
      } else {
        result = .success(
          try await loadFromOrigin(
            key, id: id, read: token, supersedes: fallback?.entry.expiresAt, attempts: &attempts))
      }
    } catch {
      // Nothing was stored: the read ends here.
      chain.endRead(token)
      result = .failure(error)
    }
    var staleAfter: (any Error)?
    if case .failure(let error) = result, let stale = staleValue(after: error, fallback: fallback, key: key) {
      result = .success(stale)
      staleAfter = error
    }
    finish(
      id, key: key, startedAt: startedAt, with: result, attempts: attempts, servedStale: foundStale,
      staleAfter: staleAfter, thenRefresh: refreshAfterwards)
  }

  /// Removes load `id` of `key` from the table and answers its waiters; counts its requests as
  /// hits or misses and records its duration, unless it was abandoned.
  ///
  /// - Parameters:
  ///   - startedAt: When the load started, on the cache's clock.
  ///   - attempts: The origin calls the load made.
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
    attempts: Int,
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
    let reports = configuration.onLoadEnded
    let (waiters, isRefresh, abandoned) = loadTable.withLock { state in
      // An abandoned load is out of the table: its requests left, and it is not counted. It
      // ended as cancelled, whatever it brought.
      guard let load = state.loads[id] else {
        if eventHub.isObserved {
          eventHub.emit(.loadFailed(key: key, error: CancellationError(), attempts: attempts, duration: duration))
        }
        return ([LoadWaiter<Key, Value>](), false, true)
      }
      let isRefresh = load.isRefresh
      state.counters.loadTime.record(duration)
      // Reported before the load leaves the table, so before anyone can see it gone (the event
      // locks are leaves).
      if eventHub.isObserved {
        reportEnd(of: key, with: result, staleAfter: staleAfter, attempts: attempts, duration: duration)
      }
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
      return (waiters, isRefresh, false)
    }
    // Outside the table's lock, before the requests resume: the observer may be slow, and a
    // request that got its value finds its load reported.
    if let reports {
      let outcome: LoadReport<Key>.Outcome =
        switch (abandoned, result, staleAfter) {
        case (true, _, _): .cancelled
        case (false, .success, let error?): .servedStale(after: error)
        case (false, .success((_, let source)), nil): .loaded(from: source)
        case (false, .failure(let error), _): error is CancellationError ? .cancelled : .failed(error)
        }
      reports(LoadReport(key: key, outcome: outcome, duration: duration, attempts: attempts, isRefresh: isRefresh))
    }
    let value = result.map { $0.0 }
    let source = result.map { $0.1 }
    for waiter in waiters { waiter.resume(value: value, source: source, key: key) }
  }

  /// Reports the end of a load of `key`: with a value, an error, or an error and the stale value
  /// served instead.
  private func reportEnd(
    of key: Key, with result: Result<(Value, LoadSource), any Error>, staleAfter: (any Error)?, attempts: Int,
    duration: Duration
  ) {
    switch (result, staleAfter) {
    case (.success, let error?):
      eventHub.emit(.loadFailed(key: key, error: error, attempts: attempts, duration: duration))
      eventHub.emit(.servedStale(key: key, error: error))
    case (.success((_, let source)), nil):
      eventHub.emit(.loadFinished(key: key, source: source, duration: duration))
    case (.failure(let error), _):
      eventHub.emit(.loadFailed(key: key, error: error, attempts: attempts, duration: duration))
    }
  }

  /// Whether load `id` stores below the top layer only (read when it decides where to store).
  func skipsTopLayer(_ id: UInt64) -> Bool {
    loadTable.withLock { $0.loads[id]?.skipsTopLayer ?? false }
  }

  /// Waits, if loads `ids` (one load, or a batch's) are background work, until no urgent load
  /// is in flight or one of them is promoted.
  ///
  /// - Throws: `CancellationError` when the task is cancelled, or none of the loads is wanted
  ///   any more (they were abandoned, and the task is about to be cancelled).
  func waitForUrgentWork(loads ids: [UInt64]) async throws {
    try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
        let decision = loadTable.withLock {
          state -> LoadTable<Key, Value>.Machine.GateDecision in
          Task.isCancelled ? .abandoned : state.enterGate(ids, continuation: continuation)
        }
        switch decision {
        case .proceed: continuation.resume()
        case .abandoned: continuation.resume(throwing: CancellationError())
        case .held: break
        }
      }
    } onCancel: {
      let continuation = loadTable.withLock { state -> UnsafeContinuation<Void, any Error>? in
        guard let gate = ids.first(where: { state.loads[$0]?.gate != nil }).flatMap({ state.loads[$0]?.gate })
        else { return nil }
        return state.leaveGate(gate)
      }
      continuation?.resume(throwing: CancellationError())
    }
  }

  /// Asks the origin, again after transient failures, per the retry policy. Runs inside the
  /// key's one load, so all its waiters share the loop.
  func fetchRetrying(_ key: Key, load id: UInt64, attempts: inout Int) async throws -> Value {
    var calls = 0
    defer { attempts = calls }
    return try await retrying(keys: [key]) {
      try await waitForUrgentWork(loads: [id])
      calls += 1
      return try await origin.fetch(key)
    }
  }

  /// Runs `attempt` for the loads of `keys` (evaluated after each failure: a batch's keys still
  /// wanted), again after transient failures, per the retry policy, and reports the retries.
  func retrying<Success>(
    keys: @autoclosure () -> [Key], _ attempt: () async throws -> Success
  ) async throws -> Success {
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
          throw error
        }
        logRetry(of: keys(), attempt: attempts, error: error, delay: delay)
        loadTable.withLock { $0.counters.retries += 1 }
        for key in keys() {
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
