/// The queue of a ``RequestCappedLayer``: how many requests run, and who waits for a slot, in
/// order of arrival.
///
/// A pure value: the layer keeps it behind a lock and resumes the waiters it returns after
/// releasing the lock. Generic over the waiter so that tests can drive it with plain values.
@usableFromInline
struct RequestCapStateMachine<Waiter> {
  /// What a request that asks for a slot must do.
  enum AcquireAction: Equatable {
    /// A slot is its own: go on.
    case proceed
    /// It is queued; a ``release()`` or a ``cancel(_:)`` returns its waiter.
    case wait
    /// It was cancelled while no slot was free: it must leave at once.
    case cancelled
  }

  /// The most requests that run at once.
  @usableFromInline let limit: Int
  /// The requests that hold a slot.
  @usableFromInline var running = 0
  @usableFromInline var waiting: [UInt64: Waiter] = [:]
  // Arrival order. Cancelled waiters leave `waiting` at once and their ids here are skipped when
  // reached, so that a cancellation costs O(1); `compact()` keeps the array from growing.
  @usableFromInline var order: [UInt64] = []
  @usableFromInline var head = 0
  /// Tests waiting until `count` requests queue, by identifier.
  @usableFromInline var watchers = CountWatchers<Void>()

  @usableFromInline
  init(limit: Int) {
    self.limit = limit
  }

  /// The requests queued for a slot.
  var waitingCount: Int { waiting.count }

  /// Takes a slot when one is free and nobody queues for one (a newcomer never overtakes the
  /// queue). Returns whether it did.
  @inlinable
  mutating func tryAcquire() -> Bool {
    guard running < limit, waiting.isEmpty else { return false }
    running += 1
    return true
  }

  /// Takes a slot for request `id`, or queues `waiter` for one unless the request is cancelled.
  mutating func acquire(_ id: UInt64, _ waiter: Waiter, isCancelled: Bool) -> AcquireAction {
    if tryAcquire() { return .proceed }
    if isCancelled { return .cancelled }
    waiting[id] = waiter
    order.append(id)
    resumeSatisfiedWatchers()
    return .wait
  }

  /// Removes request `id` from the queue. Returns its waiter, to be resumed with
  /// `CancellationError`, or `nil` when it is not queued (it holds a slot, or never queued).
  mutating func cancel(_ id: UInt64) -> Waiter? {
    guard let waiter = waiting.removeValue(forKey: id) else { return nil }
    compact()
    return waiter
  }

  /// Gives a slot back. Returns the first waiter in the queue, to be resumed: the slot passes
  /// to it. Returns `nil` when nobody waits, and the slot is free.
  @inlinable
  mutating func release() -> Waiter? {
    if waiting.isEmpty {
      // Nobody queues: the common case, kept free of the queue's bookkeeping.
      if !order.isEmpty { compact() }
      running -= 1
      return nil
    }
    while head < order.count {
      let id = order[head]
      head += 1
      if let waiter = waiting.removeValue(forKey: id) {
        compact()
        return waiter
      }
    }
    compact()
    running -= 1
    return nil
  }

  /// Registers a watcher resumed once `count` requests wait; returns `false` (and does not keep
  /// it) when they already do.
  mutating func watch(id: UInt64, count: Int, continuation: UnsafeContinuation<Void, Never>) -> Bool {
    watchers.watch(id: id, (), count: count, current: waiting.count, continuation: continuation)
  }

  private mutating func resumeSatisfiedWatchers() {
    guard !watchers.isEmpty else { return }
    let waitingCount = waiting.count
    watchers.resumeSatisfied { _ in waitingCount }
  }

  /// Drops the ids of requests that left: all of them when the queue is empty, else the ones
  /// before `head` once they are most of the array, or cancelled ones once they outnumber the
  /// live waiters.
  @usableFromInline
  mutating func compact() {
    if waiting.isEmpty {
      order.removeAll(keepingCapacity: true)
      head = 0
    } else if order.count - head > 2 * waiting.count + 32 {
      order = order[head...].filter { waiting[$0] != nil }
      head = 0
    } else if head > 32, head * 2 > order.count {
      order.removeFirst(head)
      head = 0
    }
  }
}

extension RequestCapStateMachine: Sendable where Waiter: Sendable {}
