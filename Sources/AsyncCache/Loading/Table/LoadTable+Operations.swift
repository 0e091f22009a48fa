public import Synchronization  // Atomic, in inlinable code

// What a loading cache does to its load table, one named operation per change: each takes the
// lock once, asks the machine, counts, and returns what the caller must do (resume a waiter,
// emit an event); escalations, the dependency graph and the tasks to cancel are handled after
// the unlock, here.
extension LoadTable {
  @usableFromInline typealias Waiter = LoadWaiter<Key, Value>

  // MARK: Joining

  /// Why a waiter did not join a load; it was not registered (or left again), and must be
  /// answered by the caller.
  @usableFromInline
  enum Refusal {
    /// The calling task was cancelled (or the prefetch withdrawn) before it joined.
    case cancelled
    /// The cache is closed.
    case closed
    /// Negative caching remembers this error for the key (the caller reports the hit).
    case remembered(any Error)
    /// The load waits for one of the loads that make the request: waiting would never end.
    case recursive

    @usableFromInline
    var isCancellation: Bool {
      if case .cancelled = self { true } else { false }
    }
  }

  /// Joins `waiter` to the load of `key`, or starts one: the one way in for a request and a
  /// prefetch. Returns why it did not, if it did not.
  ///
  /// - Parameters:
  ///   - negativeNow: The time to read negative caching's errors at; `nil` when the cache
  ///     remembers none.
  ///   - dependents: The loads whose body makes this request: the load it waits for is
  ///     recorded in `dependencies` (to forget once the request ends), unless that load waits
  ///     for one of them: the request then leaves and is refused as ``Refusal/recursive``.
  ///   - isCancelled: Read under the lock, where the waiter joins: the cancellation flag is set
  ///     before a cancellation handler runs, so either this sees it, or the handler finds the
  ///     waiter.
  @inlinable
  func join(
    _ key: Key, waiter: UInt64, as continuation: Waiter, skipsTopLayer: Bool = false,
    negativeNow: Int64?, dependents: [LoadIdentity] = [], dependencies: inout [LoadIdentity],
    isCancelled: () -> Bool = { Task.isCancelled }
  ) -> Refusal? {
    let provisional = dependents.isEmpty ? nil : reserveLoads(1, for: dependents)[0]
    var priority = TaskPriority.medium
    let joined = update { state -> Joined in
      // Read under the lock: an escalation after this finds the waiter registered.
      priority = Task.currentPriority
      if isCancelled() { return .refused(.cancelled) }
      return Self.join(
        key, waiter: waiter, as: continuation, priority: priority, skipsTopLayer: skipsTopLayer,
        negativeNow: negativeNow, newID: provisional ?? reserveLoadID(), in: &state)
    } then: { joined in
      if case .waiting(_, _, let task?) = joined { AsyncCache.escalate(task, to: priority) }
    }
    if dependents.isEmpty, case .refused(let refusal) = joined { return refusal }
    guard !dependents.isEmpty else { return nil }
    return settle(joined, provisional: provisional, waiter: waiter, key: key, dependents, &dependencies)
  }

