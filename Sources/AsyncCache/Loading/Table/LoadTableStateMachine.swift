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
  @usableFromInline private(set) var joinable: [Key: UInt64] = [:]
  @usableFromInline private(set) var loads: [UInt64: Load] = [:]
  /// Loads no longer joinable (a write detached them) but still answering their waiters.
  @usableFromInline private(set) var detached: [Key: [UInt64]] = [:]
  @usableFromInline private(set) var nextLoadID: UInt64 = 0
  /// The number of urgent loads (joinable or detached).
  @usableFromInline private(set) var urgentLoads = 0
  /// How many times a load stopped being urgent (its urgent waiters left, or were demoted): a
  /// load started urgent whose task finds this unchanged is urgent still (see
  /// ``StartedLoad/urgentAt``).
  @usableFromInline private(set) var urgencyLosses: UInt64 = 0
  /// Load tasks waiting for urgent work to end, by gate: the task's continuation and the
  /// loads it runs (one, or the live loads of a batch).
  @usableFromInline private(set) var gates: [UInt64: (continuation: Gate, loads: [UInt64])] = [:]
  @usableFromInline private(set) var nextGateID: UInt64 = 0
  /// Loads that one task runs together (a batch origin call): the task, and how many of its
  /// loads are still in the table. The task is cancelled only when all of them are abandoned.
  @usableFromInline private(set) var batches: [UInt64: (task: Task<Void, Never>?, live: Int)] = [:]
  @usableFromInline private(set) var nextBatchID: UInt64 = 0
  /// Loads whose task body has not ended yet (registered, abandoned or not): a prefetch that
  /// abandoned a load waits for it to leave this set, so that no work outlives it.
  @usableFromInline private(set) var running: Set<UInt64> = []
  /// What the owner must do once its lock is released; see ``takeEffects()``.
  @usableFromInline private(set) var effects = Effects()

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

  /// No load is registered and no load's task body runs.
  @inlinable
  var isIdle: Bool { loads.isEmpty && running.isEmpty }

  /// The number of requests waiting now.
  @inlinable
  var waiterCount: Int { loads.values.reduce(0) { $0 + $1.waiters.count } }

  /// Adds a request (`isUrgent`) or a prefetch for `key`: joins its load or starts one, as
  /// `newID` when given (the owner's identifiers, asked for only when a load starts;
  /// otherwise the next of the machine's own).
  /// `skipsTopLayer` asks for the value to be stored below the top layer only; one waiter that
  /// does not ask for it is enough for the load to store it everywhere.
  @inlinable
  mutating func join(
    _ key: Key,
    waiter: UInt64,
    continuation: Continuation,
    priority: TaskPriority,
    kind: JoinKind = .request,
    skipsTopLayer: Bool = false,
    newID: @autoclosure () -> UInt64? = nil
  ) -> JoinResult {
    let isUrgent = kind.isUrgent
    if let id = joinable[key] {
      let (becameUrgent, escalate) = loads[id]!.add(
        waiter, continuation, priority: priority, isUrgent: isUrgent, isRequest: kind.isRequest,
        skipsTopLayer: skipsTopLayer)
      if becameUrgent { urgencyChanged(of: id, wasUrgent: false) }
      return .joined(id: id, escalate: escalate)
    }
    let id = makeID(newID())
    var waiters = Waiters<Continuation>()
    waiters.append(waiter, continuation, isUrgent: isUrgent, isRequest: kind.isRequest)
    loads[id] = Load(key: key, waiters: waiters, priority: priority, skipsTopLayer: skipsTopLayer)
    joinable[key] = id
    effects.startedLoads.append(
      StartedLoad(
        id: id, key: key, priority: priority, batchable: kind == .bulk, skipsTopLayer: skipsTopLayer,
        urgentAt: isUrgent ? urgencyLosses : nil))
    running.insert(id)
    if isUrgent { urgencyChanged(of: id, wasUrgent: false) }
    return .started(id: id)
  }

  /// The identifier of a new load: `newID`, or the next of the machine's own.
  @inlinable
  mutating func makeID(_ newID: UInt64?) -> UInt64 {
    let id = newID ?? nextLoadID &+ 1
    assert(loads[id] == nil, "load identifier \(id) is in use")
    nextLoadID = Swift.max(nextLoadID, id)
    return id
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
    if let id = joinable[key], loads[id]?.waiters.isWaiting(waiter) == true { return id }
    return detached[key]?.first { loads[$0]?.waiters.isWaiting(waiter) == true }
  }

  /// Raises the priority of the load that `waiter` (a request for `key`) waits for; returns its
  /// task if it must be escalated.
  @inlinable
  mutating func escalate(waiter: UInt64, key: Key, to priority: TaskPriority) -> Task<Void, Never>? {
    guard let id = load(of: waiter, key: key), let load = loads[id], priority > load.priority else { return nil }
    loads[id]!.priority = priority
    return load.task
  }

  /// Removes `waiter` (of `key`'s load) for whatever reason: the load is abandoned only if it
  /// was the last waiter and does not outlive its waiters. Returns the waiter's continuation, if
  /// it was still waiting, and the abandoned load.
  @inlinable
  mutating func leave(waiter: UInt64, key: Key) -> (continuation: Continuation?, abandoned: Abandoned?) {
    guard let id = load(of: waiter, key: key) else { return (nil, nil) }
    let wasUrgent = loads[id]!.isUrgent
    let continuation = loads[id]!.waiters.remove(waiter)
    if !loads[id]!.pastSoftTimeout.isEmpty { loads[id]!.pastSoftTimeout.removeAll { $0.waiter == waiter } }
    urgencyChanged(of: id, wasUrgent: wasUrgent)
    guard loads[id]!.waiters.isEmpty, !loads[id]!.outlivesWaiters else { return (continuation, nil) }
    let load = remove(id)
    // A batch's task goes on while another of its loads is wanted.
    let task = load.batch == nil ? load.task : leaveBatch(load.batch!)
    return (continuation, Abandoned(id: id, task: task, token: load.token))
  }

  // MARK: Soft timeouts

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
    urgencyChanged(of: id, wasUrgent: wasUrgent)
    return continuation
  }

  /// Removes load `id` and returns its waiters in arrival order, and what the owner needs to
  /// know of it; `nil` if the load was abandoned (it is out of the table already).
  @inlinable
  mutating func finish(_ id: UInt64) -> Finished? {
    guard let key = loads[id]?.key else { return nil }
    let wasJoinable = joinable[key] == id
    let load = remove(id)
    if let batch = load.batch { _ = leaveBatch(batch) }
    return Finished(waiters: load.waiters, isRefresh: load.isRefresh, wasJoinable: wasJoinable)
  }

  // MARK: Refreshes

  /// Starts a background refresh of `key`, unless a load of it is joinable already (which will
  /// bring a fresh value as well, and becomes the refresh).
  @discardableResult
  @usableFromInline
  mutating func startRefresh(_ key: Key, priority: TaskPriority, newID: UInt64? = nil) -> RefreshStart {
    if let id = joinable[key] {
      // The load becomes the refresh: it no longer waits for urgent work (a prefetch held at
      // the gate), and goes on when its waiters leave.
      loads[id]!.isRefresh = true
      if let gate = loads[id]!.gate { openGate(gate) }
      return .coalesced
    }
    let id = makeID(newID)
    var load = Load(key: key, waiters: Waiters(), priority: priority, skipsTopLayer: false)
    load.isRefresh = true
    loads[id] = load
    joinable[key] = id
    effects.startedLoads.append(StartedLoad(id: id, key: key, priority: priority, batchable: false, isRefresh: true))
    running.insert(id)
    return .started(id: id)
  }

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

  /// Whether load `id` stores below the top layer only.
  @usableFromInline
  func skipsTopLayer(_ id: UInt64) -> Bool { loads[id]?.skipsTopLayer ?? false }

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
    guard let id = joinable.removeValue(forKey: key) else { return }
    detached[key, default: []].append(id)
  }

  /// Makes every load unjoinable.
  @inlinable
  mutating func detachAll() {
    for key in Array(joinable.keys) { detach(key) }
  }

  /// The number of requests waiting for a load of `key`.
  @inlinable
  func waiterCount(for key: Key) -> Int {
    let ids = (joinable[key].map { [$0] } ?? []) + (detached[key] ?? [])
    return ids.reduce(0) { $0 + (loads[$1]?.waiters.count ?? 0) }
  }

  // MARK: Urgent and background loads

  /// Updates the count of urgent loads after the waiters of load `id` changed.
  @usableFromInline
  mutating func urgencyChanged(of id: UInt64, wasUrgent: Bool) {
    guard let load = loads[id], load.isUrgent != wasUrgent else { return }
    if load.isUrgent {
      urgentLoads += 1
      if urgentLoads == 1 { effects.urgencyChanged = true }
      // Promoted: it (and its batch) no longer waits for other urgent work.
      if let gate = load.gate { openGate(gate) }
    } else {
      urgencyLosses &+= 1
      urgentLoadsDecreased()
    }
  }

  @usableFromInline
  mutating func urgentLoadsDecreased() {
    urgentLoads -= 1
    guard urgentLoads == 0 else { return }
    effects.urgencyChanged = true
    for gate in Array(gates.keys) { openGate(gate) }
  }

  /// Lets the task held at `gate` go on.
  @usableFromInline
  mutating func openGate(_ gate: UInt64) {
    guard let held = gates.removeValue(forKey: gate) else { return }
    for id in held.loads { loads[id]?.gate = nil }
    effects.openedGates.append((held.continuation, cancelled: false))
  }

  /// Makes the waiters of every load of `key` background: the loads no longer count as urgent,
  /// wait at the gate before they next ask the origin, and are promoted again by the next
  /// request. Returns whether a load of `key` was urgent.
  mutating func demote(_ key: Key) -> Bool {
    let ids = (joinable[key].map { [$0] } ?? []) + (detached[key] ?? [])
    var demoted = false
    for id in ids where loads[id]?.isUrgent == true {
      loads[id]!.waiters.demoteAll()
      urgencyChanged(of: id, wasUrgent: true)
      demoted = true
    }
    return demoted
  }

  /// The task running loads `ids` is about to ask the origin; decides whether it waits at a
  /// gate, holding `continuation` then.
  mutating func enterGate(_ ids: [UInt64], continuation: Gate) -> GateDecision {
    let live = ids.filter { loads[$0] != nil }
    guard !live.isEmpty else { return .abandoned }
    // A refresh does not wait, nor a load kept after a soft timeout: a busy service always has
    // urgent loads in flight, and its stale entries would never be refreshed.
    guard urgentLoads > 0, !live.contains(where: { loads[$0]!.isUrgent || loads[$0]!.outlivesWaiters }) else {
      return .proceed
    }
    nextGateID &+= 1
    gates[nextGateID] = (continuation, live)
    for id in live { loads[id]!.gate = nextGateID }
    return .held(nextGateID)
  }

  /// Takes back the continuation held at the gate of loads `ids` (their task was cancelled), if
  /// one is still held.
  mutating func leaveGate(of ids: [UInt64]) -> Gate? {
    guard let gate = ids.first(where: { loads[$0]?.gate != nil }).flatMap({ loads[$0]?.gate }),
      let held = gates.removeValue(forKey: gate)
    else { return nil }
    for id in held.loads { loads[id]?.gate = nil }
    return held.continuation
  }

  /// The number of loads waiting at the gate.
  var loadsAtGate: Int { gates.values.reduce(0) { $0 + $1.loads.count } }
}

extension LoadTableStateMachine: Sendable where Continuation: Sendable, Gate: Sendable, Stale: Sendable {}
