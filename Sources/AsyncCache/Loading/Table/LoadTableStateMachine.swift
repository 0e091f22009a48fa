/// The rules of a ``LoadingCache``'s ``LoadTable``: at most one joinable load per key, and the
/// requests (waiters) that wait for each load.
///
/// Rules (see <doc:Semantics>):
/// - a request for a key with a joinable load joins it; otherwise it starts a load;
/// - a cancelled waiter leaves alone; the load is cancelled only when its last waiter leaves,
///   and is then no longer joinable, so the next request starts afresh;
/// - a write or removal of the key *detaches* the load: it keeps running for its waiters, but new
///   requests start afresh;
/// - a finished load removes only its own record;
/// - waiters are answered in arrival order;
/// - a load is *urgent* while at least one of its waiters is (requests are urgent, prefetches are
///   not); ``demote(_:)`` makes a key's waiters background. A background load waits at the
///   *gate* before it asks the origin while any urgent load is in flight, and goes through
///   as soon as it becomes urgent itself or the last urgent load ends.
///
/// - a request with a *soft timeout* that has waited that long gets the stale value its load
///   offered (``offerStale(_:for:)``), at once or as soon as the load offers one, and leaves
///   without cancelling the load: the load then goes on alone, owned by the cache (as a refresh
///   does). A *hard timeout* removes the waiter as a cancellation does (the load is cancelled
///   only if it was the last waiter).
///
/// Pure and synchronous: it stores continuations but never resumes them and calls no one. What
/// must happen once its owner's lock is released (a gate to open, urgency observers to tell) is
/// left in ``effects``, which the owner takes after each critical section; waiters to answer
/// are returned by the calls that remove them. Generic over the continuation types and the
/// stale answer so that tests can drive it with plain values.
@usableFromInline
struct LoadTableStateMachine<Key: Hashable & Sendable, Continuation, Gate, Stale> {
  @usableFromInline
  struct Load {
    @usableFromInline let key: Key
    @usableFromInline var waiters: Waiters<Continuation>
    @usableFromInline var priority: TaskPriority
    @usableFromInline var task: Task<Void, Never>?
    @usableFromInline var token: ReadToken<Key>?
    /// Whether the load stores its value below the top layer only (every waiter so far is a
    /// prefetch that asked for that).
    @usableFromInline var skipsTopLayer: Bool
    /// The gate the load's task waits at for urgent work to end, if it waits.
    @usableFromInline var gate: UInt64?
    /// The batch whose task runs this load, if one does (see ``attachBatch(_:task:)``).
    @usableFromInline var batch: UInt64?
    /// A background refresh of a stale entry (see ``startRefresh(_:priority:)``): it goes on
    /// when the requests that joined it leave, and does not wait for urgent work.
    @usableFromInline var isRefresh = false
    /// A request left it at its soft timeout with the stale value: the load goes on when its
    /// other waiters leave, owned by the cache.
    @usableFromInline var isKept = false
    /// The stale answer the load found on its way, which waiters past their soft timeout get.
    @usableFromInline var stale: Stale?
    /// Waiters whose soft timeout passed before the load had a stale answer to offer, with
    /// that timeout.
    @usableFromInline var pastSoftTimeout: [(waiter: UInt64, timeout: Duration)] = []

    /// The load goes on when its waiters leave.
    @inlinable
    var outlivesWaiters: Bool { isRefresh || isKept }

    @inlinable
    init(key: Key, waiters: Waiters<Continuation>, priority: TaskPriority, skipsTopLayer: Bool) {
      self.key = key
      self.waiters = waiters
      self.priority = priority
      self.skipsTopLayer = skipsTopLayer
    }

    /// At least one waiter is urgent.
    @inlinable
    var isUrgent: Bool { waiters.urgentCount > 0 }

    /// Adds a waiter in place (one dictionary access for the caller). Returns whether the load
    /// just became urgent, and the task to escalate when the waiter's priority is higher.
    @inlinable
    mutating func add(
      _ waiter: UInt64, _ continuation: Continuation, priority: TaskPriority, isUrgent: Bool, skipsTopLayer: Bool
    ) -> (becameUrgent: Bool, escalate: Task<Void, Never>?) {
      let becameUrgent = isUrgent && waiters.urgentCount == 0
      waiters.append(waiter, continuation, isUrgent: isUrgent)
      if !skipsTopLayer { self.skipsTopLayer = false }
      guard priority > self.priority else { return (becameUrgent, nil) }
      self.priority = priority
      return (becameUrgent, task)
    }
  }