  /// Joins `waiter`, collecting for a bulk request, to the load of each of `keys` (distinct),
  /// starting the loads not in flight, as ``join(_:waiter:as:skipsTopLayer:negativeNow:dependents:dependencies:isCancelled:)``
  /// does for one. Returns the keys refused, with why; failing fast, the first refusal ends the
  /// joining (the keys after it are not joined, and the caller withdraws the others), and a key
  /// negative caching remembers means that no key is joined.
  func join(
    _ keys: [Key], waiter: UInt64, collector: BulkCollector<Key, Value>, negativeNow: Int64?,
    dependents: [LoadIdentity], dependencies: inout [LoadIdentity]
  ) -> [(key: Key, refusal: Refusal)] {
    let provisional = dependents.isEmpty ? nil : reserveLoads(keys.count, for: dependents)
    var priority = TaskPriority.medium
    let joined = update { state -> [Joined] in
      // As for a single request: read under the lock, and either this sees the cancellation, or
      // the request's cancellation handler finds the waiters registered.
      priority = Task.currentPriority
      if Task.isCancelled { return keys.map { _ in .refused(.cancelled) } }
      var joined: [Joined] = []
      joined.reserveCapacity(keys.count)
      // Failing fast, one remembered error means nothing else is asked for.
      if collector.failsFast, let negativeNow, !state.negatives.isEmpty,
        let index = keys.firstIndex(where: { state.negatives.error(for: $0, now: negativeNow) != nil })
      {
        state.counters.negativeHits += 1
        let error = state.negatives.error(for: keys[index], now: negativeNow)!
        return keys.indices.map { $0 == index ? .refused(.remembered(error)) : .skipped }
      }
      var stopped = false
      for (index, key) in keys.enumerated() {
        guard !stopped else {
          joined.append(.skipped)
          continue
        }
        let outcome = Self.join(
          key, waiter: waiter, as: .bulk(collector), priority: priority, skipsTopLayer: false,
          negativeNow: negativeNow, newID: provisional?[index] ?? reserveLoadID(), in: &state)
        joined.append(outcome)
        if collector.failsFast, case .refused = outcome { stopped = true }
      }
      return joined
    } then: { joined in
      var tasks = Set<Task<Void, Never>>()
      for case .waiting(_, _, let task?) in joined { tasks.insert(task) }
      for task in tasks { AsyncCache.escalate(task, to: priority) }
    }
    var refused: [(key: Key, refusal: Refusal)] = []
    for (index, key) in keys.enumerated() {
      let refusal =
        dependents.isEmpty
        ? joined[index].refusal
        : settle(joined[index], provisional: provisional?[index], waiter: waiter, key: key, dependents, &dependencies)
      // A cancelled request is answered by its cancellation handler.
      if let refusal, !refusal.isCancellation { refused.append((key, refusal)) }
    }
    return refused
  }

  /// What joining one key came to, under the lock.
  @usableFromInline
  enum Joined {
    case refused(Refusal)
    /// Waiting for `load`, which the waiter `started` or joined; escalate `task` when given.
    case waiting(load: UInt64, started: Bool, escalate: Task<Void, Never>?)
    /// Not joined: a bulk request failing fast stopped before this key.
    case skipped

    @inlinable
    var refusal: Refusal? {
      if case .refused(let refusal) = self { refusal } else { nil }
    }
  }

  /// The critical section of a join: refuses a closed table and a remembered error, joins (as
  /// load `newID` if it starts one), counts.
  @inlinable
  static func join(
    _ key: Key, waiter: UInt64, as continuation: Waiter, priority: TaskPriority,
    skipsTopLayer: Bool, negativeNow: Int64?, newID: @autoclosure () -> UInt64, in state: inout State
  ) -> Joined {
    // Checked under the lock, where close() sets it: a request either joins before the close,
    // which then waits for its load, or is refused.
    if state.isClosed { return .refused(.closed) }
    if let negativeNow, !state.negatives.isEmpty, let error = state.negatives.error(for: key, now: negativeNow) {
      state.counters.negativeHits += 1
      return .refused(.remembered(error))
    }
    switch state.machine.join(
      key, waiter: waiter, continuation: continuation, priority: priority, kind: continuation.kind,
      skipsTopLayer: skipsTopLayer, newID: newID())
    {
    case .joined(let id, let task):
      state.counters.coalesced += 1
      return .waiting(load: id, started: false, escalate: task)
    case .started(let id):
      state.counters.loads += 1
      return .waiting(load: id, started: true, escalate: nil)
    }
  }

  /// A new load identifier.
  @inlinable
  func reserveLoadID() -> UInt64 {
    loadIDs.wrappingAdd(1, ordering: .relaxed).newValue
  }

  /// Reserves `count` load identifiers for a request made inside loads (`dependents`), and
  /// records the dependents as waiting for each, before the request joins: a load the request
  /// starts (as one of them) can then not make a request that waits for its dependents unseen,
  /// though its task starts before the lock is released. The others are forgotten in
  /// ``settle(_:provisional:waiter:key:_:_:)``.
  @usableFromInline
  func reserveLoads(_ count: Int, for dependents: [LoadIdentity]) -> [UInt64] {
    (0..<count).map { _ in
      let id = reserveLoadID()
      _ = LoadDependencies.shared.add(
        dependents, waitingFor: LoadIdentity(table: ObjectIdentifier(self), load: id), checkingCycles: false)
      return id
    }
  }

