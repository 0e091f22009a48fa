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
  private static let callerWaiting = Atomic<Bool>(false)

  /// `host:port`, for messages.
  let server: String
  private let fd: Int32
  private let wakeRead: Int32
  private let wakeWrite: Int32
  private let timeout: Duration
  private let timeoutNanoseconds: UInt64
  private let callerWaitLimit: UInt64
  /// Tests: called by a caller whose lone command the socket did not take whole, once it woke
  /// the thread to send the rest, before the caller queues for the reply.
  private let afterPartialSend: (@Sendable () -> Void)?
  /// The layer's counters, for the replies read by callers.
  private let counters: RedisCounters?
  private let isSubscriber: Bool
  private let onPush: (@Sendable (RESPValue) -> Void)?
  private let onClose: @Sendable (RedisError) -> Void
  private let state: Locked<State>
  /// The socket's reading side. Whoever reads the socket holds it: the connection's thread, or
  /// a caller reading its lone command's reply.
  private let reading: Locked<ReadSide>
  private let broken = Atomic<Bool>(false)
  private let inFlight = Atomic<Int>(0)
  private let nextID = Atomic<UInt64>(0)
  private let readsByCaller = Atomic<Int>(0)
  private let handOvers = Atomic<Int>(0)

  private struct Pending {
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

  private struct ReadSide: Sendable {
    var parser = RESPParser()
    var buffer = [UInt8](repeating: 0, count: 64 << 10)
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
      case .handOver: return try await handOver(id, cancellable: cancellable)
      }
    }
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

  /// What ``sendReadingReply(_:replies:id:)`` did.
  private enum CallerRead {
    /// Nothing: the command goes the usual way.
    case notTried
    case answered([RESPValue])
    case failed(RedisError)
    /// The command is queued, and the reply not read yet: the thread must answer it.
    case handOver
  }

  /// Sends a lone command and reads its reply on the calling thread, waiting at most
  /// its caller wait limit (see ``RedisConnection``), when it may.
  private func sendReadingReply(_ bytes: [UInt8], replies: Int, id: UInt64) -> CallerRead {
    guard Self.callerWaiting.compareExchange(expected: false, desired: true, ordering: .acquiring).exchanged else {
      return .notTried
    }
    defer { Self.callerWaiting.store(false, ordering: .releasing) }
    enum Sent {
      case notTried
      case sent
      case queued
      case failed(Int32)
    }
    let start = Monotonic.now
    let sent = state.withLock { state -> Sent in
      guard state.failure == nil, state.head == state.pending.count, !state.hasOutbound, !state.callerReads,
        state.callerReplies == nil
      else {
        return .notTried
      }
      // Slow round trips are left to the thread, with a caller's read now and then to notice
      // that they are fast again.
      state.loneCommands &+= 1
      guard state.loneReplyTime <= callerWaitLimit || state.loneCommands % 64 == 0 else { return .notTried }
      state.pending.append(
        Pending(
          id: id, remaining: replies, replies: [], continuation: nil, deadline: start &+ timeoutNanoseconds,
          readByCaller: true, isLone: true))
      inFlight.add(1, ordering: .relaxed)
      switch bytes.withUnsafeBytes({ Socket.send(fd, $0) }) {
      case .bytes(let count) where count == bytes.count:
        state.callerReader = id
        return .sent
      case .bytes(let count):
        state.outbound = Array(bytes[count...])
      case .wouldBlock, .closed:
        state.outbound = bytes
      case .failed(let code):
        return .failed(code)
      }
      // The thread sends the rest and reads the reply, which waits for the caller in
      // `callerReplies` if it comes before the caller is queued for it (`attach`).
      state.outboundSent = 0
      return .queued
    }
    switch sent {
    case .notTried: return .notTried
    case .queued:
      wake()
      handOvers.add(1, ordering: .relaxed)
      afterPartialSend?()
      return .handOver
    case .failed(let code):
      let error = RedisError(code: .connectionClosed, message: "cannot send to \(server): \(Socket.errorText(code))")
      fail(error)
      return .failed(error)
    case .sent:
      break
    }
    let limit = start &+ callerWaitLimit
    while true {
      let now = Monotonic.now
      guard now < limit else {
        handOvers.add(1, ordering: .relaxed)
        return .handOver
      }
      #if os(Linux)
        let ready = async_cache_wait_readable(fd, Int64(limit - now))
        if ready < 0 && ready != -EINTR {
          handOvers.add(1, ordering: .relaxed)
          return .handOver
        }
      #endif
      guard receive() else { break }
      let answered = state.withLock { state -> (replies: [RESPValue], wakes: Bool)? in
        guard let replies = state.takeCallerReplies(of: id) else { return nil }
        return (replies, state.endCallerRead(of: id))
      }
      if let answered {
        if answered.wakes { wake() }
        readsByCaller.add(1, ordering: .relaxed)
        counters?.repliesReadByCallers.add(1, ordering: .relaxed)
        return .answered(answered.replies)
      }
    }
    // The connection failed as the caller read.
    return state.withLock { state in
      _ = state.endCallerRead(of: id)
      if let replies = state.takeCallerReplies(of: id) { return .answered(replies) }
      return .failed(state.failure ?? RedisError(code: .connectionClosed, message: "\(server) closed the connection"))
    }
  }

  /// Hands a command whose reply its caller did not read (in time) to the thread, and waits
  /// for the reply as any other caller does.
  private func handOver(_ id: UInt64, cancellable: Bool) async throws -> [RESPValue] {
    guard cancellable else {
      return try await withCheckedThrowingContinuation { continuation in
        attach(continuation, to: id, checksCancellation: false)
      }
    }
    return try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { continuation in
        attach(continuation, to: id, checksCancellation: true)
      }
    } onCancel: {
      abandon(id)
    }
  }

  private func attach(
    _ continuation: CheckedContinuation<[RESPValue], any Error>, to id: UInt64, checksCancellation: Bool
  ) {
    enum Outcome {
      case attached
      case answered([RESPValue])
      case failed(RedisError)
      case cancelled
    }
    let (outcome, wakes) = state.withLock { state -> (Outcome, Bool) in
      let wakes = state.endCallerRead(of: id)
      // The thread read the reply after the caller's last look.
      if let replies = state.takeCallerReplies(of: id) { return (.answered(replies), wakes) }
      if let failure = state.failure { return (.failed(failure), false) }
      guard state.head < state.pending.count,
        let index = state.pending[state.head...].firstIndex(where: { $0.id == id })
      else {
        let error = RedisError(code: .protocolError, message: "a command to \(server) left the queue unanswered")
        return (.failed(error), wakes)
      }
      state.pending[index].readByCaller = false
      // Checked under the lock that `abandon` takes, as in `enqueue`: the command keeps its
      // place, and its reply is read and dropped.
      if checksCancellation && Task.isCancelled { return (.cancelled, wakes) }
      state.pending[index].continuation = continuation
      return (.attached, wakes)
    }
    if wakes { wake() }
    switch outcome {
    case .attached: break
    case .answered(let replies): continuation.resume(returning: replies)
    case .failed(let error): continuation.resume(throwing: error)
    case .cancelled: continuation.resume(throwing: CancellationError())
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
    defer {
      // Ends the TCP connection now; the descriptors are closed in `deinit`, once no caller
      // can write to the wake-up pipe or send on the socket any more.
      _ = shutdown(fd, Int32(SHUT_RDWR))
    }
    #if os(Linux)
      let closing = Int16(ASYNC_CACHE_POLLRDHUP)
    #else
      let closing = Int16(POLLIN)
    #endif
    let idleTimeout = Monotonic.milliseconds(until: timeoutNanoseconds, from: 0)
    var descriptors = [pollfd](repeating: pollfd(), count: 2)
    while true {
      let plan = state.withLock { state -> (timeout: Int32, events: Int16)? in
        if state.failure != nil { return nil }
        let hasPending = state.head < state.pending.count
        // Pushes may come at any time; replies only to commands in flight, and while the queue
        // is empty after a reply its caller read, the next one is likely read by its caller too.
        let watchesReplies =
          isSubscriber || onPush != nil || (!state.callerReads && (hasPending || !state.lastReadByCaller))
        state.threadWatchesReplies = watchesReplies && !state.callerReads
        state.threadWatchesSocket = !state.callerReads
        var events: Int16 = state.hasOutbound ? Int16(POLLOUT) : 0
        // While a caller reads, the socket is its own; else the thread watches for its closing.
        if !state.callerReads { events |= watchesReplies ? Int16(POLLIN) : closing }
        guard hasPending else { return (idleTimeout, events) }
        return (Monotonic.milliseconds(until: state.pending[state.head].deadline, from: Monotonic.now), events)
      }
      guard let plan else { return }
      // A descriptor of -1 is not polled.
      descriptors[0] = pollfd(fd: plan.events == 0 ? -1 : fd, events: plan.events, revents: 0)
      descriptors[1] = pollfd(fd: wakeRead, events: Int16(POLLIN), revents: 0)
      if poll(&descriptors, 2, plan.timeout) < 0, errno != EINTR {
        fail(RedisError(code: .connectionClosed, message: "poll() failed on \(server): \(Socket.errorText(errno))"))
        return
      }
      if descriptors[1].revents != 0 { drainWakePipe() }
      let events = descriptors[0].revents
      if events & (Int16(POLLIN) | Int16(POLLHUP) | Int16(POLLERR) | closing) != 0,
        !state.withLock({ $0.callerReads })
      {
        guard receive() else { return }
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
  private func receive() -> Bool {
    reading.withLock { side in
      var parser = RESPParser()
      swap(&parser, &side.parser)
      defer { swap(&parser, &side.parser) }
      return side.buffer.withUnsafeMutableBytes { receive(into: $0, parser: &parser) }
    }
  }

  private func receive(into buffer: UnsafeMutableRawBufferPointer, parser: inout RESPParser) -> Bool {
    while true {
      switch Socket.receive(fd, into: buffer) {
      case .bytes(let count):
        do {
          guard try parser.consume(UnsafeRawBufferPointer(rebasing: buffer[..<count]), deliver) else { return false }
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
      state.lastReadByCaller = done.readByCaller
      if done.isLone {
        let sample = Monotonic.now &- (done.deadline &- timeoutNanoseconds)
        state.loneReplyTime =
          state.loneReplyTime == 0 ? sample : state.loneReplyTime - state.loneReplyTime / 8 + sample / 8
      }
      if done.readByCaller {
        state.callerReplies = (done.id, done.replies)
        return .some(nil)
      }
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

  private func drainWakePipe() {
    withUnsafeTemporaryAllocation(byteCount: 256, alignment: 1) { buffer in
      while read(wakeRead, buffer.baseAddress, buffer.count) > 0 {}
    }
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