  /// A load that its last waiter left.
  @usableFromInline
  struct Abandoned {
    /// The load's identifier: its task may still be running (see ``running``).
    @usableFromInline var id: UInt64
    /// Its task, to cancel; `nil` when the owner has not attached it yet (it cancels it then).
    @usableFromInline var task: Task<Void, Never>?
    /// Its read, to overtake so that a late value is not stored.
    @usableFromInline var token: ReadToken<Key>?

    @inlinable
    init(id: UInt64, task: Task<Void, Never>?, token: ReadToken<Key>?) {
      self.id = id
      self.task = task
      self.token = token
    }
  }

  @usableFromInline
  enum JoinResult {
    /// The request joined a load; escalate its task when given.
    case joined(escalate: Task<Void, Never>?)
    /// The request started load `id`, left in ``Effects/startedLoads`` for the owner to run.
    case started(id: UInt64)
  }

  /// Who waits for a load, which decides how it is run.
  @usableFromInline
  enum JoinKind: Sendable {
    /// A request for one key: urgent.
    case request
    /// A bulk request: urgent, and its new loads may share one batch origin call.
    case bulk
    /// A prefetch: background work until a request joins.
    case prefetch

    @inlinable
    var isUrgent: Bool { self != .prefetch }
  }

  /// A load registered in the table, whose task the owner must start and then attach (see
  /// ``attach(_:to:)`` and ``attachBatch(_:task:)``).
  @usableFromInline
  struct StartedLoad: Sendable {
    @usableFromInline let id: UInt64
    @usableFromInline let key: Key
    /// Its read of the chain, begun by the owner in the critical section that registered it
    /// (see ``setToken(_:for:)``), so that an abandonment always finds it.
    @usableFromInline var token: ReadToken<Key>?
    /// The priority to start its task at.
    @usableFromInline let priority: TaskPriority
    /// Started by a bulk request: it may be run with others in one batch origin call.
    @usableFromInline let batchable: Bool

    @inlinable
    init(id: UInt64, key: Key, priority: TaskPriority, batchable: Bool) {
      self.id = id
      self.key = key
      self.priority = priority
      self.batchable = batchable
    }
  }

  @usableFromInline var joinable: [Key: UInt64] = [:]
  @usableFromInline var loads: [UInt64: Load] = [:]
  /// Loads no longer joinable (a write detached them) but still answering their waiters.
  @usableFromInline var detached: [Key: [UInt64]] = [:]
  @usableFromInline var nextLoadID: UInt64 = 0
  @usableFromInline var counters = LoadCounters()
  /// The number of urgent loads (joinable or detached).
  @usableFromInline var urgentLoads = 0
  /// Load tasks waiting for urgent work to end, by gate: the task's continuation and the
  /// loads it runs (one, or the live loads of a batch).
  @usableFromInline var gates: [UInt64: (continuation: Gate, loads: [UInt64])] = [:]
  @usableFromInline var nextGateID: UInt64 = 0
  /// Loads that one task runs together (a batch origin call): the task, and how many of its
  /// loads are still in the table. The task is cancelled only when all of them are abandoned.
  @usableFromInline var batches: [UInt64: (task: Task<Void, Never>?, live: Int)] = [:]
  @usableFromInline var nextBatchID: UInt64 = 0
  /// The errors remembered by negative caching.
  @usableFromInline var negatives = NegativeEntries<Key>()
  /// Loads whose task body has not ended yet (registered, abandoned or not): a prefetch that
  /// abandoned a load waits for it to leave this set, so that no work outlives it.
  @usableFromInline var running: Set<UInt64> = []
  /// What the owner must do once its lock is released; see ``takeEffects()``.
  @usableFromInline var effects = Effects()

  /// What must happen after a critical section, outside the lock.
  @usableFromInline
  struct Effects {
    /// Gates to open: each held task goes on, or stops with `CancellationError` when none of
    /// its loads is wanted any more.
    @usableFromInline var openedGates: [(gate: Gate, cancelled: Bool)] = []
    /// ``urgentLoads`` became zero or stopped being zero: the urgency observers must be told.
    @usableFromInline var urgencyChanged = false
    /// Loads registered whose tasks must be started, in the order they were registered.
    @usableFromInline var startedLoads: [StartedLoad] = []

    @inlinable
    init() {}

    @inlinable
    var isEmpty: Bool { openedGates.isEmpty && !urgencyChanged && startedLoads.isEmpty }
  }

  /// Returns the effects left by the calls since the last take, and forgets them.
  @inlinable
  mutating func takeEffects() -> Effects {
    guard !effects.isEmpty else { return Effects() }
    defer { effects = Effects() }
    return effects
  }

  @inlinable
  init() {}

