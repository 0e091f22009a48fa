import AsyncCache
import Synchronization

#if os(Linux)
  import CAsyncCacheShims
#endif

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
/// **Cancellation.** A cancelled caller is resumed at once with `CancellationError` (a caller
/// reading its own reply, below, within its wait limit); its command keeps its place in the
/// queue and its reply is read and dropped.
///
/// **A lone command's reply, read by its caller.** On Linux, a command sent while nothing else
/// is in flight on the connection, and no other such command in the process, waits for its
/// reply on the caller's own thread, in `ppoll`, for at most ``defaultCallerWaitLimit``
/// (200 µs), and reads it there: no hand-off to the connection's thread and back, which on a
/// loopback or same-rack server costs as much as the round trip itself. It is tried only while
/// the connection's lone round trips take, on average, less than that limit (so a distant
/// server never holds a thread of the cooperative pool); when the reply is late, the command
/// goes to the thread as any other, in its place. At most one thread of the pool waits so at
/// any moment, for at most the limit.
///
/// The thread's poll waits at most one operation timeout when the queue is empty, so a command
/// queued while it waits is checked in time without waking the thread. While the queue is
/// empty after a reply its caller read, the thread watches only for the socket's closing, so
/// that the next lone reply does not wake it too; the next command for the thread then writes
/// the wake-up pipe, as do bytes the thread must send and a stop.
final class RedisConnection: Sendable {
  /// How long a lone command's caller waits on its own thread for the reply before it hands the
  /// command to the connection's thread, in nanoseconds: 200 µs, several loopback round trips,
  /// and a small slice of time for a thread of the cooperative pool.
  static let defaultCallerWaitLimit: UInt64 = 200_000

  /// Whether callers may read their replies (Linux: `ppoll` has a time limit finer than a
  /// millisecond, and `POLLRDHUP` lets the thread watch for the closing alone).
  #if os(Linux)
    static let callersMayRead = async_cache_wait_readable(-1, 0) != -ENOSYS
  #else
    static let callersMayRead = false
  #endif

  /// Set while a caller, anywhere in the process, waits for its reply on its own thread.
  static let callerWaiting = Atomic<Bool>(false)

  /// `host:port`, for messages.
  let server: String
  let fd: Int32
  let wakeRead: Int32
  let wakeWrite: Int32
  let timeout: Duration
  let timeoutNanoseconds: UInt64
  let callerWaitLimit: UInt64
  /// Tests: called by a caller whose lone command the socket did not take whole, once it woke
  /// the thread to send the rest, before the caller queues for the reply.
  let afterPartialSend: (@Sendable () -> Void)?
  /// The layer's counters, for the replies read by callers.
  let counters: RedisCounters?
  let isSubscriber: Bool
  let onPush: (@Sendable (RESPValue) -> Void)?
  let onClose: @Sendable (RedisError) -> Void
  let state: Locked<State>
  /// The socket's reading side. Whoever reads the socket holds it: the connection's thread, or
  /// a caller reading its lone command's reply.
  let reading: Locked<ReadSide>
  let broken = Atomic<Bool>(false)
  let inFlight = Atomic<Int>(0)
  let nextID = Atomic<UInt64>(0)
  let readsByCaller = Atomic<Int>(0)
  let handOvers = Atomic<Int>(0)

  struct Pending {
    var id: UInt64
    var remaining: Int
    var replies: [RESPValue]
    var continuation: CheckedContinuation<[RESPValue], any Error>?
    var deadline: UInt64
    /// Its caller reads the reply (see ``RedisConnection``); it has no continuation.
    var readByCaller = false
    /// Nothing else was in flight when it was sent: its time to the reply is a round trip.
    var isLone = false
  }

  struct ReadSide: Sendable {
    var parser = RESPParser()
    var buffer = [UInt8](repeating: 0, count: 64 << 10)
  }

