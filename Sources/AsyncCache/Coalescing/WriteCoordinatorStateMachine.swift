/// The rules that keep the layers of a chain consistent while reads and writes overlap.
///
/// - Writes to one key are exclusive and first-come, first-served, so two writers never
///   interleave their per-layer steps (which could leave layer 0 with one value and layer 1 with
///   another).
/// - A write *overtakes* every read of its key that is in progress: such a read may still return
///   what it found, but must not write it back (back-fill) or commit a loaded value, because
///   that value may be older than the write. A read that starts while a write to its key is
///   pending is overtaken from the start.
/// - A global write (`removeAll`) overtakes every read, waits for the key writers in progress,
///   and holds back new ones until it is done.
///
/// Pure and synchronous: it stores continuations but never resumes them; every method returns
/// the continuations its caller must resume after releasing the lock. Generic over the
/// continuation type so that tests can drive it with plain values.
struct WriteCoordinatorStateMachine<Key: Hashable, Continuation> {
  struct Waiter {
    var id: UInt64
    var continuation: Continuation
  }

  struct KeyState {
    /// Reads in progress, and whether a write has overtaken each.
    var readers: [UInt64: Bool] = [:]
    var hasWriter = false
    /// Writers waiting for this key, in arrival order.
    var waiting: [Waiter] = []

    var isIdle: Bool { readers.isEmpty && !hasWriter && waiting.isEmpty }
  }

  private(set) var keys: [Key: KeyState] = [:]
  private(set) var activeKeyWriters = 0
  private(set) var globalWriterActive = false
  private(set) var globalWaiting: [Waiter] = []
  private var nextID: UInt64 = 0

  /// Whether nothing is registered: no reads, no writers, no waiters.
  var isIdle: Bool { keys.isEmpty && activeKeyWriters == 0 && !globalWriterActive && globalWaiting.isEmpty }

  mutating func makeID() -> UInt64 {
    nextID &+= 1
    return nextID
  }

  private var globalWritePending: Bool { globalWriterActive || !globalWaiting.isEmpty }

  // MARK: Reads

  /// Registers a read of `key` and returns its identifier.
  mutating func beginRead(_ key: Key) -> UInt64 {
    let id = makeID()
    var state = keys[key] ?? KeyState()
    state.readers[id] = state.hasWriter || !state.waiting.isEmpty || globalWritePending
    keys[key] = state
    return id
  }

  mutating func endRead(_ key: Key, id: UInt64) {
    guard var state = keys[key] else { return }
    state.readers[id] = nil
    store(state, for: key)
  }

  /// Whether a write overtook the read (an unknown read counts as overtaken).
  func isOvertaken(_ key: Key, id: UInt64) -> Bool {
    keys[key]?.readers[id] ?? true
  }

  /// Marks one read as overtaken, e.g. a load whose waiters all left.
  mutating func overtake(_ key: Key, id: UInt64) {
    guard keys[key]?.readers[id] != nil else { return }
    keys[key]?.readers[id] = true
  }

  // MARK: Key writers

  /// Records that a write to `key` is coming: every read in progress is overtaken. Then takes
  /// the key if it is free and no global write is pending.
  ///
  /// - Returns: `true` when the caller now holds the key; otherwise it must ``enqueue(_:id:continuation:)``.
  mutating func requestWrite(_ key: Key) -> Bool {
    requestWrite(key, exempt: nil)
  }

  /// What a read that wants to write back what it read is told.
  enum CommitRequest: Equatable {
    /// The reader holds the key.
    case acquired
    /// The reader must ``enqueue(_:id:continuation:)`` and check ``isOvertaken(_:id:)`` once it
    /// holds the key.
    case mustWait
    /// A write overtook the read: it must not write, and nothing changed.
    case overtaken
  }

  /// Like ``requestWrite(_:)`` for read `id` that wants to write back what it read (a back-fill
  /// or a load's commit). A read that is already overtaken is refused without side effects:
  /// it must not overtake the reads that started after the write that overtook it.
  mutating func requestCommit(_ key: Key, id: UInt64) -> CommitRequest {
    if isOvertaken(key, id: id) { return .overtaken }
    return requestWrite(key, exempt: id) ? .acquired : .mustWait
  }

  private mutating func requestWrite(_ key: Key, exempt: UInt64?) -> Bool {
    var state = keys[key] ?? KeyState()
    for id in state.readers.keys where id != exempt { state.readers[id] = true }
    let acquired = !state.hasWriter && state.waiting.isEmpty && !globalWritePending
    if acquired {
      state.hasWriter = true
      activeKeyWriters += 1
    }
    store(state, for: key)
    return acquired
  }

