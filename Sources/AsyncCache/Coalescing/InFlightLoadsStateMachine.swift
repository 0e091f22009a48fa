/// The in-flight table of a ``LoadingCache``: at most one joinable load per key, and the
/// requests (waiters) that wait for each load.
///
/// Rules (DESIGN.md, "Semantics"):
/// - a request for a key with a joinable load joins it; otherwise it starts a load;
/// - a cancelled waiter leaves alone; the load is cancelled only when its last waiter leaves,
///   and is then no longer joinable, so the next request starts afresh;
/// - a write or removal of the key *detaches* the load: it keeps running for its waiters, but new
///   requests start afresh;
/// - a finished load removes only its own record.
///
/// Pure and synchronous; continuations are stored here and handed back to be resumed outside
/// the lock. Generic over the continuation type so that tests can drive it with plain values.
struct InFlightLoadsStateMachine<Key: Hashable & Sendable, Continuation> {
  struct Load {
    let key: Key
    var waiters: [UInt64: Continuation]
    var priority: TaskPriority
    var task: Task<Void, Never>?
    var token: ReadToken<Key>?
  }

  /// A load that its last waiter left.
  struct Abandoned {
    var task: Task<Void, Never>?
    var token: ReadToken<Key>?
  }

  enum JoinResult {
    /// The request joined a load; escalate its task when given.
    case joined(escalate: Task<Void, Never>?)
    /// The request started load `id`; the caller must ``attach(_:token:to:)`` its task.
    case started(id: UInt64)
  }

  private(set) var joinable: [Key: UInt64] = [:]
  private(set) var loads: [UInt64: Load] = [:]
  private(set) var waiterLoads: [UInt64: UInt64] = [:]
  private var nextLoadID: UInt64 = 0
  private(set) var counters = LoadingCacheCounters()
  /// Tasks waiting until a key has enough waiters (tests use this instead of polling).
  private var watchers: [(key: Key, count: Int, continuation: UnsafeContinuation<Void, Never>)] = []

  /// No load and no waiter is registered.
  var isEmpty: Bool { joinable.isEmpty && loads.isEmpty && waiterLoads.isEmpty }

  mutating func join(
    _ key: Key,
    waiter: UInt64,
    continuation: Continuation,
    priority: TaskPriority
  ) -> JoinResult {
    defer { if !watchers.isEmpty { resumeSatisfiedWatchers() } }
    if let id = joinable[key] {
      loads[id]!.waiters[waiter] = continuation
      waiterLoads[waiter] = id
      counters.coalesced += 1
      guard priority > loads[id]!.priority else { return .joined(escalate: nil) }
      loads[id]!.priority = priority
      return .joined(escalate: loads[id]!.task)
    }
    nextLoadID &+= 1
    let id = nextLoadID
    loads[id] = Load(key: key, waiters: [waiter: continuation], priority: priority)
    joinable[key] = id
    waiterLoads[waiter] = id
    counters.loads += 1
    return .started(id: id)
  }

  mutating func attach(_ task: Task<Void, Never>, token: ReadToken<Key>, to id: UInt64) {
    loads[id]?.task = task
    loads[id]?.token = token
  }

  /// Raises the priority of the load that `waiter` waits for; returns its task if it must be
  /// escalated.
  mutating func escalate(waiter: UInt64, to priority: TaskPriority) -> Task<Void, Never>? {
    guard let id = waiterLoads[waiter], let load = loads[id], priority > load.priority else { return nil }
    loads[id]!.priority = priority
    return load.task
  }

  /// Removes a cancelled waiter. Returns its continuation (to resume with `CancellationError`),
  /// if it was still waiting, and the load if it was the last waiter.
  mutating func cancel(waiter: UInt64) -> (continuation: Continuation?, abandoned: Abandoned?) {
    guard let id = waiterLoads.removeValue(forKey: waiter) else { return (nil, nil) }
    let continuation = loads[id]!.waiters.removeValue(forKey: waiter)
    counters.cancelledWaiters += 1
    guard loads[id]!.waiters.isEmpty else { return (continuation, nil) }
    let load = loads.removeValue(forKey: id)!
    if joinable[load.key] == id { joinable[load.key] = nil }
    counters.cancelledLoads += 1
    return (continuation, Abandoned(task: load.task, token: load.token))
  }

  /// Removes load `id` and returns its waiters. Does nothing if the load was abandoned.
  mutating func finish(_ id: UInt64, failed: Bool) -> [Continuation] {
    guard let load = loads.removeValue(forKey: id) else { return [] }
    if joinable[load.key] == id { joinable[load.key] = nil }
    for waiter in load.waiters.keys { waiterLoads[waiter] = nil }
    if failed { counters.failures += 1 }
    return Array(load.waiters.values)
  }

  /// Makes the load of `key`, if any, unjoinable: later requests start afresh.
  mutating func detach(_ key: Key) {
    joinable[key] = nil
  }

  /// Makes every load unjoinable.
  mutating func detachAll() {
    joinable.removeAll()
  }

  /// The number of requests waiting for a load of `key`.
  func waiterCount(for key: Key) -> Int {
    loads.values.reduce(0) { $0 + ($1.key == key ? $1.waiters.count : 0) }
  }

  /// Registers a watcher resumed once `key` has `count` waiters; returns `false` when it has
  /// them already.
  mutating func watch(_ key: Key, count: Int, continuation: UnsafeContinuation<Void, Never>) -> Bool {
    if waiterCount(for: key) >= count { return false }
    watchers.append((key, count, continuation))
    return true
  }

  private mutating func resumeSatisfiedWatchers() {
    var remaining: [(key: Key, count: Int, continuation: UnsafeContinuation<Void, Never>)] = []
    for watcher in watchers {
      // Resuming under the lock is fine here: the continuation only enqueues the watcher's task.
      if waiterCount(for: watcher.key) >= watcher.count {
        watcher.continuation.resume()
      } else {
        remaining.append(watcher)
      }
    }
    watchers = remaining
  }
}

/// Counters kept with the in-flight table.
struct LoadingCacheCounters: Sendable {
  var loads = 0
  var coalesced = 0
  var failures = 0
  var cancelledWaiters = 0
  var cancelledLoads = 0
}

extension InFlightLoadsStateMachine: Sendable where Continuation: Sendable {}
extension InFlightLoadsStateMachine.Load: Sendable where Continuation: Sendable {}
