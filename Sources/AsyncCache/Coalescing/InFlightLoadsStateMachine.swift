/// The in-flight table of a ``LoadingCache``: at most one joinable load per key, and the
/// requests (waiters) that wait for each load.
///
/// Rules (DESIGN.md, "Semantics"):
/// - a request for a key with a joinable load joins it; otherwise it starts a load;
/// - a cancelled waiter leaves alone; the load is cancelled only when its last waiter leaves,
///   and is then no longer joinable, so the next request starts afresh;
/// - a write or removal of the key *detaches* the load: it keeps running for its waiters, but new
///   requests start afresh;
/// - a finished load removes only its own record;
/// - waiters are answered in arrival order.
///
/// Pure and synchronous; continuations are stored here and handed back to be resumed outside
/// the lock. Generic over the continuation type so that tests can drive it with plain values.
@usableFromInline
struct InFlightLoadsStateMachine<Key: Hashable & Sendable, Continuation> {
  @usableFromInline
  struct Load {
    @usableFromInline let key: Key
    @usableFromInline var waiters: Waiters<Continuation>
    @usableFromInline var priority: TaskPriority
    @usableFromInline var task: Task<Void, Never>?
    @usableFromInline var token: ReadToken<Key>?

    @inlinable
    init(key: Key, waiters: Waiters<Continuation>, priority: TaskPriority) {
      self.key = key
      self.waiters = waiters
      self.priority = priority
    }
  }

  /// A load that its last waiter left.
  @usableFromInline
  struct Abandoned {
    @usableFromInline var task: Task<Void, Never>?
    @usableFromInline var token: ReadToken<Key>?

    @inlinable
    init(task: Task<Void, Never>?, token: ReadToken<Key>?) {
      self.task = task
      self.token = token
    }
  }

  @usableFromInline
  enum JoinResult {
    /// The request joined a load; escalate its task when given.
    case joined(escalate: Task<Void, Never>?)
    /// The request started load `id`; the caller must ``attach(_:token:to:)`` its task.
    case started(id: UInt64)
  }

  @usableFromInline var joinable: [Key: UInt64] = [:]
  @usableFromInline var loads: [UInt64: Load] = [:]
  /// Loads no longer joinable (a write detached them) but still answering their waiters.
  @usableFromInline var detached: [Key: [UInt64]] = [:]
  @usableFromInline var nextLoadID: UInt64 = 0
  @usableFromInline var counters = LoadingCacheCounters()
  /// Tasks waiting until a key has enough waiters (tests use this instead of polling).
  @usableFromInline var watchers: [(key: Key, count: Int, continuation: UnsafeContinuation<Void, Never>)] = []

  @inlinable
  init() {}

  /// No load and no waiter is registered.
  @inlinable
  var isEmpty: Bool { joinable.isEmpty && loads.isEmpty && detached.isEmpty }

  /// The number of requests waiting now.
  @inlinable
  var waiterCount: Int { loads.values.reduce(0) { $0 + $1.waiters.count } }

  @inlinable
  mutating func join(
    _ key: Key,
    waiter: UInt64,
    continuation: Continuation,
    priority: TaskPriority
  ) -> JoinResult {
    defer { if !watchers.isEmpty { resumeSatisfiedWatchers() } }
    if let id = joinable[key] {
      counters.coalesced += 1
      loads[id]!.waiters.append(waiter, continuation)
      guard priority > loads[id]!.priority else { return .joined(escalate: nil) }
      loads[id]!.priority = priority
      return .joined(escalate: loads[id]!.task)
    }
    nextLoadID &+= 1
    let id = nextLoadID
    var waiters = Waiters<Continuation>()
    waiters.append(waiter, continuation)
    loads[id] = Load(key: key, waiters: waiters, priority: priority)
    joinable[key] = id
    counters.loads += 1
    return .started(id: id)
  }

