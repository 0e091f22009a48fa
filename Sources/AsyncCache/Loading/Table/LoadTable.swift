public import Synchronization  // Atomic, in inlinable code

/// The loads in flight of a ``LoadingCache`` and the requests waiting for them: the owner of a
/// ``LoadTableStateMachine``, which decides, while this type does what the decisions call for,
/// and keeps what the machine does not: the cache's load counters, the errors negative caching
/// remembers, and whether the cache is closed.
///
/// The cache changes the table through named operations (`LoadTable+Operations.swift`): join,
/// leave, time out, finish, the gate, refresh, detach, and the snapshots. Each one is one
/// critical section through ``update(_:then:)``, which begins the chain read of each load
/// registered there and creates and attaches its task (through its ``LoadRunner``), so that an
/// abandonment always finds the read to overtake and the task to cancel. Once the lock is
/// released, the operation does its own part (escalations, the dependency graph, cancelling an
/// abandoned load's task), then the table opens the gates the machine opened, tells the urgency
/// observers that urgent work started or ended, and resumes the test watchers whose condition
/// now holds. So no continuation is resumed, no event emitted and no observer or user closure
/// called while the table is locked (a task created there cannot touch the table before the
/// lock is released), and every kind of request (a request, a bulk request, a prefetch, a
/// refresh) starts its load the same way.
@usableFromInline
final class LoadTable<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  @usableFromInline
  typealias Machine = LoadTableStateMachine<Key, LoadWaiter<Key, Value>, UnsafeContinuation<Void, any Error>, Stale>

  /// A load registered, whose task the runner starts.
  @usableFromInline
  typealias StartedLoad = Machine.StartedLoad

  /// Who waits for a load.
  @usableFromInline
  typealias JoinKind = Machine.JoinKind

  /// A stale entry a load found on its way, with its layer: what requests past their soft
  /// timeout are answered with.
  @usableFromInline
  typealias Stale = (entry: CacheEntry<Value>, tier: Int)

  @usableFromInline
  struct State: Sendable {
    @usableFromInline var machine = Machine()
    @usableFromInline var counters = LoadCounters()
    /// The errors remembered by negative caching.
    @usableFromInline var negatives = NegativeEntries<Key>()
    /// ``close()`` was called: no request joins a load any more.
    @usableFromInline var isClosed = false
    @usableFromInline var observers = UrgencyObservers()
    @usableFromInline var watchers = StateWatchers<Machine>()
    /// Runs the loads; weak, since the runner owns the table.
    @usableFromInline weak var runner: (any LoadRunner<Key, Value>)?

    @inlinable
    init() {}
  }

  @usableFromInline let state = Locked(State())
  /// The machine's ``LoadTableStateMachine/urgencyLosses``, published after each change, so that
  /// a load's task started urgent can pass the gate without the lock while it is unchanged.
  @usableFromInline let urgencyLosses = Atomic<UInt64>(0)
  /// The last load identifier handed out.
  @usableFromInline let loadIDs = Atomic<UInt64>(0)
  /// Whether the table is closed, readable without the lock (it is set under it).
  @usableFromInline let closed = Atomic<Bool>(false)

  @inlinable
  init() {}

  /// Sets who runs the loads (once, when the owner is initialized).
  func setRunner(_ runner: some LoadRunner<Key, Value>) {
    state.withLock { $0.runner = runner }
  }

  /// Runs `body` on the state under the lock, then `then` with its result, then what the change
  /// left to do (see the type's documentation). The loads `body` registered have their read
  /// begun and their task started and attached in the same critical section, so a load in the
  /// table always has its read and its task; the tasks cannot touch the table before the lock
  /// is released. `then` runs before the watchers are told: a request that joined a load
  /// escalates the load's task there, so that a test watching the table
  /// (``waitUntil(orCancellation:_:)``) sees the join only once the load runs at the request's
  /// priority.
  @inlinable
  func update<Result>(_ body: (inout State) -> Result, then: (Result) -> Void = { _ in }) -> Result {
    let (result, deferred) = state.withLock { state -> (Result, Deferred?) in
      let result = body(&state)
      // Published under the lock, so that it never goes back.
      let losses = state.machine.urgencyLosses
      if losses != urgencyLosses.load(ordering: .relaxed) { urgencyLosses.store(losses, ordering: .releasing) }
      // Most changes (a request joining a load) leave nothing to do.
      guard !state.machine.effects.isEmpty || !state.watchers.isEmpty else { return (result, nil) }
      var effects = state.machine.takeEffects()
      if !effects.startedLoads.isEmpty { start(&effects.startedLoads, in: &state) }
      let observers = effects.urgencyChanged ? state.observers.all : []
      let ready = state.watchers.isEmpty ? [] : state.watchers.takeSatisfied(by: state.machine)
      return (result, Deferred(effects: effects, observers: observers, ready: ready))
    }
    then(result)
    if let deferred { perform(deferred) }
    return result
  }

  /// What a change left to do once the lock is released.
  @usableFromInline
  struct Deferred {
    @usableFromInline var effects: Machine.Effects
    @usableFromInline var observers: [@Sendable () -> Void]
    @usableFromInline var ready: [UnsafeContinuation<Void, Never>]

    @inlinable
    init(effects: Machine.Effects, observers: [@Sendable () -> Void], ready: [UnsafeContinuation<Void, Never>]) {
      self.effects = effects
      self.observers = observers
      self.ready = ready
    }
  }

  /// Opens the gates a change opened, tells the urgency observers and resumes the watchers
  /// whose condition now holds, in that order.
  @usableFromInline
  func perform(_ deferred: Deferred) {
    for (gate, cancelled) in deferred.effects.openedGates {
      if cancelled { gate.resume(throwing: CancellationError()) } else { gate.resume() }
    }
    for observer in deferred.observers { observer() }
    for watcher in deferred.ready { watcher.resume() }
  }

  /// Begins the chain read of each of `loads`, just registered, and starts their tasks through
  /// the runner (one per load, or one per batch), and attaches them: under the lock, so that an
  /// abandonment always finds the read to overtake and the task to cancel.
  @usableFromInline
  func start(_ loads: inout [Machine.StartedLoad], in state: inout State) {
    // The runner owns the table: while a request can reach the table, it is there.
    guard let runner = state.runner else { return assertionFailure("a load was registered without a runner") }
    for index in loads.indices {
      let token = runner.beginRead(loads[index].key)
      loads[index].token = token
      state.machine.setToken(token, for: loads[index].id)
    }
    for launch in runner.launch(loads) {
      if launch.isBatch {
        _ = state.machine.attachBatch(launch.ids, task: launch.task)
      } else {
        _ = state.machine.attach(launch.task, to: launch.ids[0])
      }
    }
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
  /// replaces polling), or, when `orCancellation`, once the calling task is cancelled (so that a
  /// test's time limit ends a wait that would never end).
  func waitUntil(orCancellation: Bool = false, _ condition: @escaping @Sendable (Machine) -> Bool) async {
    let id = state.withLock { $0.watchers.makeID() }
    await withTaskCancellationHandler {
      await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
        let holds = state.withLock { state -> Bool in
          if condition(state.machine) || (orCancellation && Task.isCancelled) { return true }
          state.watchers.add(id, condition, continuation)
          return false
        }
        if holds { continuation.resume() }
      }
    } onCancel: {
      guard orCancellation else { return }
      state.withLock { $0.watchers.remove(id) }?.resume()
    }
  }
}