  /// No load and no waiter is registered.
  @inlinable
  var isEmpty: Bool { joinable.isEmpty && loads.isEmpty && detached.isEmpty }

  /// The number of requests waiting now.
  @inlinable
  var waiterCount: Int { loads.values.reduce(0) { $0 + $1.waiters.count } }

  /// Adds a request (`isUrgent`) or a prefetch for `key`: joins its load or starts one.
  /// `skipsTopLayer` asks for the value to be stored below the top layer only; one waiter that
  /// does not ask for it is enough for the load to store it everywhere.
  @inlinable
  mutating func join(
    _ key: Key,
    waiter: UInt64,
    continuation: Continuation,
    priority: TaskPriority,
    kind: JoinKind = .request,
    skipsTopLayer: Bool = false
  ) -> JoinResult {
    let isUrgent = kind.isUrgent
    if let id = joinable[key] {
      counters.coalesced += 1
      let (becameUrgent, escalate) = loads[id]!.add(
        waiter, continuation, priority: priority, isUrgent: isUrgent, skipsTopLayer: skipsTopLayer)
      if becameUrgent { urgencyChanged(of: id, wasUrgent: false) }
      return .joined(escalate: escalate)
    }
    nextLoadID &+= 1
    let id = nextLoadID
    var waiters = Waiters<Continuation>()
    waiters.append(waiter, continuation, isUrgent: isUrgent)
    loads[id] = Load(key: key, waiters: waiters, priority: priority, skipsTopLayer: skipsTopLayer)
    joinable[key] = id
    counters.loads += 1
    effects.startedLoads.append(StartedLoad(id: id, key: key, priority: priority, batchable: kind == .bulk))
    running.insert(id)
    if isUrgent { urgencyChanged(of: id, wasUrgent: false) }
    return .started(id: id)
  }

  /// Records the read token of load `id`, just registered (in the same critical section).
  @inlinable
  mutating func setToken(_ token: ReadToken<Key>, for id: UInt64) {
    loads[id]?.token = token
  }

  /// Attaches the task of load `id`. Returns `nil` when the load left the table meanwhile (its
  /// requests left, which overtook its read, or it ended): the owner must cancel the task.
  /// Otherwise returns the load's priority now, which requests that joined before the task was
  /// attached may have raised.
  @inlinable
  mutating func attach(_ task: Task<Void, Never>, to id: UInt64) -> TaskPriority? {
    guard loads[id] != nil else { return nil }
    loads[id]!.task = task
    return loads[id]!.priority
  }

  /// The task of loads `ids` ended: nothing of them runs any more.
  @inlinable
  mutating func taskEnded(_ ids: [UInt64]) {
    for id in ids { running.remove(id) }
  }

  /// The load of `key` that `waiter` waits for.
  @inlinable
  func load(of waiter: UInt64, key: Key) -> UInt64? {
    if let id = joinable[key], loads[id]?.waiters.contains(waiter) == true { return id }
    return detached[key]?.first { loads[$0]?.waiters.contains(waiter) == true }
  }

  /// Raises the priority of the load that `waiter` (a request for `key`) waits for; returns its
  /// task if it must be escalated.
  @inlinable
  mutating func escalate(waiter: UInt64, key: Key, to priority: TaskPriority) -> Task<Void, Never>? {
    guard let id = load(of: waiter, key: key), let load = loads[id], priority > load.priority else { return nil }
    loads[id]!.priority = priority
    return load.task
  }

  /// Removes a cancelled waiter (a request for `key`). Returns its continuation (to resume with
  /// `CancellationError`), if it was still waiting, and the load if it was the last waiter.
  @inlinable
  mutating func cancel(waiter: UInt64, key: Key) -> (continuation: Continuation?, abandoned: Abandoned?) {
    leave(waiter: waiter, key: key, timedOut: false)
  }

  /// Removes a waiter whose hard timeout passed, as ``cancel(waiter:key:)`` does (the load is
  /// abandoned only if it was the last waiter), counting a timeout instead of a cancellation.
  @inlinable
  mutating func timeOut(waiter: UInt64, key: Key) -> (continuation: Continuation?, abandoned: Abandoned?) {
    leave(waiter: waiter, key: key, timedOut: true)
  }

