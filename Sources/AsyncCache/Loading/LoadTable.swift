/// The loads in flight of a ``LoadingCache`` and the requests waiting for them: the owner of a
/// ``LoadTableStateMachine``, which decides, while this type does what the decisions call for.
///
/// Every change goes through ``withLock(_:)``: the change runs under the lock, and once the lock
/// is released the owner opens the gates the machine opened, tells the urgency observers that
/// urgent work started or ended, and resumes the test watchers whose condition now holds. So no
/// continuation is resumed and no observer is called while the table is locked.
@usableFromInline
final class LoadTable<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  @usableFromInline
  typealias Machine = LoadTableStateMachine<Key, LoadWaiter<Key, Value>, UnsafeContinuation<Void, any Error>>

  @usableFromInline
  struct State: Sendable {
    @usableFromInline var machine = Machine()
    @usableFromInline var observers = UrgencyObservers()
    @usableFromInline var watchers = StateWatchers<Machine>()

    @inlinable
    init() {}
  }

  @usableFromInline let state = Locked(State())

  @inlinable
  init() {}

  /// Runs `body` on the state machine under the lock, then does what it left to do.
  @inlinable
  func withLock<Result>(_ body: (inout Machine) -> Result) -> Result {
    let (result, effects, observers, ready) = state.withLock { state in
      let result = body(&state.machine)
      let effects = state.machine.takeEffects()
      let observers = effects.urgencyChanged ? state.observers.all : []
      let ready = state.watchers.isEmpty ? [] : state.watchers.takeSatisfied(by: state.machine)
      return (result, effects, observers, ready)
    }
    for (gate, cancelled) in effects.openedGates {
      if cancelled { gate.resume(throwing: CancellationError()) } else { gate.resume() }
    }
    for observer in observers { observer() }
    for watcher in ready { watcher.resume() }
    return result
  }

  /// Registers `observer`, called each time urgent loads start being in flight or stop being;
  /// returns the identifier to remove it with. It is called after the change, outside the lock,
  /// and may be called late or twice for one change: it should read the state it cares about
  /// (yielding to an `AsyncStream` that wakes a reader of ``LoadingCache/hasUrgentLoads`` is the
  /// intended use).
  func addUrgencyObserver(_ observer: @escaping @Sendable () -> Void) -> UInt64 {
    state.withLock { $0.observers.add(observer) }
  }

  func removeUrgencyObserver(_ id: UInt64) {
    state.withLock { $0.observers.remove(id) }
  }

  /// Returns once `condition` holds for the table at the end of a change (for tests: it
  /// replaces polling).
  func waitUntil(_ condition: @escaping @Sendable (Machine) -> Bool) async {
    await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
      let holds = state.withLock { state -> Bool in
        if condition(state.machine) { return true }
        state.watchers.add(condition, continuation)
        return false
      }
      if holds { continuation.resume() }
    }
  }
}

/// The callbacks told when urgent loads start or stop being in flight (one per running
/// ``AsyncPrefetcher``), by identifier.
@usableFromInline
struct UrgencyObservers: Sendable {
  @usableFromInline var byID: [UInt64: @Sendable () -> Void] = [:]
  @usableFromInline var nextID: UInt64 = 0

  @inlinable
  init() {}

  @usableFromInline
  var all: [@Sendable () -> Void] { Array(byID.values) }

  mutating func add(_ observer: @escaping @Sendable () -> Void) -> UInt64 {
    nextID += 1
    byID[nextID] = observer
    return nextID
  }

  mutating func remove(_ id: UInt64) {
    byID[id] = nil
  }
}

/// Tasks waiting until a condition on a state holds (tests wait this way instead of polling).
@usableFromInline
struct StateWatchers<Watched>: Sendable {
  @usableFromInline var waiting:
    [(condition: @Sendable (Watched) -> Bool, continuation: UnsafeContinuation<Void, Never>)] =
      []

  @inlinable
  init() {}

  @inlinable
  var isEmpty: Bool { waiting.isEmpty }

  mutating func add(_ condition: @escaping @Sendable (Watched) -> Bool, _ continuation: UnsafeContinuation<Void, Never>)
  {
    waiting.append((condition, continuation))
  }

  /// Removes the watchers whose condition holds for `state` and returns their continuations, to
  /// resume once the lock is released.
  @usableFromInline
  mutating func takeSatisfied(by state: Watched) -> [UnsafeContinuation<Void, Never>] {
    var ready: [UnsafeContinuation<Void, Never>] = []
    waiting.removeAll { watcher in
      guard watcher.condition(state) else { return false }
      ready.append(watcher.continuation)
      return true
    }
    return ready
  }
}
