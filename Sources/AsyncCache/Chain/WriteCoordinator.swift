/// A read registered with a ``WriteCoordinator``: it learns whether a write overtook it.
@usableFromInline
struct ReadToken<Key: Hashable & Sendable>: Sendable {
  @usableFromInline let key: Key
  @usableFromInline let id: UInt64

  @usableFromInline
  init(key: Key, id: UInt64) {
    self.key = key
    self.id = id
  }
}

/// Orders the writes of a ``CacheChain`` per key and tells reads whether a write overtook them;
/// see ``WriteCoordinatorStateMachine`` for the rules.
///
/// Locks are never held across a suspension: waiting writers suspend on continuations that are
/// resumed after the state machine's lock is released.
final class WriteCoordinator<Key: Hashable & Sendable>: Sendable {
  typealias Machine = WriteCoordinatorStateMachine<Key, UnsafeContinuation<Void, any Error>>

  private struct Watcher {
    var condition: @Sendable (Machine) -> Bool
    var continuation: UnsafeContinuation<Void, Never>
  }

  private let locked = Locked((machine: Machine(), watchers: [Watcher]()))

  init() {}

  /// Runs `body` on the state machine under the lock, then wakes the watchers whose condition
  /// now holds (there are none outside tests).
  private func mutate<Result>(_ body: (inout Machine) -> Result) -> Result {
    let (result, ready) = locked.withLock { locked -> (Result, [UnsafeContinuation<Void, Never>]) in
      let result = body(&locked.machine)
      guard !locked.watchers.isEmpty else { return (result, []) }
      let machine = locked.machine
      var ready: [UnsafeContinuation<Void, Never>] = []
      locked.watchers.removeAll { watcher in
        guard watcher.condition(machine) else { return false }
        ready.append(watcher.continuation)
        return true
      }
      return (result, ready)
    }
    for continuation in ready { continuation.resume() }
    return result
  }