  @inlinable
  mutating func leave(
    waiter: UInt64, key: Key, timedOut: Bool
  ) -> (continuation: Continuation?, abandoned: Abandoned?) {
    guard let id = load(of: waiter, key: key) else { return (nil, nil) }
    let wasUrgent = loads[id]!.isUrgent
    let continuation = loads[id]!.waiters.remove(waiter)
    if timedOut { counters.hardTimeouts += 1 } else { counters.cancelledWaiters += 1 }
    if !loads[id]!.pastSoftTimeout.isEmpty { loads[id]!.pastSoftTimeout.removeAll { $0.waiter == waiter } }
    urgencyChanged(of: id, wasUrgent: wasUrgent)
    guard loads[id]!.waiters.isEmpty, !loads[id]!.outlivesWaiters else { return (continuation, nil) }
    let load = remove(id)
    counters.cancelledLoads += 1
    // A batch's task goes on while another of its loads is wanted.
    let task = load.batch == nil ? load.task : leaveBatch(load.batch!)
    return (continuation, Abandoned(id: id, task: task, token: load.token))
  }

  // MARK: Soft timeouts

  /// What a waiter's soft timeout came to.
  @usableFromInline
  enum SoftTimeout {
    /// The waiter left with the load's stale answer; resume it with that. The load goes on.
    case served(Continuation, Stale)
    /// The load has no stale answer yet: the waiter gets one if the load offers it.
    case waiting
    /// The waiter no longer waits (it was answered, or left).
    case gone
  }

  /// The soft timeout `timeout` of `waiter` (a request for `key`) passed: it leaves with the
  /// stale answer of its load if the load has one that `isServable` accepts now, and the load
  /// is kept.
  @inlinable
  mutating func softTimeOut(
    waiter: UInt64, key: Key, after timeout: Duration, isServable: (Stale) -> Bool
  ) -> SoftTimeout {
    guard let id = load(of: waiter, key: key) else { return .gone }
    if let stale = loads[id]!.stale, isServable(stale), let continuation = serveStale(waiter, of: id) {
      return .served(continuation, stale)
    }
    if !loads[id]!.pastSoftTimeout.contains(where: { $0.waiter == waiter }) {
      loads[id]!.pastSoftTimeout.append((waiter, timeout))
    }
    return .waiting
  }

  /// Records `stale`, the stale answer load `id` found, for waiters whose soft timeout passes;
  /// those whose soft timeout passed already leave with it: returns them, with their timeouts,
  /// to resume with it.
  @inlinable
  mutating func offerStale(_ stale: Stale, for id: UInt64) -> [(Continuation, timeout: Duration)] {
    guard loads[id] != nil else { return [] }
    loads[id]!.stale = stale
    let waiting = loads[id]!.pastSoftTimeout
    guard !waiting.isEmpty else { return [] }
    loads[id]!.pastSoftTimeout = []
    return waiting.compactMap { waiter in serveStale(waiter.waiter, of: id).map { ($0, waiter.timeout) } }
  }

  /// Removes `waiter` of load `id`, answered with the load's stale answer; the load is kept.
  /// `nil` if the waiter no longer waits.
  @inlinable
  mutating func serveStale(_ waiter: UInt64, of id: UInt64) -> Continuation? {
    loads[id]!.pastSoftTimeout.removeAll { $0.waiter == waiter }
    let wasUrgent = loads[id]!.isUrgent
    guard let continuation = loads[id]!.waiters.remove(waiter) else { return nil }
    loads[id]!.isKept = true
    // Kept, it no longer waits for urgent work (as a refresh does not).
    if let gate = loads[id]!.gate { openGate(gate) }
    counters.softTimeouts += 1
    urgencyChanged(of: id, wasUrgent: wasUrgent)
    return continuation
  }

  /// Removes load `id` and returns its waiters in arrival order; calls `wasJoinable` after the
  /// removal if the load was still joinable (no write overtook it). Does nothing if the load was
  /// abandoned.
  @inlinable
  mutating func finish(_ id: UInt64, failed: Bool, wasJoinable: (inout Self) -> Void = { _ in }) -> [Continuation] {
    guard let key = loads[id]?.key else { return [] }
    if failed {
      counters.failures += 1
      if loads[id]!.isRefresh { counters.refreshFailures += 1 }
    }
    let isJoinable = joinable[key] == id
    let load = remove(id)
    if let batch = load.batch { _ = leaveBatch(batch) }
    // Told once the load is out of the table, so that it may start the key's next load.
    if isJoinable { wasJoinable(&self) }
    return load.waiters.continuations
  }

  // MARK: Refreshes

