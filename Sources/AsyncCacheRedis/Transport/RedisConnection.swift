import AsyncCache
import Synchronization

#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// One TCP connection to a Redis server, shared by every task that sends on it.
///
/// Commands are pipelined: a caller writes its command at once (a non-blocking `send`, under
/// the lock that also queues its continuation, so that replies come back in the order of the
/// queue) and suspends. The connection's own thread polls the socket, parses replies and resumes
/// the callers in order. Nothing blocks a thread of the cooperative pool: a command the socket
/// does not take whole is finished by the thread.
///
/// **The time limit and discarding.** Every command must be answered within the operation
/// timeout. When the oldest one is not, the connection fails every command in flight with
/// ``RedisError/Code/timedOut`` and closes: a late reply must never answer the next command.
/// A protocol error, a reply nobody waits for, or a broken socket close it the same way. A
/// closed connection is never reused; the pool opens another.
///
/// **Cancellation.** A cancelled caller is resumed at once with `CancellationError`; its
/// command keeps its place in the queue and its reply is read and dropped.
///
/// The thread's poll waits at most one operation timeout when the queue is empty, so a command
/// queued while it waits is checked in time without waking the thread; the wake-up pipe is
/// written only when the thread has bytes to send or must stop.
final class RedisConnection: Sendable {
  /// `host:port`, for messages.
  let server: String
  private let fd: Int32
  private let wakeRead: Int32
  private let wakeWrite: Int32
  private let timeout: Duration
  private let timeoutNanoseconds: UInt64
  private let isSubscriber: Bool
  private let onPush: (@Sendable (RESPValue) -> Void)?
  private let onClose: @Sendable (RedisError) -> Void
  private let state: Locked<State>
  private let broken = Atomic<Bool>(false)
  private let inFlight = Atomic<Int>(0)
  private let nextID = Atomic<UInt64>(0)

  private struct Pending {
    var id: UInt64
    var remaining: Int
    var replies: [RESPValue]
    var continuation: CheckedContinuation<[RESPValue], any Error>?
    var deadline: UInt64
  }

  private struct State {
    /// Commands sent or queued, oldest first, from `head` on.
    var pending: [Pending] = []
    var head = 0
    /// Bytes the socket has not taken yet, from `outboundSent` on; the thread sends them.
    var outbound: [UInt8] = []
    var outboundSent = 0
    /// Why the connection closed; set once.
    var failure: RedisError?

    var hasOutbound: Bool { outboundSent < outbound.count }

    mutating func popHead() -> Pending {
      let pending = self.pending[head]
      head += 1
      if head == self.pending.count {
        self.pending.removeAll(keepingCapacity: true)
        head = 0
      } else if head >= 64 && head * 2 >= self.pending.count {
        self.pending.removeFirst(head)
        head = 0
      }
      return pending
    }
  }

  private init(
    server: String, fd: Int32, wake: (read: Int32, write: Int32), timeout: Duration, isSubscriber: Bool,
    onPush: (@Sendable (RESPValue) -> Void)?, onClose: @escaping @Sendable (RedisError) -> Void
  ) {
    self.server = server
    self.fd = fd
    self.wakeRead = wake.read
    self.wakeWrite = wake.write
    self.timeout = timeout
    self.timeoutNanoseconds = timeout.nanoseconds
    self.isSubscriber = isSubscriber
    self.onPush = onPush
    self.onClose = onClose
    self.state = Locked(State())
  }

