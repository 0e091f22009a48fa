import AsyncCache

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

// MARK: - The connection's thread

extension RedisConnection {
  func run() {
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
  func receive() -> Bool {
    reading.withLock { side in
      var parser = RESPParser()
      swap(&parser, &side.parser)
      defer { swap(&parser, &side.parser) }
      return side.buffer.withUnsafeMutableBytes { receive(into: $0, parser: &parser) }
    }
  }

  func receive(into buffer: UnsafeMutableRawBufferPointer, parser: inout RESPParser) -> Bool {
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
  func deliver(_ value: RESPValue) -> Bool {
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

  func isPush(_ value: RESPValue) -> Bool {
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
  func flush() -> Bool {
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
  func overdue() -> RedisError? {
    let late = state.withLock { state in
      state.head < state.pending.count && state.pending[state.head].deadline <= Monotonic.now
    }
    guard late else { return nil }
    return RedisError(
      code: .timedOut,
      message:
        "\(server) did not answer within the operation timeout of \(timeout.readable); the connection was discarded")
  }

  func drainWakePipe() {
    withUnsafeTemporaryAllocation(byteCount: 256, alignment: 1) { buffer in
      while read(wakeRead, buffer.baseAddress, buffer.count) > 0 {}
    }
  }
}