  struct State {
    /// Commands sent or queued, oldest first, from `head` on.
    var pending: [Pending] = []
    var head = 0
    /// Bytes the socket has not taken yet, from `outboundSent` on; the thread sends them.
    var outbound: [UInt8] = []
    var outboundSent = 0
    /// Why the connection closed; set once.
    var failure: RedisError?
    /// The command whose caller reads the socket: the thread leaves the socket to it.
    var callerReader: UInt64?
    /// The replies of a command its caller reads (or meant to: see `sendReadingReply`), once
    /// complete, until the caller takes them. While they wait here, no other caller reads.
    var callerReplies: (id: UInt64, replies: [RESPValue])?
    /// Whether the thread's poll watches for replies (`POLLIN`).
    var threadWatchesReplies = true
    /// Whether the thread's poll watches the socket at all (for replies, or for its closing
    /// alone); not while a caller reads.
    var threadWatchesSocket = true
    /// Whether the last command answered was read by its caller: the thread, idle, then
    /// watches only for the closing.
    var lastReadByCaller = false
    /// A lone command's time to its reply, smoothed (nanoseconds); 0 before the first.
    var loneReplyTime: UInt64 = 0
    /// Lone commands sent, for a caller's read now and then while they are slow.
    var loneCommands: UInt64 = 0

    var hasOutbound: Bool { outboundSent < outbound.count }
    var callerReads: Bool { callerReader != nil }

    /// The replies of command `id`, if they wait for its caller; taken.
    mutating func takeCallerReplies(of id: UInt64) -> [RESPValue]? {
      guard let waiting = callerReplies, waiting.id == id else { return nil }
      callerReplies = nil
      return waiting.replies
    }

    /// Command `id`'s caller reads no more. Whether the thread must be woken: when it polled
    /// as the caller read, it left the socket out, and comes back to it for the replies of the
    /// commands queued meanwhile or for the closing.
    mutating func endCallerRead(of id: UInt64) -> Bool {
      if callerReader == id { callerReader = nil }
      return failure == nil && (!threadWatchesSocket || (head < pending.count && !threadWatchesReplies))
    }

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
    server: String, fd: Int32, wake: (read: Int32, write: Int32), timeout: Duration, callerWaitLimit: UInt64,
    counters: RedisCounters?, afterPartialSend: (@Sendable () -> Void)?, isSubscriber: Bool,
    onPush: (@Sendable (RESPValue) -> Void)?, onClose: @escaping @Sendable (RedisError) -> Void
  ) {
    self.server = server
    self.fd = fd
    self.wakeRead = wake.read
    self.wakeWrite = wake.write
    self.timeout = timeout
    self.timeoutNanoseconds = timeout.nanoseconds
    self.callerWaitLimit = callerWaitLimit
    self.afterPartialSend = afterPartialSend
    self.counters = counters
    self.isSubscriber = isSubscriber
    self.onPush = onPush
    self.onClose = onClose
    self.state = Locked(State())
    self.reading = Locked(ReadSide())
  }

  /// Connects on a new thread, which then serves the connection until it closes.
  ///
  /// - Parameters:
  ///   - isSubscriber: Whether RESP2 pub/sub messages (`message`, `pmessage` arrays) may
  ///     arrive unasked; they go to `onPush` along with RESP3 pushes.
  ///   - callerWaitLimit: How long, in nanoseconds, a lone command's caller may wait for its
  ///     reply on its own thread; 0 never.
  ///   - counters: Where the replies callers read are counted too, if anywhere.
  ///   - afterPartialSend: For tests: called by a caller whose lone command the socket did not
  ///     take whole, once the thread was woken to send the rest, before the caller queues for
  ///     the reply (the thread may answer it first).
  ///   - onClose: Called once, with the reason, when the connection closes for any reason.
  /// - Throws: ``RedisError/Code/connectionFailed``.
  static func open(
    host: String, port: Int, connectTimeout: Duration, operationTimeout: Duration, isSubscriber: Bool = false,
    callerWaitLimit: UInt64 = defaultCallerWaitLimit, counters: RedisCounters? = nil,
    afterPartialSend: (@Sendable () -> Void)? = nil, onPush: (@Sendable (RESPValue) -> Void)? = nil,
    onClose: @escaping @Sendable (RedisError) -> Void
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
            server: server, fd: fd, wake: wake, timeout: operationTimeout, callerWaitLimit: callerWaitLimit,
            counters: counters, afterPartialSend: afterPartialSend, isSubscriber: isSubscriber, onPush: onPush,
            onClose: onClose)
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

