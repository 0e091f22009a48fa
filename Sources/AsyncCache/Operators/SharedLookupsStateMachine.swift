/// The lookups in flight of a ``CoalescingLayer``: which lookup each key's new requests join,
/// and who waits for each lookup.
///
/// A pure value: the layer keeps it behind a lock and resumes the waiters it returns after
/// releasing the lock. Generic over the waiter and the work (a task) so that tests can drive
/// it with plain values.
struct SharedLookupsStateMachine<Key: Hashable, Waiter, Work> {
  /// What a request for a key must do.
  enum JoinAction: Equatable {
    /// It is the first: start lookup `lookupID` and hand its work to ``started(_:work:)``.
    case start(lookupID: UInt64)
    /// It joined the lookup in flight.
    case joined
    /// Its task is cancelled: it must leave at once.
    case cancelled
  }

  fileprivate struct Lookup {
    var key: Key
    var work: Work?
    var waiters: [UInt64: Waiter]
    /// The highest priority of its waiters so far: the priority its work runs at.
    var priority: TaskPriority
  }

  // The lookup new requests for a key join. A write detaches it: its waiters still get its
  // result, but requests that come after the write start a new lookup.
  private var current: [Key: UInt64] = [:]
  private var lookups: [UInt64: Lookup] = [:]
  private var lookupOfWaiter: [UInt64: UInt64] = [:]
  private var nextLookupID: UInt64 = 0
  /// Tests waiting until `count` requests share the lookup of `key`, by identifier.
  var watchers = CountWatchers<Key>()

  /// The lookups in flight, detached ones included.
  var lookupCount: Int { lookups.count }

  /// The requests waiting for a lookup.
  var waiterCount: Int { lookupOfWaiter.count }

  /// The requests waiting for the lookup of `key` that new requests would join.
  func waiterCount(for key: Key) -> Int {
    current[key].flatMap { lookups[$0]?.waiters.count } ?? 0
  }

  /// Request `id` for `key` joins the key's lookup, or starts one. The layer then escalates the
  /// lookup if it must (``raise(waiter:to:)``) and, after that, calls
  /// ``resumeSatisfiedWatchers()``: a test that waits for the requests to share a lookup finds
  /// it at their highest priority.
  mutating func join(
    _ key: Key, waiter id: UInt64, _ waiter: Waiter, priority: TaskPriority, isCancelled: Bool
  ) -> JoinAction {
    // Cancellation sets the flag before it runs the cancellation handler: if the handler found
    // nothing to remove because it ran before this join, the flag is already set.
    if isCancelled { return .cancelled }
    if let lookupID = current[key] {
      lookupOfWaiter[id] = lookupID
      lookups[lookupID]?.waiters[id] = waiter
      return .joined
    }
    nextLookupID += 1
    lookups[nextLookupID] = Lookup(key: key, work: nil, waiters: [id: waiter], priority: priority)
    lookupOfWaiter[id] = nextLookupID
    current[key] = nextLookupID
    return .start(lookupID: nextLookupID)
  }

  /// Records the work of lookup `lookupID`, so that the last waiter to leave can cancel it.
  mutating func started(_ lookupID: UInt64, work: Work) {
    lookups[lookupID]?.work = work
  }

  /// Request `id` now runs at `priority`. Returns its lookup's work, to be escalated, when that
  /// is higher than the lookup's: a shared lookup runs at the highest priority of its waiters.
  mutating func raise(waiter id: UInt64, to priority: TaskPriority) -> Work? {
    guard let lookupID = lookupOfWaiter[id], let lookup = lookups[lookupID], priority > lookup.priority else {
      return nil
    }
    lookups[lookupID]?.priority = priority
    return lookup.work
  }

  /// Request `id` leaves its lookup (its task was cancelled). Returns its waiter, to be resumed
  /// with `CancellationError` (`nil` when the lookup already finished), and the lookup's work,
  /// to be cancelled, when it was the last waiter.
  mutating func leave(waiter id: UInt64) -> (waiter: Waiter?, abandoned: Work?) {
    guard let lookupID = lookupOfWaiter.removeValue(forKey: id),
      let waiter = lookups[lookupID]?.waiters.removeValue(forKey: id)
    else { return (nil, nil) }
    guard let lookup = lookups[lookupID], lookup.waiters.isEmpty else { return (waiter, nil) }
    lookups[lookupID] = nil
    if current[lookup.key] == lookupID { current[lookup.key] = nil }
    return (waiter, lookup.work)
  }

  /// Lookup `lookupID` ended. Returns its waiters, to be resumed with its result (none when
  /// they all left).
  mutating func finish(_ lookupID: UInt64) -> [Waiter] {
    guard let lookup = lookups.removeValue(forKey: lookupID) else { return [] }
    if current[lookup.key] == lookupID { current[lookup.key] = nil }
    for id in lookup.waiters.keys { lookupOfWaiter[id] = nil }
    return Array(lookup.waiters.values)
  }

  /// Requests for `key` that come from now on start a new lookup.
  mutating func detach(_ key: Key) {
    current[key] = nil
  }

  /// Requests for any key that come from now on start new lookups.
  mutating func detachAll() {
    current.removeAll()
  }

  /// Registers a watcher resumed once `count` requests wait for the lookup of `key`; returns
  /// `false` (and does not keep it) when they already do.
  mutating func watch(
    id: UInt64, key: Key, count: Int, continuation: UnsafeContinuation<Void, Never>
  ) -> Bool {
    watchers.watch(id: id, key, count: count, current: waiterCount(for: key), continuation: continuation)
  }

  /// Resumes the watchers whose count of waiters is reached.
  mutating func resumeSatisfiedWatchers() {
    guard !watchers.isEmpty else { return }
    let machine = self
    watchers.resumeSatisfied { machine.waiterCount(for: $0) }
  }
}

extension SharedLookupsStateMachine: Sendable where Key: Sendable, Waiter: Sendable, Work: Sendable {}
extension SharedLookupsStateMachine.Lookup: Sendable where Key: Sendable, Waiter: Sendable, Work: Sendable {}
