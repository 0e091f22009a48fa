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

// MARK: - A lone command's reply, read by its caller

extension RedisConnection {
  /// What ``sendReadingReply(_:replies:id:)`` did.
  enum CallerRead {
    /// Nothing: the command goes the usual way.
    case notTried
    case answered([RESPValue])
    case failed(RedisError)
    /// The command is queued, and the reply not read yet: the thread must answer it.
    case handOver
  }

  /// Sends a lone command and reads its reply on the calling thread, waiting at most
  /// its caller wait limit (see ``RedisConnection``), when it may.
  func sendReadingReply(_ bytes: [UInt8], replies: Int, id: UInt64) -> CallerRead {
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

  /// Hands a command whose reply its caller did not read (in time) to the thread: the
  /// reply goes to `continuation`, or answers it at once if the thread read it already.
  func attach(
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
}