  /// The commands queued, and whether a caller reads the socket now, seen at one instant.
  var queue: (commands: Int, callerReads: Bool) {
    state.withLock { ($0.pending.count - $0.head, $0.callerReads) }
  }

  /// Replies read by their callers, on their own threads.
  var repliesReadByCallers: Int { readsByCaller.load(ordering: .relaxed) }

  /// Commands whose callers meant to read the reply on their own threads and handed them to the
  /// connection's thread instead: the reply was late, or the socket took only part of the
  /// command (the thread sends the rest).
  var commandsHandedOver: Int { handOvers.load(ordering: .relaxed) }

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
    if Self.callersMayRead && callerWaitLimit > 0 && onPush == nil && !isSubscriber
      && !(cancellable && Task.isCancelled)
    {
      switch sendReadingReply(bytes, replies: replies, id: id) {
      case .notTried: break
      case .answered(let replies): return replies
      case .failed(let error): throw error
      case .handOver:
        // The command is queued: the caller waits for its reply as any other does.
        return try await reply(to: id, cancellable: cancellable) { continuation, checksCancellation in
          attach(continuation, to: id, checksCancellation: checksCancellation)
        }
      }
    }
    return try await reply(to: id, cancellable: cancellable) { continuation, checksCancellation in
      enqueue(bytes, replies: replies, id: id, checksCancellation: checksCancellation, continuation: continuation)
    }
  }

  /// Waits for the replies to command `id`, whose continuation `register` puts in the queue
  /// (checking the task's cancellation under the queue's lock when told to). A cancellable
  /// wait gives the command up when the task is cancelled: its reply is then read and dropped.
  private func reply(
    to id: UInt64, cancellable: Bool,
    register: (CheckedContinuation<[RESPValue], any Error>, _ checksCancellation: Bool) -> Void
  ) async throws -> [RESPValue] {
    guard cancellable else {
      return try await withCheckedThrowingContinuation { register($0, false) }
    }
    return try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { register($0, true) }
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

  func enqueue(
    _ bytes: [UInt8], replies: Int, id: UInt64, checksCancellation: Bool,
    continuation: CheckedContinuation<[RESPValue], any Error>
  ) {
    enum Outcome {
      case sent
      case sentToIdleThread
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
          deadline: Monotonic.now &+ timeoutNanoseconds, isLone: state.head == state.pending.count))
      inFlight.add(1, ordering: .relaxed)
      if state.hasOutbound {
        state.outbound.append(contentsOf: bytes)
        return .sent
      }
      switch bytes.withUnsafeBytes({ Socket.send(fd, $0) }) {
      case .bytes(let count) where count == bytes.count:
        // A caller reading its own reply wakes the thread for the commands behind it when it
        // is done.
        return state.threadWatchesReplies || state.callerReads ? .sent : .sentToIdleThread
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
    case .sentToIdleThread, .handedToThread: wake()
    case .cancelled: continuation.resume(throwing: CancellationError())
    case .closed(let error): continuation.resume(throwing: error)
    case .sendFailed(let code):
      fail(RedisError(code: .connectionClosed, message: "cannot send to \(server): \(Socket.errorText(code))"))
    }
  }

  func abandon(_ id: UInt64) {
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
  func fail(_ error: RedisError) {
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

  func wake() {
    var byte: UInt8 = 1
    _ = write(wakeWrite, &byte, 1)
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