  /// Settles the dependencies of a request made inside loads (`dependents`) that joined as
  /// `joined`, with the identifier it reserved: a load it started keeps its record (in
  /// `dependencies`, to forget once the request ends); for a load it joined, the record moves
  /// to that load, unless that load waits for one of the dependents: the request then leaves
  /// it and is refused as ``Refusal/recursive`` (unless the load answered it meanwhile).
  @usableFromInline
  func settle(
    _ joined: Joined, provisional: UInt64?, waiter: UInt64, key: Key, _ dependents: [LoadIdentity],
    _ dependencies: inout [LoadIdentity]
  ) -> Refusal? {
    let identity = { LoadIdentity(table: ObjectIdentifier(self), load: $0) }
    if let provisional {
      if case .waiting(provisional, true, _) = joined {
        dependencies.append(identity(provisional))
        return nil
      }
      LoadDependencies.shared.remove(dependents, waitingFor: identity(provisional))
    }
    guard case .waiting(let load, _, _) = joined else { return joined.refusal }
    let target = identity(load)
    guard LoadDependencies.shared.add(dependents, waitingFor: target, checkingCycles: true) else {
      return leave(waiter, key: key, because: .refused).continuation == nil ? nil : .recursive
    }
    dependencies.append(target)
    return nil
  }

  // MARK: Leaving

  /// Removes `waiter` (a request, a key of a bulk request, or a prefetch of `key`) from its
  /// load, and cancels the load's task if it was its last waiter. Returns the waiter's
  /// continuation, if it was still waiting (the caller answers it), and the abandoned load.
  ///
  /// The read of an abandoned load is overtaken under the table's lock, so that its late value
  /// is not stored: no request can start the fresh load that may follow before it is.
  @inlinable
  @discardableResult
  func leave(
    _ waiter: UInt64, key: Key, because departure: Machine.Departure
  ) -> (continuation: Waiter?, abandoned: Machine.Abandoned?) {
    let left = update { state in Self.leave(waiter, key: key, because: departure, in: &state) }
    left.abandoned?.task?.cancel()
    return left
  }

  /// Removes `waiter`, a bulk request, from the loads of `keys`, as ``leave(_:key:because:)``.
  func leave(_ waiter: UInt64, keys: some Sequence<Key>) {
    let abandoned = update { state in
      keys.compactMap { Self.leave(waiter, key: $0, because: .cancelled, in: &state).abandoned?.task }
    }
    for task in abandoned { task.cancel() }
  }

  @inlinable
  static func leave(
    _ waiter: UInt64, key: Key, because departure: Machine.Departure, in state: inout State
  ) -> (continuation: Waiter?, abandoned: Machine.Abandoned?) {
    let left = state.machine.leave(waiter: waiter, key: key)
    if left.continuation != nil {
      switch departure {
      case .cancelled: state.counters.cancelledWaiters += 1
      // Refused after it joined: as if it had never joined.
      case .refused: state.counters.coalesced -= 1
      case .timedOut: state.counters.hardTimeouts += 1
      }
    }
    if let abandoned = left.abandoned {
      state.counters.cancelledLoads += 1
      if let token = abandoned.token { state.runner?.overtake(token) }
    }
    return left
  }

  /// Raises the priority of the loads of `keys` that `waiter` waits for, escalated to `priority`.
  @inlinable
  func escalate(_ waiter: UInt64, keys: some Sequence<Key>, to priority: TaskPriority) {
    let tasks = update { state in keys.compactMap { state.machine.escalate(waiter: waiter, key: $0, to: priority) } }
    for task in Set(tasks) { AsyncCache.escalate(task, to: priority) }
  }

  // MARK: Soft timeouts

  /// The soft timeout of `waiter` (a request for `key`, or a bulk request) passed: returns it,
  /// to answer with the stale entry its load found, if `servable` says it may still be served;
  /// otherwise it gets one as soon as the load offers it (``offerStale(_:for:)``).
  func softTimeOut(
    _ waiter: UInt64, key: Key, after timeout: Duration, servable: (Stale) -> Bool
  ) -> (Waiter, Stale)? {
    update { state in
      let outcome = state.machine.softTimeOut(waiter: waiter, key: key, after: timeout, isServable: servable)
      guard case .served(let continuation, let stale) = outcome else { return nil }
      state.counters.softTimeouts += 1
      return (continuation, stale)
    }
  }

  /// Offers `stale`, an entry load `id` passed over, to its requests whose soft timeout passes
  /// (or passed) before it ends; returns those past it already, with their timeouts, to answer.
  func offerStale(_ stale: Stale, for id: UInt64) -> [(Waiter, timeout: Duration)] {
    update { state in
      let served = state.machine.offerStale(stale, for: id)
      state.counters.softTimeouts += served.count
      return served
    }
  }

  // MARK: Running loads