  /// Connects on a new thread, which then serves the connection until it closes.
  ///
  /// - Parameters:
  ///   - isSubscriber: Whether RESP2 pub/sub messages (`message`, `pmessage` arrays) may
  ///     arrive unasked; they go to `onPush` along with RESP3 pushes.
  ///   - onClose: Called once, with the reason, when the connection closes for any reason.
  /// - Throws: ``RedisError/Code/connectionFailed``.
  static func open(
    host: String, port: Int, connectTimeout: Duration, operationTimeout: Duration, isSubscriber: Bool = false,
    onPush: (@Sendable (RESPValue) -> Void)? = nil, onClose: @escaping @Sendable (RedisError) -> Void
  ) async throws -> RedisConnection {
    let server = "\(host):\(port)"
    // The connection is built on the new thread and handed over through a lock as well as the
    // continuation, so that the caller's reads of it are ordered after its initialization for
    // ThreadSanitizer too, which does not see every ordering the continuation gives.
    let handoff = Locked<Result<RedisConnection, RedisError>?>(nil)
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
      let thread = DetachedThread(label: "Redis \(server)", reactsQuickly: true) {
        let connection: RedisConnection
        do throws(RedisError) {
          let fd = try Socket.connect(host: host, port: port, timeout: connectTimeout)
          guard let wake = makeWakePipe() else {
            closeDescriptor(fd)
            throw RedisError(code: .connectionFailed, message: "cannot create a pipe: \(Socket.errorText(errno))")
          }
          connection = RedisConnection(
            server: server, fd: fd, wake: wake, timeout: operationTimeout, isSubscriber: isSubscriber,
            onPush: onPush, onClose: onClose)
        } catch {
          handoff.withLock { $0 = .failure(error) }
          continuation.resume()
          return
        }
        handoff.withLock { $0 = .success(connection) }
        continuation.resume()
        connection.run()
      }
      let result = thread.start()
      if result != 0 {
        handoff.withLock {
          $0 = .failure(
            RedisError(code: .connectionFailed, message: "cannot start a thread for \(server): error \(result)"))
        }
        continuation.resume()
      }
    }
    guard let outcome = handoff.withLock({ $0 }) else {
      preconditionFailure("the connection thread resumed without a result")
    }
    return try outcome.get()
  }

  deinit {
    closeDescriptor(fd)
    closeDescriptor(wakeRead)
    closeDescriptor(wakeWrite)
  }

  /// Whether the connection closed; it never opens again.
  var isClosed: Bool { broken.load(ordering: .relaxed) }

  /// Commands sent and not yet answered.
  var commandsInFlight: Int { inFlight.load(ordering: .relaxed) }

  /// Sends `commands` as one pipeline and returns their replies, in order. Error replies are
  /// returned, not thrown.
  ///
  /// - Throws: ``RedisError`` when the connection is or becomes closed (``RedisError/Code/timedOut``
  ///   and the others), `CancellationError` when the calling task is cancelled first.
  func send(_ commands: [RESPCommand]) async throws -> [RESPValue] {
    try await send(encoded: RESPCommandWriter(commands).bytes, replies: commands.count)
  }

  /// Sends commands already in their wire form (`replies` of them) as one pipeline.
  ///
  /// - Parameter cancellable: Whether the calling task's cancellation gives the commands up
  ///   (their replies are then not waited for). When `false`, the commands are sent and
  ///   answered whatever happens to the task, within the operation timeout.
  func send(encoded bytes: [UInt8], replies: Int, cancellable: Bool = true) async throws -> [RESPValue] {
    guard replies > 0 else { return [] }
    let id = nextID.wrappingAdd(1, ordering: .relaxed).newValue
    guard cancellable else {
      return try await withCheckedThrowingContinuation { continuation in
        enqueue(bytes, replies: replies, id: id, checksCancellation: false, continuation: continuation)
      }
    }
    return try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { continuation in
        enqueue(bytes, replies: replies, id: id, checksCancellation: true, continuation: continuation)
      }
    } onCancel: {
      abandon(id)
    }
  }

  /// Sends one command and returns its reply.
  func send(_ command: RESPCommand) async throws -> RESPValue {
    try await send([command])[0]
  }

  /// Closes the connection, failing the commands in flight with `error`.
  func close(with error: RedisError) {
    fail(error)
  }

  private func enqueue(
    _ bytes: [UInt8], replies: Int, id: UInt64, checksCancellation: Bool,
    continuation: CheckedContinuation<[RESPValue], any Error>
  ) {
    enum Outcome {
      case sent
      case handedToThread
      case cancelled
      case closed(RedisError)
      case sendFailed(Int32)
    }
    let outcome = state.withLock { state -> Outcome in
      // Checked under the lock that `abandon` takes, so that a cancellation is either seen here
      // or finds the command queued.
      if checksCancellation && Task.isCancelled { return .cancelled }
      if let failure = state.failure { return .closed(failure) }
      state.pending.append(
        Pending(
          id: id, remaining: replies, replies: [], continuation: continuation,
          deadline: Monotonic.now &+ timeoutNanoseconds))
      inFlight.add(1, ordering: .relaxed)
      if state.hasOutbound {
        state.outbound.append(contentsOf: bytes)
        return .sent
      }
      switch bytes.withUnsafeBytes({ Socket.send(fd, $0) }) {
      case .bytes(let count) where count == bytes.count:
        return .sent
      case .bytes(let count):
        state.outbound = Array(bytes[count...])
        state.outboundSent = 0
        return .handedToThread
      case .wouldBlock, .closed:
        state.outbound = bytes
        state.outboundSent = 0
        return .handedToThread
      case .failed(let code):
        return .sendFailed(code)
      }
    }
    switch outcome {
    case .sent: break
    case .handedToThread: wake()
    case .cancelled: continuation.resume(throwing: CancellationError())
    case .closed(let error): continuation.resume(throwing: error)
    case .sendFailed(let code):
      fail(RedisError(code: .connectionClosed, message: "cannot send to \(server): \(Socket.errorText(code))"))
    }
  }

  private func abandon(_ id: UInt64) {
    let continuation = state.withLock { state -> CheckedContinuation<[RESPValue], any Error>? in
      guard state.head < state.pending.count,
        let index = state.pending[state.head...].firstIndex(where: { $0.id == id })
      else { return nil }
      defer { state.pending[index].continuation = nil }
      return state.pending[index].continuation
    }
    continuation?.resume(throwing: CancellationError())
  }

  /// Marks the connection closed (once), fails what is in flight and stops the thread.
  private func fail(_ error: RedisError) {
    let continuations = state.withLock { state -> [CheckedContinuation<[RESPValue], any Error>]? in
      guard state.failure == nil else { return nil }
      state.failure = error
      // Published with the failure: a pool that still sees the connection open would hand it
      // callers that it fails at once (until this thread, preempted, came back to say so).
      broken.store(true, ordering: .relaxed)
      inFlight.store(0, ordering: .relaxed)
      let waiting = state.pending[state.head...].compactMap(\.continuation)
      state.pending = []
      state.head = 0
      state.outbound = []
      state.outboundSent = 0
      return waiting
    }
    guard let continuations else { return }
    wake()
    onClose(error)
    for continuation in continuations { continuation.resume(throwing: error) }
  }

  private func wake() {
    var byte: UInt8 = 1
    _ = write(wakeWrite, &byte, 1)
  }

  // MARK: - The connection's thread

  private func run() {
    var parser = RESPParser()
    let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 << 10, alignment: 16)
    defer {
      buffer.deallocate()
      // Ends the TCP connection now; the descriptors are closed in `deinit`, once no caller
      // can write to the wake-up pipe or send on the socket any more.
      _ = shutdown(fd, Int32(SHUT_RDWR))
    }
    let idleTimeout = Monotonic.milliseconds(until: timeoutNanoseconds, from: 0)
    var descriptors = [pollfd](repeating: pollfd(), count: 2)
    while true {
      let (pollTimeout, wantsWrite) =
        state.withLock { state -> (Int32, Bool)? in
          if state.failure != nil { return nil }
          guard state.head < state.pending.count else { return (idleTimeout, state.hasOutbound) }
          let deadline = state.pending[state.head].deadline
          return (Monotonic.milliseconds(until: deadline, from: Monotonic.now), state.hasOutbound)
        } ?? (-1, false)
      if pollTimeout < 0 { return }
      descriptors[0] = pollfd(fd: fd, events: Int16(POLLIN) | (wantsWrite ? Int16(POLLOUT) : 0), revents: 0)
      descriptors[1] = pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)
      if poll(&descriptors, 2, pollTimeout) < 0, errno != EINTR {
        fail(RedisError(code: .connectionClosed, message: "poll() failed on \(server): \(Socket.errorText(errno))"))
        return
      }
      if descriptors[1].revents != 0 { drainWakePipe(buffer) }
      let events = descriptors[0].revents
      if events & (Int16(POLLIN) | Int16(POLLHUP) | Int16(POLLERR)) != 0 {
        guard receive(into: buffer, parser: &parser) else { return }
      }
      if events & Int16(POLLOUT) != 0 {
        guard flush() else { return }
      }
      if let error = overdue() {
        fail(error)
        return
      }
    }
  }

  /// Reads what has arrived and answers the callers; false once the connection failed.
  private func receive(into buffer: UnsafeMutableRawBufferPointer, parser: inout RESPParser) -> Bool {
    while true {
      switch Socket.receive(fd, into: buffer) {
      case .bytes(let count):
        parser.append(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
        do {
          while let value = try parser.next() {
            guard deliver(value) else { return false }
          }
        } catch {
          fail(
            RedisError(
              code: .protocolError, message: "\(server) sent a reply this client cannot read", underlying: error)
          )
          return false
        }
        // A short read drained the socket: skip the call that would only say so.
        if count < buffer.count { return true }
      case .wouldBlock:
        return true
      case .closed:
        fail(RedisError(code: .connectionClosed, message: "\(server) closed the connection"))
        return false
      case .failed(let code):
        fail(RedisError(code: .connectionClosed, message: "cannot read from \(server): \(Socket.errorText(code))"))
        return false
      }
    }
  }

  /// Hands one reply to the oldest command, or a message to `onPush`.
  private func deliver(_ value: RESPValue) -> Bool {
    if isPush(value) {
      onPush?(value)
      return true
    }
    let answered = state.withLock { state -> (CheckedContinuation<[RESPValue], any Error>, [RESPValue])?? in
      guard state.head < state.pending.count else { return .none }
      state.pending[state.head].replies.append(value)
      state.pending[state.head].remaining -= 1
      guard state.pending[state.head].remaining == 0 else { return .some(nil) }
      let done = state.popHead()
      inFlight.subtract(1, ordering: .relaxed)
      return .some(done.continuation.map { ($0, done.replies) })
    }
    switch answered {
    case .none:
      fail(RedisError(code: .protocolError, message: "\(server) sent a reply that no command was waiting for"))
      return false
    case .some(let resumption):
      if let (continuation, replies) = resumption { continuation.resume(returning: replies) }
      return true
    }
  }

  private func isPush(_ value: RESPValue) -> Bool {
    switch value {
    case .push: return true
    case .array(let elements?) where isSubscriber:
      guard case .bulkString(let kind?) = elements.first else { return false }
      return kind.elementsEqual("message".utf8) || kind.elementsEqual("pmessage".utf8)
        || kind.elementsEqual("smessage".utf8)
    default: return false
    }
  }

  /// Sends queued bytes; false once the connection failed.
  private func flush() -> Bool {
    let failure = state.withLock { state -> Int32? in
      while state.hasOutbound {
        let result = state.outbound.withUnsafeBytes { bytes in
          Socket.send(fd, UnsafeRawBufferPointer(rebasing: bytes[state.outboundSent...]))
        }
        switch result {
        case .bytes(let count): state.outboundSent += count
        case .wouldBlock, .closed: return nil
        case .failed(let code): return code
        }
      }
      state.outbound.removeAll(keepingCapacity: state.outbound.capacity <= 1 << 20)
      state.outboundSent = 0
      return nil
    }
    guard let failure else { return true }
    fail(RedisError(code: .connectionClosed, message: "cannot send to \(server): \(Socket.errorText(failure))"))
    return false
  }

  /// The timeout error when the oldest command is past its deadline.
  private func overdue() -> RedisError? {
    let late = state.withLock { state in
      state.head < state.pending.count && state.pending[state.head].deadline <= Monotonic.now
    }
    guard late else { return nil }
    return RedisError(
      code: .timedOut,
      message:
        "\(server) did not answer within the operation timeout of \(timeout.readable); the connection was discarded")
  }

  private func drainWakePipe(_ buffer: UnsafeMutableRawBufferPointer) {
    while read(wakeRead, buffer.baseAddress, Swift.min(buffer.count, 512)) > 0 {}
  }
}

/// A non-blocking pipe whose write end wakes a connection's thread.
private func makeWakePipe() -> (read: Int32, write: Int32)? {
  var ends: [Int32] = [0, 0]
  guard pipe(&ends) == 0 else { return nil }
  for end in ends {
    _ = fcntl(end, F_SETFL, fcntl(end, F_GETFL, 0) | O_NONBLOCK)
    _ = fcntl(end, F_SETFD, FD_CLOEXEC)
  }
  return (ends[0], ends[1])
}

private func closeDescriptor(_ fd: Int32) {
  _ = close(fd)
}