  /// Starts a background refresh of `key`, unless a load of it is joinable already (which will
  /// bring a fresh value as well). Returns the load's identifier, left in
  /// ``Effects/startedLoads`` for the owner to run.
  @discardableResult
  mutating func startRefresh(_ key: Key, priority: TaskPriority) -> UInt64? {
    if let id = joinable[key] {
      counters.refreshesCoalesced += 1
      // The load becomes the refresh: it no longer waits for urgent work (a prefetch held at
      // the gate), and goes on when its waiters leave.
      loads[id]!.isRefresh = true
      if let gate = loads[id]!.gate { openGate(gate) }
      return nil
    }
    nextLoadID &+= 1
    let id = nextLoadID
    var load = Load(key: key, waiters: Waiters(), priority: priority, skipsTopLayer: false)
    load.isRefresh = true
    loads[id] = load
    joinable[key] = id
    counters.loads += 1
    counters.refreshes += 1
    effects.startedLoads.append(StartedLoad(id: id, key: key, priority: priority, batchable: false))
    running.insert(id)
    return id
  }

  /// Whether load `id` is a background refresh.
  func isRefresh(_ id: UInt64) -> Bool { loads[id]?.isRefresh ?? false }

  // MARK: Batches

  /// Makes the loads `ids` one batch, run by `task`, and attaches the task. Returns the indices
  /// of the loads that left the table meanwhile (the owner must cancel the task when none is
  /// left: the batch is not recorded then), and the highest priority of the others now.
  @usableFromInline
  mutating func attachBatch(_ ids: [UInt64], task: Task<Void, Never>) -> (gone: [Int], priority: TaskPriority?) {
    var gone: [Int] = []
    var highest: TaskPriority?
    let batch = nextBatchID &+ 1
    for (index, id) in ids.enumerated() {
      guard loads[id] != nil else {
        gone.append(index)
        continue
      }
      loads[id]!.task = task
      loads[id]!.batch = batch
      highest = Swift.max(highest ?? loads[id]!.priority, loads[id]!.priority)
    }
    guard gone.count < ids.count else { return (gone, nil) }
    nextBatchID = batch
    batches[batch] = (task, ids.count - gone.count)
    return (gone, highest)
  }

  /// Whether load `id` is still in the table (not finished, not abandoned).
  @usableFromInline
  func isLive(_ id: UInt64) -> Bool { loads[id] != nil }

  /// The tasks that run loads: each load's own, and each batch's.
  var allTasks: [Task<Void, Never>] {
    loads.values.compactMap(\.task) + batches.values.compactMap(\.task)
  }

  /// One load of `batch` left the table; returns the batch's task when it was the last one.
  @usableFromInline
  mutating func leaveBatch(_ batch: UInt64) -> Task<Void, Never>? {
    guard var record = batches[batch] else { return nil }
    record.live -= 1
    guard record.live <= 0 else {
      batches[batch] = record
      return nil
    }
    batches[batch] = nil
    return record.task
  }

  @inlinable
  mutating func remove(_ id: UInt64) -> Load {
    let load = loads.removeValue(forKey: id)!
    if joinable[load.key] == id {
      joinable[load.key] = nil
    } else if var others = detached[load.key] {
      others.removeAll { $0 == id }
      detached[load.key] = others.isEmpty ? nil : others
    }
    // An abandoned load may be held at a gate. A gate with no load left is opened with
    // CancellationError (its task is cancelled right after); a batch's gate stays for the
    // batch's other loads.
    if let gate = load.gate, var held = gates[gate] {
      held.loads.removeAll { $0 == id }
      if held.loads.isEmpty {
        gates[gate] = nil
        effects.openedGates.append((held.continuation, cancelled: true))
      } else {
        gates[gate] = held
      }
    }
    if load.isUrgent { urgentLoadsDecreased() }
    return load
  }

  // MARK: Writes

  /// Makes the load of `key`, if any, unjoinable: later requests start afresh.
  @inlinable
  mutating func detach(_ key: Key) {
    if !negatives.isEmpty { negatives.forget(key) }
    guard let id = joinable.removeValue(forKey: key) else { return }
    detached[key, default: []].append(id)
  }

  /// Makes every load unjoinable.
  @inlinable
  mutating func detachAll() {
    negatives.forgetAll()
    for key in Array(joinable.keys) { detach(key) }
  }

  /// The number of requests waiting for a load of `key`.
  @inlinable
  func waiterCount(for key: Key) -> Int {
    let ids = (joinable[key].map { [$0] } ?? []) + (detached[key] ?? [])
    return ids.reduce(0) { $0 + (loads[$1]?.waiters.count ?? 0) }
  }
}

extension LoadTableStateMachine: Sendable where Continuation: Sendable, Gate: Sendable, Stale: Sendable {}
extension LoadTableStateMachine.Load: Sendable where Continuation: Sendable, Gate: Sendable, Stale: Sendable {}
extension LoadTableStateMachine.Effects: Sendable where Gate: Sendable {}
extension LoadTableStateMachine.SoftTimeout: Sendable where Continuation: Sendable, Stale: Sendable {}