  /// Returns once `condition` holds for the state (for tests: it replaces polling).
  func waitUntil(_ condition: @escaping @Sendable (Machine) -> Bool) async {
    await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
      let holds = locked.withLock { locked -> Bool in
        if condition(locked.machine) { return true }
        locked.watchers.append(Watcher(condition: condition, continuation: continuation))
        return false
      }
      if holds { continuation.resume() }
    }
  }

  // MARK: Reads

  func beginRead(_ key: Key) -> ReadToken<Key> {
    ReadToken(key: key, id: mutate { $0.beginRead(key) })
  }

  func endRead(_ token: ReadToken<Key>) {
    mutate { $0.endRead(token.key, id: token.id) }
  }

  /// Marks `token` as overtaken, so that it commits nothing.
  func overtake(_ token: ReadToken<Key>) {
    mutate { $0.overtake(token.key, id: token.id) }
  }

  // MARK: Writes

  /// The right to write one key, to be given back with ``releaseWrite(_:)``.
  struct WriteTicket: Sendable {
    let key: Key
    let writer: UInt64
  }

  /// Waits until the caller holds `key` exclusively; overtakes every read of `key` in
  /// progress. Balance with ``releaseWrite(_:)``.
  ///
  /// - Throws: `CancellationError` if the task is cancelled while waiting; nothing is held then.
  nonisolated(nonsending) func acquireWrite(_ key: Key) async throws -> WriteTicket {
    switch mutate({ $0.requestWrite(key) }) {
    case .acquired(let writer):
      return WriteTicket(key: key, writer: writer)
    case .queued(let writer):
      try await waitForKey(key, writer: writer)
      return WriteTicket(key: key, writer: writer)
    case .overtaken:
      preconditionFailure("a plain write is never refused")
    }
  }

  /// For a read that wants to write back what it read: waits until the caller holds the key,
  /// unless a write overtook the read (before or while waiting). Returns a ticket to balance
  /// with ``releaseWrite(_:)``, or `nil` when it must not write (nothing is held then). A
  /// cancelled wait also returns `nil`. A ``WriteCoordinatorStateMachine/CommitKind/copy``
  /// overtakes no read.
  nonisolated(nonsending) func acquireCommit(
    _ token: ReadToken<Key>, kind: Machine.CommitKind = .fill
  ) async -> WriteTicket? {
    switch mutate({ $0.requestCommit(token.key, reader: token.id, kind: kind) }) {
    case .overtaken:
      return nil
    case .acquired(let writer):
      return WriteTicket(key: token.key, writer: writer)
    case .queued(let writer):
      do {
        try await waitForKey(token.key, writer: writer)
      } catch {
        return nil
      }
      let ticket = WriteTicket(key: token.key, writer: writer)
      if mutate({ $0.isRefused(token.key, id: token.id, kind: kind) }) {
        releaseWrite(ticket)
        return nil
      }
      return ticket
    }
  }

  func releaseWrite(_ ticket: WriteTicket) {
    for continuation in mutate({ $0.releaseWrite(ticket.key, writer: ticket.writer) }) { continuation.resume() }
  }

  /// Suspends queued `writer` until it is handed `key`.
  private nonisolated(nonsending) func waitForKey(_ key: Key, writer: UInt64) async throws {
    try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
        // Decided under the lock: the cancellation flag is set before `onCancel` runs, so either
        // this sees it and withdraws, or `onCancel` finds the attached writer.
        let (attachment, granted) = mutate { state -> (Machine.Attachment, [UnsafeContinuation<Void, any Error>]) in
          if Task.isCancelled { return (.cancelled, state.cancel(key, writer: writer).granted) }
          return (state.attach(key, writer: writer, continuation: continuation), [])
        }
        for other in granted { other.resume() }
        attachment.apply(to: continuation)
      }
    } onCancel: {
      let (cancelled, granted) = mutate { $0.cancel(key, writer: writer) }
      cancelled?.resume(throwing: CancellationError())
      for continuation in granted { continuation.resume() }
    }
  }

  /// The right to write every key, to be given back with ``releaseGlobalWrite(_:)``.
  struct GlobalTicket: Sendable {
    let writer: UInt64
  }

  /// Waits until the caller holds every key exclusively; overtakes every read in progress.
  /// Balance with ``releaseGlobalWrite(_:)``.
  ///
  /// - Throws: `CancellationError` if the task is cancelled while waiting; nothing is held then.
  nonisolated(nonsending) func acquireGlobalWrite() async throws -> GlobalTicket {
    let writer: UInt64
    switch mutate({ $0.requestGlobalWrite() }) {
    case .acquired(let id):
      return GlobalTicket(writer: id)
    case .queued(let id):
      writer = id
    case .overtaken:
      preconditionFailure("a global write is never refused")
    }
    try await withTaskCancellationHandler {
      try await withUnsafeThrowingContinuation { (continuation: UnsafeContinuation<Void, any Error>) in
        let (attachment, granted) = mutate { state -> (Machine.Attachment, [UnsafeContinuation<Void, any Error>]) in
          if Task.isCancelled { return (.cancelled, state.cancelGlobal(writer: writer).granted) }
          return (state.attachGlobal(writer: writer, continuation: continuation), [])
        }
        for other in granted { other.resume() }
        attachment.apply(to: continuation)
      }
    } onCancel: {
      let (cancelled, granted) = mutate { $0.cancelGlobal(writer: writer) }
      cancelled?.resume(throwing: CancellationError())
      for continuation in granted { continuation.resume() }
    }
    return GlobalTicket(writer: writer)
  }

  func releaseGlobalWrite(_ ticket: GlobalTicket) {
    for continuation in mutate({ $0.releaseGlobalWrite(writer: ticket.writer) }) { continuation.resume() }
  }

  /// Returns once `count` writers are queued for `key` (for tests).
  func waitForQueuedWriters(_ count: Int, for key: Key) async {
    await waitUntil { $0.queuedWriterCount(for: key) >= count }
  }

  /// Whether nothing is registered (for tests and invariants).
  var isIdle: Bool { locked.withLock { $0.machine.isIdle } }
}

extension WriteCoordinatorStateMachine.Attachment {
  func apply(to continuation: UnsafeContinuation<Void, any Error>) {
    switch self {
    case .proceed: continuation.resume()
    case .wait: break
    case .cancelled: continuation.resume(throwing: CancellationError())
    }
  }
}