  /// Whether load `id`, started as `load`, stores below the top layer only: asked only of a load
  /// started so (a request that joins it promotes it into the top layer).
  func skipsTopLayer(_ load: Machine.StartedLoad) -> Bool {
    load.skipsTopLayer && state.withLock { $0.machine.skipsTopLayer(load.id) }
  }

  /// Whether load `id` is still in the table (not finished, not abandoned).
  func isLive(_ id: UInt64) -> Bool {
    state.withLock { $0.machine.isLive(id) }
  }

  /// The loads of `ids` still in the table.
  func live(_ ids: [UInt64]) -> Set<UInt64> {
    state.withLock { state in Set(ids.filter { state.machine.isLive($0) }) }
  }

  /// Waits, if loads `ids` (one load, or a batch's) are background work, until no urgent load
  /// is in flight or one of them is promoted. A task whose loads were all started urgent
  /// (`urgentAt`: the machine's ``LoadTableStateMachine/urgencyLosses`` then) goes on without
  /// the lock while no load lost its urgency since.
  ///
  /// - Throws: `CancellationError` when the task is cancelled, or none of the loads is wanted
  ///   any more (they were abandoned, and the task is about to be cancelled).
  func passGate(_ ids: [UInt64], urgentAt: UInt64?) async throws {
    if let urgentAt, urgencyLosses.load(ordering: .acquiring) == urgentAt { return try Task.checkCancellation() }
    try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
        let decision = update { state -> Machine.GateDecision in
          Task.isCancelled ? .abandoned : state.machine.enterGate(ids, continuation: continuation)
        }
        switch decision {
        case .proceed: continuation.resume()
        case .abandoned: continuation.resume(throwing: CancellationError())
        case .held: break
        }
      }
    } onCancel: {
      update { $0.machine.leaveGate(of: ids) }?.resume(throwing: CancellationError())
    }
  }

  /// How a load ended, for ``finish(_:_:)``.
  struct Ending {
    /// It failed (answering with a stale value after an error is a failure too).
    var failed: Bool
    var duration: Duration
    /// It answered at once with a stale value (stale-while-revalidate).
    var servedStale = false
    /// It answered with a stale value after an error (stale-if-error).
    var servedStaleAfterError = false
    /// The index of the layer it found its value in; `nil` when it did not (the origin answered,
    /// or it failed).
    var answeringTier: Int?
    /// It asked the origin at least once.
    var askedOrigin = false
    /// The origin said the entry held did not change (``LoadSource/revalidated``).
    var revalidated = false
    /// The error negative caching remembers for the key, until `expiry`, at most `limit` errors.
    var negative: (error: any Error, expiry: Int64, limit: Int)?
    /// Start a background refresh of the key once the load is out of the table, in the same
    /// critical section: no request can start a second one in between.
    var thenRefresh = false
  }

  /// Removes load `id` from the table and returns its waiters, to answer, and whether it was a
  /// refresh; counts it and its requests. `nil` when the load was abandoned (it is out of the
  /// table, and not counted). A load that a write made unjoinable keeps nothing for the key and
  /// counts no stale value served: its error is as stale as its value, and no one asked for the
  /// key since, so nothing is refreshed.
  func finish(_ id: UInt64, key: Key, _ ending: Ending) -> Machine.Finished? {
    update { state in
      guard let finished = state.machine.finish(id) else { return nil }
      state.counters.loadTime.record(ending.duration)
      if ending.failed {
        state.counters.failures += 1
        if finished.isRefresh { state.counters.refreshFailures += 1 }
      }
      if ending.revalidated { state.counters.revalidations += 1 }
      let requests = finished.waiters.requestCount
      if ending.askedOrigin { state.counters.originLoads += 1 }
      if let tier = ending.answeringTier {
        state.counters.layerAnswers += requests
        if state.counters.layerAnswersByTier.count <= tier {
          state.counters.layerAnswersByTier += Array(
            repeating: 0, count: tier + 1 - state.counters.layerAnswersByTier.count)
        }
        state.counters.layerAnswersByTier[tier] += requests
      } else {
        state.counters.originAnswers += requests
      }
      // Told once the load is out of the table, so that it may start the key's next load.
      if finished.wasJoinable {
        if ending.servedStale { state.counters.staleServed += 1 }
        if ending.servedStaleAfterError { state.counters.staleServedOnError += 1 }
        if let negative = ending.negative {
          state.negatives.remember(negative.error, for: key, expiry: negative.expiry, limit: negative.limit)
        }
        if ending.thenRefresh { startRefresh(key, in: &state) }
      }
      return finished
    }
  }

  /// The task of loads `ids` ended: nothing of them runs any more.
  func taskEnded(_ ids: [UInt64]) {
    update { $0.machine.taskEnded(ids) }
  }

  // MARK: Refreshes and writes

  /// Starts a background refresh of `key`, unless a load of it is in flight; counts a stale
  /// value served when `servedStale`.
  func refresh(_ key: Key, servedStale: Bool) {
    update { state in
      if servedStale { state.counters.staleServed += 1 }
      startRefresh(key, in: &state)
    }
  }

  /// Starts a background refresh of `key` unless a load of it is joinable or the table is
  /// closed. A refresh is background work: it runs below the requests that read the stale
  /// value, and a request that joins it raises it.
  func startRefresh(_ key: Key, in state: inout State) {
    guard !state.isClosed else { return }
    switch state.machine.startRefresh(key, priority: .utility, newID: reserveLoadID()) {
    case .coalesced:
      state.counters.refreshesCoalesced += 1
    case .started:
      state.counters.loads += 1
      state.counters.refreshes += 1
    }
  }

  /// Makes every load unjoinable, keeping what negative caching remembers: an invalidation
  /// of a tag, which may make any load's value dead.
  func detachLoads() {
    update { $0.machine.detachAll() }
  }

  /// Makes the load of `key` (of every key when `nil`) unjoinable, and forgets the errors
  /// negative caching remembers for it: a write overtakes both.
  func detach(_ key: Key?) {
    update { state in
      if let key {
        if !state.negatives.isEmpty { state.negatives.forget(key) }
        state.machine.detach(key)
      } else {
        state.negatives.forgetAll()
        state.machine.detachAll()
      }
    }
  }

  /// Counts a request hit the top layer counted for an entry the cache would not serve.
  @usableFromInline
  func countDeclinedTopHit() {
    state.withLock { $0.counters.declinedTopHits += 1 }
  }

  /// Counts a retry of an origin call.
  func countRetry() {
    state.withLock { $0.counters.retries += 1 }
  }

  // MARK: Urgent and background work

  /// Makes the waiters of every load of `key` background (see
  /// ``LoadTableStateMachine/demote(_:)``); returns whether a load of `key` was urgent.
  func demote(_ key: Key) -> Bool {
    update { $0.machine.demote(key) }
  }

  /// Whether a load that a request waits for is in flight.
  var hasUrgentLoads: Bool {
    state.withLock { $0.machine.urgentLoads > 0 }
  }

  // MARK: Snapshots and closing

  /// What the cache's statistics read of the table.
  struct Snapshot {
    var counters: LoadCounters
    var loadsInFlight: Int
    var requestsWaiting: Int
    var urgentLoads: Int
    var loadsAtGate: Int
    var negativeEntries: Int
  }

  /// The table's counters and sizes now; the load-time histogram is copied into `loadTime`,
  /// storage allocated before the lock (were it shared, the next load would copy it while
  /// holding the lock).
  func snapshot(into loadTime: inout LoadTimeHistogram) -> Snapshot {
    state.withLock { state in
      var counters = state.counters
      loadTime.copyContents(of: state.counters.loadTime)
      counters.loadTime = loadTime
      let machine = state.machine
      return Snapshot(
        counters: counters, loadsInFlight: machine.loads.count, requestsWaiting: machine.waiterCount,
        urgentLoads: machine.urgentLoads, loadsAtGate: machine.loadsAtGate, negativeEntries: state.negatives.count)
    }
  }

  /// The number of requests waiting for a load of `key`.
  func waiterCount(for key: Key) -> Int {
    state.withLock { $0.machine.waiterCount(for: key) }
  }

  /// The loads whose body runs now: those registered, and those abandoned by their requests
  /// that have not ended yet.
  var loadsRunning: Int {
    state.withLock { Swift.max($0.machine.running.count, $0.machine.loads.count) }
  }

  /// No load and no waiter is registered.
  var isEmpty: Bool {
    state.withLock { $0.machine.isEmpty }
  }

  /// Closes the table: requests no longer join loads, and refreshes no longer start. Returns
  /// whether it was open.
  @discardableResult
  func close() -> Bool {
    state.withLock { state in
      defer {
        state.isClosed = true
        closed.store(true, ordering: .relaxed)
      }
      return !state.isClosed
    }
  }

  /// Cancels the task of every load in flight.
  func cancelAll() {
    for task in state.withLock({ $0.machine.allTasks }) { task.cancel() }
  }
}
