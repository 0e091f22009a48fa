/// The rules that keep the layers of a chain consistent while reads and writes overlap.
///
/// - Writes to one key are exclusive and first-come, first-served, so two writers never
///   interleave their per-layer steps (which could leave layer 0 with one value and layer 1 with
///   another).
/// - A write *overtakes* every read of its key that is in progress when it is requested: such a
///   read may still return what it found, but must not write it back (back-fill) or commit a
///   loaded value, because that value may be older than the write. A read that starts while a
///   write to its key is requested, queued or running is overtaken from the start.
/// - A read's commit is a write too. A ``CommitKind/fill`` (a value the read brought from the
///   origin) overtakes like any write. A ``CommitKind/copy`` (what a layer holds, copied into
///   others: a back-fill, or an entry extended by sliding expiry) overtakes no read's fill: it
///   makes no value a load brings older, so a load that starts while it is pending still stores
///   what it loads (queued behind it, so the newer value is written last). It does make the
///   other reads' *copies* redundant or older (the same entry, or one from before an
///   extension): those are refused, as are the copies of reads that start while any write of
///   the key is pending, so that of concurrent readers one back-fills and none waits.
/// - A global write (`removeAll`) overtakes every read, waits for the key writers in progress,
///   and holds back new ones until it is done.
///
/// A writer that cannot take its key at once is queued *when it asks*, before its task suspends:
/// its place in line is fixed then, and no read can slip in unnoticed between the request and
/// the suspension. The suspended task then ``attach(_:writer:continuation:)``es its continuation,
/// unless the key was handed to it in the meantime.
///
/// Pure and synchronous: it stores continuations but never resumes them; every method returns
/// the continuations its caller must resume after releasing the lock. Generic over the
/// continuation type so that tests can drive it with plain values.
struct WriteCoordinatorStateMachine<Key: Hashable, Continuation> {
  struct Waiter {
    var id: UInt64
    /// Whether the writer overtakes the reads that start while it waits (not a copy).
    var overtakes = true
    /// `nil` until the waiting task has suspended and attached it.
    var continuation: Continuation?
  }

  struct KeyState {
    /// Reads in progress, and whether a write has overtaken each.
    var readers: [UInt64: Bool] = [:]
    /// Reads in progress whose copy would be redundant or older (see ``CommitKind/copy``); they
    /// may still commit a fill.
    var copiedOver: Set<UInt64> = []
    /// The writer holding the key.
    var owner: UInt64?
    /// Whether the owner overtakes the reads that start while it writes (not a copy).
    var ownerOvertakes = true
    /// Whether the owner knows it holds the key (it may have been handed the key before it
    /// attached its continuation).
    var ownerProceeded = false
    /// Writers waiting for this key, in arrival order.
    var queue: [Waiter] = []

    var isIdle: Bool { readers.isEmpty && owner == nil && queue.isEmpty }
    var writePending: Bool { owner != nil || !queue.isEmpty }
    /// A write that overtakes the reads starting now holds the key or waits for it.
    var overtakingWritePending: Bool { owner != nil && ownerOvertakes || queue.contains { $0.overtakes } }
  }

  /// What a read's commit writes (see the type's rules).
  enum CommitKind: Sendable {
    /// A value the read brought (a load's value from the origin): a write like any other.
    case fill
    /// What a layer holds, copied into other layers (a back-fill, an extended expiry): it
    /// overtakes no read's fill, and refuses the other reads' copies.
    case copy
  }

  /// The answer to a request for a key or for the global lock.
  enum Request: Equatable {
    /// The writer holds it and may write now.
    case acquired(writer: UInt64)
    /// The writer is queued; it must suspend and ``attach(_:writer:continuation:)``.
    case queued(writer: UInt64)
    /// (Commits only.) A write overtook the read: it must not write; nothing changed.
    case overtaken
  }

  /// What a queued writer learns when it attaches its continuation.
  enum Attachment: Equatable {
    /// It was handed the lock meanwhile: proceed without suspending further.
    case proceed
    /// Wait: the continuation is resumed when the lock is handed over.
    case wait
    /// It was cancelled meanwhile: resume with `CancellationError`.
    case cancelled
  }

  private(set) var keys: [Key: KeyState] = [:]
  private(set) var activeKeyWriters = 0
  private(set) var globalOwner: UInt64?
  private var globalOwnerProceeded = false
  private(set) var globalQueue: [Waiter] = []
  private var nextID: UInt64 = 0

  /// Whether nothing is registered: no reads, no writers, no waiters.
  var isIdle: Bool { keys.isEmpty && activeKeyWriters == 0 && globalOwner == nil && globalQueue.isEmpty }

