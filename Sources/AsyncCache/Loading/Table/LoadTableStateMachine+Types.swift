// The records and answers of the load table's machine: what a load is, and what the machine's
// calls come to.
extension LoadTableStateMachine {
  /// One load in flight, and the requests waiting for it.
  @usableFromInline
  struct Load {
    @usableFromInline let key: Key
    @usableFromInline var waiters: Waiters<Continuation>
    @usableFromInline var priority: TaskPriority
    @usableFromInline var task: Task<Void, Never>?
    @usableFromInline var token: ReadToken<Key>?
    /// Whether the load stores its value below the top layer only (every waiter so far is a
    /// prefetch that asked for that). Once cleared, never set again.
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
      _ waiter: UInt64, _ continuation: Continuation, priority: TaskPriority, isUrgent: Bool, isRequest: Bool,
      skipsTopLayer: Bool
    ) -> (becameUrgent: Bool, escalate: Task<Void, Never>?) {
      let becameUrgent = isUrgent && waiters.urgentCount == 0
      waiters.append(waiter, continuation, isUrgent: isUrgent, isRequest: isRequest)
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

  /// What a waiter's joining came to.
  @usableFromInline
  enum JoinResult {
    /// The request joined load `id`; escalate its task when given.
    case joined(id: UInt64, escalate: Task<Void, Never>?)
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

    /// A request (single or bulk) wants the value, and is counted as a hit or a miss; a
    /// prefetch is neither.
    @inlinable
    var isRequest: Bool { self != .prefetch }

    /// Requests are urgent; a prefetch is background work until a request joins its load.
    @inlinable
    var isUrgent: Bool { isRequest }
  }

  /// Why a waiter leaves its load.
  @usableFromInline
  enum Departure: Sendable {
    /// Its task was cancelled, or it withdrew.
    case cancelled
    /// Its hard timeout passed.
    case timedOut
    /// It would have waited for a load that waits for it (counted as neither).
    case refused
  }

  /// A load registered in the table, whose task the owner must start and then attach (see
  /// ``attach(_:to:)`` and ``attachBatch(_:task:)``), with what its task needs to know of it
  /// from the start.
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
    /// A background refresh.
    @usableFromInline let isRefresh: Bool
    /// Started by a prefetch that stores below the top layer only: whether it still does is
    /// asked when the value is stored (a load started without it never takes it up).
    @usableFromInline let skipsTopLayer: Bool
    /// Started urgent, when ``LoadTableStateMachine/urgencyLosses`` was this: while the count
    /// is unchanged, the load is still urgent and need not stop at the gate.
    @usableFromInline let urgentAt: UInt64?

    @inlinable
    init(
      id: UInt64, key: Key, priority: TaskPriority, batchable: Bool, isRefresh: Bool = false,
      skipsTopLayer: Bool = false, urgentAt: UInt64? = nil
    ) {
      self.id = id
      self.key = key
      self.priority = priority
      self.batchable = batchable
      self.isRefresh = isRefresh
      self.skipsTopLayer = skipsTopLayer
      self.urgentAt = urgentAt
    }
  }

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

  /// A load that finished (see ``finish(_:)``).
  @usableFromInline
  struct Finished {
    /// Its waiters, in arrival order (with ``Waiters/requestCount``, the requests among them).
    @usableFromInline var waiters: Waiters<Continuation>
    /// It was a background refresh.
    @usableFromInline var isRefresh: Bool
    /// It was still joinable (no write detached it): what it learnt may be kept for the key.
    @usableFromInline var wasJoinable: Bool

    @inlinable
    init(waiters: Waiters<Continuation>, isRefresh: Bool, wasJoinable: Bool) {
      self.waiters = waiters
      self.isRefresh = isRefresh
      self.wasJoinable = wasJoinable
    }
  }

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

  /// What a refresh came to (see ``startRefresh(_:priority:)``).
  @usableFromInline
  enum RefreshStart {
    /// A load of the key was joinable: it became the refresh.
    case coalesced
    /// Load `id` was registered, left in ``Effects/startedLoads`` for the owner to run.
    case started(id: UInt64)
  }

  /// What a load task about to ask the origin must do.
  @usableFromInline
  enum GateDecision {
    /// Go on: no urgent load is in flight, or one of its loads is urgent.
    case proceed
    /// Wait: the continuation is held at this gate until urgent work ends or a load is promoted.
    case held(UInt64)
    /// Stop: none of its loads is wanted any more (its task is being cancelled).
    case abandoned
  }
}

extension LoadTableStateMachine.Load: Sendable where Continuation: Sendable, Gate: Sendable, Stale: Sendable {}
extension LoadTableStateMachine.Effects: Sendable where Gate: Sendable {}
extension LoadTableStateMachine.SoftTimeout: Sendable where Continuation: Sendable, Stale: Sendable {}
extension LoadTableStateMachine.Finished: Sendable where Continuation: Sendable {}
