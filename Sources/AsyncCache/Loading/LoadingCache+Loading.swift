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
        self.loadTable.escalate(waiter, keys: CollectionOfOne(key), to: newPriority)
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
    // Served only while it may be: within the cache's grace and the entry's own limits.
    guard
      let (continuation, stale) = loadTable.softTimeOut(
        waiter, key: key, after: timeout, servable: { isServable($0.entry, at: now) })
    else { return }
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
    guard let continuation = loadTable.leave(waiter, key: key, because: .timedOut).continuation else { return }
    logHardTimeout(key, after: timeout)
    if eventHub.isObserved { eventHub.emit(.hardTimeout(key: key, timeout: timeout)) }
    let error = AsyncCacheError.timedOut(key, after: timeout)
    // Delivered as the load's outcome, so that a bulk request's collector gets it too.
    continuation.resume(value: .failure(error), source: .failure(error), key: key)
  }

  /// Offers `stale`, an entry load `id` of `key` passed over, to the requests of the load whose
  /// soft timeout passes (or passed) before the load ends.
  func offerStale(_ stale: Fallback, for id: UInt64, key: Key) {
    let now = configuration.clock.now
    guard isServable(stale.entry, at: now) else { return }
    let waiting = loadTable.offerStale(stale, for: id)
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
    return try await waitInTable { continuation in
      let refusal = loadTable.join(
        key, waiter: waiter, as: .request(continuation), negativeNow: negativeNow,
        dependents: dependents, dependencies: &dependencies)
      joined?()
      return refusal.map { failure($0, key: key, joining: .request) }
    } leave: {
      loadTable.leave(waiter, key: key, because: .cancelled).continuation?.resume(throwing: CancellationError())
    }
  }

  /// Waits as a waiter of the load table: the one way a request, a bulk request and a prefetch
  /// wait for their loads. `join` registers the waiter with the continuation and returns the
  /// error to fail with at once, if it was refused (the table reads the cancellation flag under
  /// its lock, where the waiter joins: either it sees the flag, or `leave` finds the waiter);
  /// a cancellation runs `leave`, which answers the continuation if it still waits.
  @inlinable
  nonisolated(nonsending) func waitInTable<Success>(
    join: (UnsafeContinuation<Success, any Error>) -> (any Error)?, leave: @Sendable () -> Void
  ) async throws -> Success {
    try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { continuation in
        if let error = join(continuation) { continuation.resume(throwing: error) }
      }
    } onCancel: {
      leave()
    }
  }

  /// Starts the tasks of `loads`, registered in the table by one change: one task per load, or,
  /// with a ``batchOrigin``, one per batch of the loads a bulk request started.
  @usableFromInline
  func launch(_ loads: [LoadTable<Key, Value>.StartedLoad]) -> [LoadLaunch] {
    var launches: [LoadLaunch] = []
    var batchable: [LoadTable<Key, Value>.StartedLoad] = []
    for load in loads {
      if load.batchable, batchOrigin != nil {
        batchable.append(load)
      } else {
        let task = startLoad(load)
        launches.append(LoadLaunch(ids: [load.id], task: task, isBatch: false))
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

  /// The error a request refused by the load table fails with (see ``LoadTable/Refusal``);
  /// reports a negative caching hit.
  @usableFromInline
  func failure(
    _ refusal: LoadTable<Key, Value>.Refusal, key: Key, joining kind: LoadTable<Key, Value>.JoinKind
  ) -> any Error {
    switch refusal {
    case .cancelled:
      return CancellationError()
    case .closed:
      return closedError(joining: kind)
    case .remembered(let error):
      if eventHub.isObserved { eventHub.emit(.negativeHit(key: key, error: error)) }
      return error
    case .recursive:
      return AsyncCacheError.recursiveLoad(key)
    }
  }

  /// The time negative caching's errors are read at, when the cache remembers errors.
  @usableFromInline
  var negativeNow: Int64? {
    configuration.negativeCaching == nil ? nil : configuration.clock.now.nanosecondsSince1970
  }

  /// Begins the chain read of a load of `key` (see ``LoadRunner/beginRead(_:)``).
  @usableFromInline
  func beginRead(_ key: Key) -> ReadToken<Key> {
    chain.beginRead(key)
  }

  /// Overtakes the read of an abandoned load (see ``LoadRunner/overtake(_:)``).
  @usableFromInline
  func overtake(_ token: ReadToken<Key>) {
    chain.overtake(token)
  }

  /// Starts `load`, just registered with its read of the chain, in a task of its own, which
  /// tells the table when it ends.
  ///
  /// An unstructured task: it is shared, so it must not be cancelled with the request that
  /// started it, but it inherits that request's task-local values (tracing context, the current
  /// test), as single-flight loads conventionally run in the first caller's context.
  ///
  /// The body runs as the load's (see ``LoadDependencies``), so that a request it makes for a key
  /// whose load waits for this one fails instead of waiting for ever.
  @usableFromInline
  func startLoad(_ load: LoadTable<Key, Value>.StartedLoad) -> Task<Void, Never> {
    let identity = LoadIdentity(table: ObjectIdentifier(loadTable), load: load.id)
    return Task(priority: load.priority) {
      await LoadDependencies.$current.withValue(.load(identity)) {
        guard let tracing = self.tracing else { return await self.run(load, span: nil) }
        await tracing.span("cache.load") { span in await self.run(load, span: span) }
      }
      self.loadTable.taskEnded([load.id])
    }
  }

  /// The body of `load`: the layers below, then the origin; then answers the waiters.
  ///
  /// With freshness rules (<doc:FreshnessAndStatistics>), a stale entry a layer returns is
  /// served at once while stale-while-revalidate allows it, and refreshed afterwards; otherwise
  /// the lookup goes on to the layers below and the origin, keeping the stale entry to serve if
  /// they fail (stale-if-error). A refresh serves nothing stale at once: it is the one that
  /// brings the fresh value.
  private func run(_ load: LoadTable<Key, Value>.StartedLoad, span: TracedSpan?) async {
    let (id, key) = (load.id, load.key)
    let startedAt = configuration.clock.now
    logLoadStarted(key)
    let isRefresh = checksFreshness && load.isRefresh
    span?.set("cache.key", String(describing: key))
    if eventHub.isObserved { eventHub.emit(isRefresh ? .refreshStarted(key: key) : .loadStarted(key: key)) }
    var result: Result<(Value, LoadSource), any Error>
    var found: FreshnessRules.State?
    var fallback: Fallback?
    var attempts = 0
    do {
      result = .success(
        try await readThrough(
          load, read: ChainRead(resuming: load.token!, of: chain), isRefresh: isRefresh, found: &found,
          fallback: &fallback, attempts: &attempts))
    } catch {
      result = .failure(error)
    }
    let refreshAfterwards = found == .stale || found == .refreshDue
    var staleAfter: (any Error)?
    if case .failure(let error) = result, let stale = staleValue(after: error, fallback: fallback, key: key) {
      result = .success(stale)
      staleAfter = error
    }
    finish(
      id, key: key, startedAt: startedAt, with: result, attempts: attempts, servedStale: found == .stale,
      staleAfter: staleAfter, thenRefresh: refreshAfterwards, span: span)
  }

  /// The read-through of `load`: the layers, then the origin. `read` ends here, whatever
  /// happens (nothing is stored when it throws).
  ///
  /// - Parameters:
  ///   - found: The state of the entry a layer answered with, if one did.
  ///   - fallback: A stale entry the lookup passed over.
  ///   - attempts: The origin calls made.
  private func readThrough(
    _ load: LoadTable<Key, Value>.StartedLoad, read: consuming ChainRead<Key, Value>, isRefresh: Bool,
    found: inout FreshnessRules.State?, fallback: inout Fallback?, attempts: inout Int
  ) async throws -> (Value, LoadSource) {
    guard
      let (entry, tier, state) = try await locateForLoad(
        load.key, load: load.id, isRefresh: isRefresh, fallback: &fallback)
    else {
      return try await loadFromOrigin(load, read: read, replacing: fallback?.entry, attempts: &attempts)
    }
    found = state
    // A prefetch into the lower layers leaves the top layer alone.
    let skippingTop = tier > 0 && loadTable.skipsTopLayer(load)
    let answer = await copy(entry, in: state, foundIn: tier, skippingTop: skippingTop, ending: read)
    return (answer.value, .layer(tier))
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
  ///   - span: The load's span, told how it ended.
  func finish(
    _ id: UInt64,
    key: Key,
    startedAt: CacheInstant,
    with result: Result<(Value, LoadSource), any Error>,
    attempts: Int,
    servedStale: Bool = false,
    staleAfter: (any Error)? = nil,
    thenRefresh: Bool = false,
    span: TracedSpan? = nil
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
    let answeringTier: Int? = if case .success((_, .layer(let tier))) = result { tier } else { nil }
    let revalidated: Bool = if case .success((_, .revalidated)) = result, staleAfter == nil { true } else { false }
    let reports = configuration.onLoadEnded
    let finished = loadTable.finish(
      id, key: key,
      .init(
        failed: failed, duration: duration, servedStale: servedStale, servedStaleAfterError: staleAfter != nil,
        answeringTier: answeringTier, askedOrigin: attempts > 0, revalidated: revalidated, negative: negative,
        thenRefresh: thenRefresh))
    // An abandoned load is out of the table: its requests left, and it is not counted. It ended
    // as cancelled, whatever it brought.
    let abandoned = finished == nil
    if abandoned || result.isCancellation { loadsEndedCancelled.add(1, ordering: .relaxed) }
    // Reported before the requests resume: a request that got its value finds its load reported.
    if eventHub.isObserved {
      if abandoned {
        eventHub.emit(.loadFailed(key: key, error: CancellationError(), attempts: attempts, duration: duration))
      } else {
        reportEnd(of: key, with: result, staleAfter: staleAfter, attempts: attempts, duration: duration)
      }
    }
    if reports != nil || span != nil {
      let report = LoadReport(
        key: key, outcome: outcome(abandoned: abandoned, result, staleAfter: staleAfter), duration: duration,
        attempts: attempts, isRefresh: finished?.isRefresh ?? false,
        sourceName: abandoned ? nil : sourceName(of: result))
      if let span { describe(report, in: span) }
      reports?(report)
    }
    guard let finished else { return }
    let value = result.map { $0.0 }
    let source = result.map { $0.1 }
    for waiter in finished.waiters { waiter.resume(value: value, source: source, key: key) }
  }

  /// How a load that ended with `result` (then served a stale value after `staleAfter`, if
  /// set) is reported; `abandoned` when its requests all left.
  private func outcome(
    abandoned: Bool, _ result: Result<(Value, LoadSource), any Error>, staleAfter: (any Error)?
  ) -> LoadReport<Key>.Outcome {
    switch (abandoned, result, staleAfter) {
    case (true, _, _): .cancelled
    case (false, .success, let error?): .servedStale(after: error)
    case (false, .success((_, let source)), nil): .loaded(from: source)
    case (false, .failure(let error), _): error is CancellationError ? .cancelled : .failed(error)
    }
  }

  /// The name of who answered a load that ended with `result`: a layer's name in the chain, or
  /// `origin`; `nil` when it brought no value.
  private func sourceName(of result: Result<(Value, LoadSource), any Error>) -> String? {
    switch result {
    case .success((_, .layer(let tier))): chain.tiers.indices.contains(tier) ? chain.tiers[tier].name : nil
    case .success((_, .origin)), .success((_, .revalidated)): "origin"
    case .failure: nil
    }
  }

  /// Tells the span of a load how it ended (see ``CacheTracer``).
  private func describe(_ report: LoadReport<Key>, in span: TracedSpan) {
    // Read at the end: a load may become a refresh while it runs.
    span.set("cache.refresh", report.isRefresh)
    span.set("cache.outcome", report.outcome.name)
    if let source = report.sourceName { span.set("cache.source", source) }
    span.set("cache.attempts", report.attempts)
    switch report.outcome {
    case .failed(let error), .servedStale(after: let error): span.record(error)
    case .loaded, .cancelled: break
    }
  }

  /// Calls the origin, attempt `attempt` of a load, in a span of its own when the cache has a
  /// tracer; `describing` sets the span's key attributes.
  func traceOrigin<Success>(
    attempt: Int, describing: (TracedSpan) -> Void, _ call: () async throws -> Success
  ) async throws -> Success {
    guard let tracing else { return try await call() }
    return try await tracing.span("cache.origin.fetch") { span in
      describing(span)
      span.set("cache.attempt", attempt)
      return try await call()
    }
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

  /// Asks the origin, again after transient failures, per the retry policy; an
  /// ``EntryFetcher`` with `current`, the entry the load replaces. Runs inside the key's one
  /// load, so all its waiters share the loop.
  func fetchRetrying(
    _ load: LoadTable<Key, Value>.StartedLoad, current: CacheEntry<Value>?, attempts: inout Int
  ) async throws -> FetchedEntry<Value> {
    var calls = 0
    defer { attempts = calls }
    let key = load.key
    return try await retrying(keys: [key]) {
      try await loadTable.passGate([load.id], urgentAt: load.urgentAt)
      calls += 1
      return try await traceOrigin(attempt: calls, describing: { $0.set("cache.key", String(describing: key)) }) {
        if let entryOrigin { return try await entryOrigin.fetchEntry(key, current: current) }
        return .value(try await origin.fetch(key))
      }
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
        loadTable.countRetry()
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

  /// The expiry of `value`, loaded for `key` now: its lifetime per the configuration (no longer
  /// than `origin`'s, when the origin gave one), shortened by jitter, then the grace.
  func loadedExpiry(for key: Key, value: Value, origin: Duration? = nil) -> CacheInstant? {
    let configured = lifetime(of: key, value)
    guard var lifetime = configured.map({ lifetime in origin.map { Swift.min($0, lifetime) } ?? lifetime }) ?? origin
    else { return nil }
    let jitter = configuration.timeToLiveJitter
    if jitter > 0 { lifetime = lifetime * (1 - jitter * configuration.randomUnit()) }
    return freshness.expiry(now: configuration.clock.now, lifetime: lifetime)
  }
}

extension Result where Failure == any Error {
  /// Whether it is a failure with `CancellationError`.
  fileprivate var isCancellation: Bool {
    if case .failure(let error) = self { error is CancellationError } else { false }
  }
}