  private var globalWritePending: Bool { globalOwner != nil || !globalQueue.isEmpty }

  private mutating func makeID() -> UInt64 {
    nextID &+= 1
    return nextID
  }

  // MARK: Reads

  /// Registers a read of `key` and returns its identifier.
  mutating func beginRead(_ key: Key) -> UInt64 {
    let id = makeID()
    var state = keys[key] ?? KeyState()
    state.readers[id] = state.overtakingWritePending || globalWritePending
    if state.writePending { state.copiedOver.insert(id) }
    keys[key] = state
    return id
  }

  mutating func endRead(_ key: Key, id: UInt64) {
    guard var state = keys[key] else { return }
    state.readers[id] = nil
    state.copiedOver.remove(id)
    store(state, for: key)
  }

  /// Whether a write overtook the read (an unknown read counts as overtaken).
  func isOvertaken(_ key: Key, id: UInt64) -> Bool {
    keys[key]?.readers[id] ?? true
  }

  /// Whether the read may not commit a write of `kind`: a write overtook it, or it is a copy
  /// that another copy made redundant or older.
  func isRefused(_ key: Key, id: UInt64, kind: CommitKind) -> Bool {
    if isOvertaken(key, id: id) { return true }
    return kind == .copy && keys[key]?.copiedOver.contains(id) == true
  }

  /// Marks one read as overtaken, e.g. a load whose requests all left.
  mutating func overtake(_ key: Key, id: UInt64) {
    guard keys[key]?.readers[id] != nil else { return }
    keys[key]?.readers[id] = true
  }

  /// The number of reads of `key` in progress.
  func readerCount(for key: Key) -> Int {
    keys[key]?.readers.count ?? 0
  }

  // MARK: Key writers

  /// Asks for `key`: overtakes every read of it in progress, then takes the key if it is free
  /// and no global write is pending, or queues the writer.
  mutating func requestWrite(_ key: Key) -> Request {
    requestWrite(key, exempt: nil)
  }

  /// Like ``requestWrite(_:)`` for read `reader` that wants to write back what it read (a
  /// back-fill or a load's commit). A read that is already overtaken is refused without side
  /// effects: it must not overtake the reads that started after the write that overtook it. A
  /// ``CommitKind/copy`` overtakes no read, and refuses the other reads' copies.
  mutating func requestCommit(_ key: Key, reader: UInt64, kind: CommitKind = .fill) -> Request {
    if isRefused(key, id: reader, kind: kind) { return .overtaken }
    if kind == .copy {
      for id in keys[key]!.readers.keys where id != reader { keys[key]!.copiedOver.insert(id) }
    }
    return requestWrite(key, exempt: reader, overtakes: kind == .fill)
  }

  private mutating func requestWrite(_ key: Key, exempt: UInt64?, overtakes: Bool = true) -> Request {
    let writer = makeID()
    var state = keys[key] ?? KeyState()
    if overtakes {
      for id in state.readers.keys where id != exempt { state.readers[id] = true }
    }
    let request: Request
    if !state.writePending && !globalWritePending {
      state.owner = writer
      state.ownerOvertakes = overtakes
      state.ownerProceeded = true
      activeKeyWriters += 1
      request = .acquired(writer: writer)
    } else {
      state.queue.append(Waiter(id: writer, overtakes: overtakes))
      request = .queued(writer: writer)
    }
    keys[key] = state
    return request
  }

  /// Attaches the continuation of queued `writer`.
  mutating func attach(_ key: Key, writer: UInt64, continuation: Continuation) -> Attachment {
    guard var state = keys[key] else { return .cancelled }
    if state.owner == writer {
      state.ownerProceeded = true
      keys[key] = state
      return .proceed
    }
    guard let index = state.queue.firstIndex(where: { $0.id == writer }) else { return .cancelled }
    state.queue[index].continuation = continuation
    keys[key] = state
    return .wait
  }

  /// Withdraws `writer`, whose task was cancelled before it could write. Returns its
  /// continuation, if it was attached and still waiting (resume it with `CancellationError`),
  /// and the writers to resume because it gave the key back unused.
  mutating func cancel(_ key: Key, writer: UInt64) -> (cancelled: Continuation?, granted: [Continuation]) {
    guard var state = keys[key] else { return (nil, []) }
    if let index = state.queue.firstIndex(where: { $0.id == writer }) {
      let waiter = state.queue.remove(at: index)
      store(state, for: key)
      return (waiter.continuation, [])
    }
    guard state.owner == writer, !state.ownerProceeded else { return (nil, []) }
    // Handed the key before it attached: give the key back unused.
    keys[key] = state
    return (nil, releaseWrite(key, writer: writer))
  }