  @inlinable
  mutating func attach(_ task: Task<Void, Never>, token: ReadToken<Key>, to id: UInt64) {
    loads[id]?.task = task
    loads[id]?.token = token
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
    guard let id = load(of: waiter, key: key) else { return (nil, nil) }
    let continuation = loads[id]!.waiters.remove(waiter)
    counters.cancelledWaiters += 1
    guard loads[id]!.waiters.isEmpty else { return (continuation, nil) }
    let load = remove(id)
    counters.cancelledLoads += 1
    return (continuation, Abandoned(task: load.task, token: load.token))
  }

  /// Removes load `id` and returns its waiters in arrival order. Does nothing if the load was
  /// abandoned.
  @inlinable
  mutating func finish(_ id: UInt64, failed: Bool) -> [Continuation] {
    guard loads[id] != nil else { return [] }
    if failed { counters.failures += 1 }
    return remove(id).waiters.continuations
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
    return load
  }

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

  /// Registers a watcher resumed once `key` has `count` waiters; returns `false` when it has
  /// them already.
  @inlinable
  mutating func watch(_ key: Key, count: Int, continuation: UnsafeContinuation<Void, Never>) -> Bool {
    if waiterCount(for: key) >= count { return false }
    watchers.append((key, count, continuation))
    return true
  }

  @usableFromInline
  mutating func resumeSatisfiedWatchers() {
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

/// The requests waiting for one load, in arrival order.
///
/// An array sorted by waiter identifier (identifiers grow), so joining appends, a cancellation is
/// a binary search that leaves a tombstone, and the answers go out in arrival order: no hashing,
/// which matters when thousands of requests join one load.
@usableFromInline
struct Waiters<Continuation> {
  @usableFromInline var entries: [(id: UInt64, continuation: Continuation?)] = []
  /// The number of waiters still waiting (entries that are not tombstones).
  @usableFromInline var count = 0

  @inlinable
  init() {}

  @inlinable
  var isEmpty: Bool { count == 0 }

  /// Adds a waiter. Identifiers are taken before the lock, so one may arrive slightly out of
  /// order: it is moved back into place (a step or two, at most one per concurrent joiner).
  @inlinable
  mutating func append(_ id: UInt64, _ continuation: Continuation) {
    var index = entries.endIndex
    while index > entries.startIndex, entries[index - 1].id > id { index -= 1 }
    entries.insert((id, continuation), at: index)
    count += 1
  }

  @inlinable
  func index(of id: UInt64) -> Int? {
    var low = entries.startIndex
    var high = entries.endIndex
    while low < high {
      let middle = (low + high) / 2
      if entries[middle].id < id { low = middle + 1 } else { high = middle }
    }
    guard low < entries.endIndex, entries[low].id == id, entries[low].continuation != nil else { return nil }
    return low
  }

  @inlinable
  func contains(_ id: UInt64) -> Bool { index(of: id) != nil }

  /// Removes a waiter and returns its continuation, if it was waiting.
  @inlinable
  mutating func remove(_ id: UInt64) -> Continuation? {
    guard let index = index(of: id) else { return nil }
    let continuation = entries[index].continuation
    entries[index].continuation = nil
    count -= 1
    // Drop tombstones once they are the majority, keeping removals amortized O(log n).
    if entries.count > 16, count * 2 < entries.count { entries.removeAll { $0.continuation == nil } }
    return continuation
  }

  /// The continuations of the waiters, in arrival order.
  @inlinable
  var continuations: [Continuation] { entries.compactMap(\.continuation) }
}

/// Counters kept with the in-flight table.
@usableFromInline
struct LoadingCacheCounters: Sendable {
  @usableFromInline var loads = 0
  @usableFromInline var coalesced = 0
  @usableFromInline var failures = 0
  @usableFromInline var cancelledWaiters = 0
  @usableFromInline var cancelledLoads = 0

  @inlinable
  init() {}
}

extension InFlightLoadsStateMachine: Sendable where Continuation: Sendable {}
extension InFlightLoadsStateMachine.Load: Sendable where Continuation: Sendable {}
extension Waiters: Sendable where Continuation: Sendable {}