  /// Queues a writer that could not take `key` at once. Returns the continuation to resume
  /// now if the key became free in the meantime.
  mutating func enqueue(_ key: Key, id: UInt64, continuation: Continuation) -> Continuation? {
    var state = keys[key] ?? KeyState()
    if !state.hasWriter && state.waiting.isEmpty && !globalWritePending {
      state.hasWriter = true
      activeKeyWriters += 1
      keys[key] = state
      return continuation
    }
    state.waiting.append(Waiter(id: id, continuation: continuation))
    keys[key] = state
    return nil
  }

  /// The number of writers queued for `key`.
  func queuedWriterCount(for key: Key) -> Int {
    keys[key]?.waiting.count ?? 0
  }

  /// The number of reads of `key` in progress.
  func readerCount(for key: Key) -> Int {
    keys[key]?.readers.count ?? 0
  }

  /// Removes a waiting writer whose task was cancelled; returns its continuation (to resume
  /// with `CancellationError`) unless it was already granted the key.
  mutating func cancelWaiting(_ key: Key, id: UInt64) -> Continuation? {
    guard var state = keys[key], let index = state.waiting.firstIndex(where: { $0.id == id }) else { return nil }
    let waiter = state.waiting.remove(at: index)
    store(state, for: key)
    return waiter.continuation
  }

  /// Releases `key` and returns the writers to resume: the next writer of this key, or the
  /// global writer once no key writer is left.
  mutating func releaseWrite(_ key: Key) -> [Continuation] {
    guard var state = keys[key], state.hasWriter else {
      preconditionFailure("releaseWrite(\(key)) without holding the key")
    }
    state.hasWriter = false
    activeKeyWriters -= 1
    var granted: [Continuation] = []
    if !globalWritePending, !state.waiting.isEmpty {
      granted.append(state.waiting.removeFirst().continuation)
      state.hasWriter = true
      activeKeyWriters += 1
    }
    store(state, for: key)
    granted += grantGlobalIfReady()
    return granted
  }

  // MARK: Global writer

  /// Records that a global write is coming (every read in progress is overtaken) and takes
  /// the global lock if no writer holds anything.
  mutating func requestGlobalWrite() -> Bool {
    for key in keys.keys {
      for id in keys[key]!.readers.keys { keys[key]!.readers[id] = true }
    }
    let acquired = !globalWritePending && activeKeyWriters == 0
    if acquired { globalWriterActive = true }
    return acquired
  }

  mutating func enqueueGlobal(id: UInt64, continuation: Continuation) -> Continuation? {
    if !globalWritePending && activeKeyWriters == 0 {
      globalWriterActive = true
      return continuation
    }
    globalWaiting.append(Waiter(id: id, continuation: continuation))
    return nil
  }

  /// Removes a cancelled global waiter; returns its continuation plus any key writers that
  /// it was holding back.
  mutating func cancelGlobalWaiting(id: UInt64) -> (cancelled: Continuation?, granted: [Continuation]) {
    guard let index = globalWaiting.firstIndex(where: { $0.id == id }) else { return (nil, []) }
    let waiter = globalWaiting.remove(at: index)
    return (waiter.continuation, globalWritePending ? [] : grantKeyWriters())
  }

  mutating func releaseGlobalWrite() -> [Continuation] {
    precondition(globalWriterActive, "releaseGlobalWrite() without holding the global lock")
    globalWriterActive = false
    let next = grantGlobalIfReady()
    return next.isEmpty ? grantKeyWriters() : next
  }

  // MARK: Helpers

  private mutating func grantGlobalIfReady() -> [Continuation] {
    guard !globalWriterActive, activeKeyWriters == 0, !globalWaiting.isEmpty else { return [] }
    globalWriterActive = true
    return [globalWaiting.removeFirst().continuation]
  }

  private mutating func grantKeyWriters() -> [Continuation] {
    var granted: [Continuation] = []
    for (key, var state) in keys where !state.hasWriter && !state.waiting.isEmpty {
      granted.append(state.waiting.removeFirst().continuation)
      state.hasWriter = true
      activeKeyWriters += 1
      keys[key] = state
    }
    return granted
  }

  private mutating func store(_ state: KeyState, for key: Key) {
    keys[key] = state.isIdle ? nil : state
  }
}

extension WriteCoordinatorStateMachine: Sendable where Key: Sendable, Continuation: Sendable {}
extension WriteCoordinatorStateMachine.KeyState: Sendable where Key: Sendable, Continuation: Sendable {}
extension WriteCoordinatorStateMachine.Waiter: Sendable where Key: Sendable, Continuation: Sendable {}