/// Who runs the loads of a ``LoadTable``: its owner, the loading cache.
@usableFromInline
protocol LoadRunner<Key, Value>: AnyObject, Sendable {
  associatedtype Key: Hashable & Sendable
  associatedtype Value: Sendable

  /// Begins the chain read of a load of `key`, just registered. Called under the table's lock.
  func beginRead(_ key: Key) -> ReadToken<Key>

  /// Marks `token`, the read of a load its last waiter left, overtaken, so that its late value
  /// is not stored. Called under the table's lock, so that no request can start the fresh load
  /// that may follow before it is marked.
  func overtake(_ token: ReadToken<Key>)

  /// Starts a task for each of `loads` (registered by one change, in order, each with its read
  /// token), or one task for several (a batch). Called under the table's lock: it only creates
  /// the tasks, which touch the table once the lock is released. Each task tells the table
  /// when its body ends (``LoadTableStateMachine/taskEnded(_:)``).
  func launch(_ loads: [LoadTable<Key, Value>.StartedLoad]) -> [LoadLaunch]
}

/// The task that runs one load, or a batch of loads.
@usableFromInline
struct LoadLaunch: Sendable {
  @usableFromInline let ids: [UInt64]
  @usableFromInline let task: Task<Void, Never>
  /// One task for several loads (a batch origin call).
  @usableFromInline let isBatch: Bool

  @usableFromInline
  init(ids: [UInt64], task: Task<Void, Never>, isBatch: Bool) {
    self.ids = ids
    self.task = task
    self.isBatch = isBatch
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
    [(id: UInt64, condition: @Sendable (Watched) -> Bool, continuation: UnsafeContinuation<Void, Never>)] = []
  @usableFromInline var lastID: UInt64 = 0

  @inlinable
  init() {}

  @inlinable
  var isEmpty: Bool { waiting.isEmpty }

  /// An identifier for a new watcher.
  mutating func makeID() -> UInt64 {
    lastID &+= 1
    return lastID
  }

  mutating func add(
    _ id: UInt64, _ condition: @escaping @Sendable (Watched) -> Bool,
    _ continuation: UnsafeContinuation<Void, Never>
  ) {
    waiting.append((id, condition, continuation))
  }

  /// Removes watcher `id`; returns its continuation if it was still waiting.
  mutating func remove(_ id: UInt64) -> UnsafeContinuation<Void, Never>? {
    guard let index = waiting.firstIndex(where: { $0.id == id }) else { return nil }
    return waiting.remove(at: index).continuation
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