  /// Releases `key`, held by `writer`, and returns the writers to resume: the next writer of
  /// this key, or the global writer once no key writer is left.
  mutating func releaseWrite(_ key: Key, writer: UInt64) -> [Continuation] {
    guard var state = keys[key], state.owner == writer else {
      preconditionFailure("releaseWrite(\(key)) by a writer that does not hold the key")
    }
    state.owner = nil
    state.ownerOvertakes = true
    state.ownerProceeded = false
    activeKeyWriters -= 1
    var granted: [Continuation] = []
    if !globalWritePending, let continuation = grantNext(&state) {
      granted.append(continuation)
    }
    store(state, for: key)
    if let global = grantGlobalIfReady().continuation { granted.append(global) }
    return granted
  }

  /// The number of writers queued for `key`.
  func queuedWriterCount(for key: Key) -> Int {
    keys[key]?.queue.count ?? 0
  }

  // MARK: Global writer

  /// Asks for the global lock: overtakes every read in progress, then takes the lock if no
  /// writer holds or waits for anything, or queues the writer.
  mutating func requestGlobalWrite() -> Request {
    let writer = makeID()
    for key in keys.keys {
      for id in keys[key]!.readers.keys { keys[key]!.readers[id] = true }
    }
    if !globalWritePending && activeKeyWriters == 0 {
      globalOwner = writer
      globalOwnerProceeded = true
      return .acquired(writer: writer)
    }
    globalQueue.append(Waiter(id: writer))
    return .queued(writer: writer)
  }

  mutating func attachGlobal(writer: UInt64, continuation: Continuation) -> Attachment {
    if globalOwner == writer {
      globalOwnerProceeded = true
      return .proceed
    }
    guard let index = globalQueue.firstIndex(where: { $0.id == writer }) else { return .cancelled }
    globalQueue[index].continuation = continuation
    return .wait
  }

  /// Withdraws a cancelled global writer; returns its continuation (if attached) and the key
  /// writers it was holding back.
  mutating func cancelGlobal(writer: UInt64) -> (cancelled: Continuation?, granted: [Continuation]) {
    if let index = globalQueue.firstIndex(where: { $0.id == writer }) {
      let waiter = globalQueue.remove(at: index)
      return (waiter.continuation, grantKeyWriters())
    }
    guard globalOwner == writer, !globalOwnerProceeded else { return (nil, []) }
    return (nil, releaseGlobalWrite(writer: writer))
  }

  mutating func releaseGlobalWrite(writer: UInt64) -> [Continuation] {
    precondition(globalOwner == writer, "releaseGlobalWrite() by a writer that does not hold the global lock")
    globalOwner = nil
    globalOwnerProceeded = false
    let next = grantGlobalIfReady()
    // The next global writer may hold the lock without a continuation yet (it has not attached):
    // the key writers must keep waiting all the same.
    if next.granted { return next.continuation.map { [$0] } ?? [] }
    return grantKeyWriters()
  }

  // MARK: Helpers

  /// Hands the key to the first queued writer, if any; returns its continuation if it is
  /// attached (otherwise it learns on attaching).
  private mutating func grantNext(_ state: inout KeyState) -> Continuation? {
    guard !state.queue.isEmpty else { return nil }
    let next = state.queue.removeFirst()
    state.owner = next.id
    state.ownerOvertakes = next.overtakes
    state.ownerProceeded = next.continuation != nil
    activeKeyWriters += 1
    return next.continuation
  }

  /// Hands the global lock to the first queued global writer if nothing else holds a lock.
  /// `granted` tells whether it did; `continuation` is `nil` when that writer has not attached
  /// yet (it learns on attaching).
  private mutating func grantGlobalIfReady() -> (granted: Bool, continuation: Continuation?) {
    guard globalOwner == nil, activeKeyWriters == 0, !globalQueue.isEmpty else { return (false, nil) }
    let next = globalQueue.removeFirst()
    globalOwner = next.id
    globalOwnerProceeded = next.continuation != nil
    return (true, next.continuation)
  }

  /// Hands each free key to its first queued writer; nothing while a global write is pending.
  private mutating func grantKeyWriters() -> [Continuation] {
    guard !globalWritePending else { return [] }
    var granted: [Continuation] = []
    for (key, var state) in keys where state.owner == nil && !state.queue.isEmpty {
      if let continuation = grantNext(&state) { granted.append(continuation) }
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
