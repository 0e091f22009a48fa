#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// The POSIX calls the connection makes, in one place: resolving and connecting with a time
/// limit, non-blocking sends that never raise `SIGPIPE`, and polling.
///
/// Every function here may block (name resolution, `poll`) and runs only on a connection's own
/// thread, except ``send(_:_:)``, which never blocks.
enum Socket {
  /// The outcome of a non-blocking send or receive.
  enum Transfer {
    /// This many bytes moved (never 0 for a receive: see ``closed``).
    case bytes(Int)
    /// The socket's buffer is full (send) or empty (receive): poll and try again.
    case wouldBlock
    /// The peer closed the connection (receive only).
    case closed
    /// The call failed with this `errno`.
    case failed(Int32)
  }

  /// Resolves `host`, connects to the first address that accepts within `timeout`, and returns
  /// the socket: non-blocking, with `TCP_NODELAY` and, on Darwin, `SO_NOSIGPIPE`.
  ///
  /// - Throws: ``RedisError/Code/connectionFailed`` naming the server and the reason.
  static func connect(host: String, port: Int, timeout: Duration) throws(RedisError) -> Int32 {
    let server = "\(host):\(port)"
    var hints = addrinfo()
    hints.ai_family = AF_UNSPEC
    #if canImport(Darwin)
      hints.ai_socktype = SOCK_STREAM
    #else
      hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
    #endif
    hints.ai_protocol = Int32(IPPROTO_TCP)
    var list: UnsafeMutablePointer<addrinfo>?
    let status = getaddrinfo(host, String(port), &hints, &list)
    guard status == 0, let first = list else {
      let reason = String(cString: gai_strerror(status))
      throw RedisError(code: .connectionFailed, message: "cannot resolve \(server): \(reason)")
    }
    defer { freeaddrinfo(first) }
    let deadline = Monotonic.now + timeout.nanoseconds
    var lastError = "no address"
    var candidate: UnsafeMutablePointer<addrinfo>? = first
    while let address = candidate {
      candidate = address.pointee.ai_next
      let fd = socket(address.pointee.ai_family, address.pointee.ai_socktype, address.pointee.ai_protocol)
      guard fd >= 0 else {
        lastError = "socket() failed: \(errorText(errno))"
        continue
      }
      do {
        try configure(fd)
        try connect(fd, to: address.pointee, deadline: deadline)
        return fd
      } catch {
        lastError = error.message
        close(fd)
      }
    }
    throw RedisError(code: .connectionFailed, message: "cannot connect to \(server): \(lastError)")
  }

  private struct Failure: Error {
    var message: String
  }

  private static func configure(_ fd: Int32) throws(Failure) {
    let flags = fcntl(fd, F_GETFL, 0)
    guard flags >= 0, fcntl(fd, F_SETFL, flags | O_NONBLOCK) == 0 else {
      throw Failure(message: "cannot make the socket non-blocking: \(errorText(errno))")
    }
    // Not inherited by processes the application starts.
    _ = fcntl(fd, F_SETFD, FD_CLOEXEC)
    var one: Int32 = 1
    let size = socklen_t(MemoryLayout<Int32>.size)
    // Commands are written whole; waiting to coalesce them (Nagle) would only add latency.
    _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, size)
    #if canImport(Darwin)
      // Linux gets the same from MSG_NOSIGNAL on every send.
      _ = setsockopt(fd, SOL_SOCKET, SO_NOSIGPIPE, &one, size)
    #endif
  }

  private static func connect(_ fd: Int32, to address: addrinfo, deadline: UInt64) throws(Failure) {
    if systemConnect(fd, address.ai_addr, address.ai_addrlen) == 0 { return }
    guard errno == EINPROGRESS || errno == EINTR else {
      throw Failure(message: errorText(errno))
    }
    while true {
      let now = Monotonic.now
      guard now < deadline else { throw Failure(message: "no answer within the connect timeout") }
      var entry = pollfd(fd: fd, events: Int16(POLLOUT), revents: 0)
      let ready = poll(&entry, 1, Monotonic.milliseconds(until: deadline, from: now))
      if ready < 0 {
        if errno == EINTR { continue }
        throw Failure(message: "poll() failed: \(errorText(errno))")
      }
      if ready == 0 { continue }
      var error: Int32 = 0
      var size = socklen_t(MemoryLayout<Int32>.size)
      guard getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 else {
        throw Failure(message: "getsockopt() failed: \(errorText(errno))")
      }
      guard error == 0 else { throw Failure(message: errorText(error)) }
      return
    }
  }

  /// Sends what the socket takes of `bytes` without blocking and without `SIGPIPE`.
  static func send(_ fd: Int32, _ bytes: UnsafeRawBufferPointer) -> Transfer {
    guard let base = bytes.baseAddress, !bytes.isEmpty else { return .bytes(0) }
    #if canImport(Darwin)
      let flags: Int32 = 0
    #else
      let flags = Int32(MSG_NOSIGNAL)
    #endif
    while true {
      let sent = systemSend(fd, base, bytes.count, flags)
      if sent >= 0 { return .bytes(sent) }
      switch errno {
      case EINTR: continue
      case EAGAIN, EWOULDBLOCK: return .wouldBlock
      case let code: return .failed(code)
      }
    }
  }

  /// Receives into `buffer` without blocking.
  static func receive(_ fd: Int32, into buffer: UnsafeMutableRawBufferPointer) -> Transfer {
    while true {
      let received = recv(fd, buffer.baseAddress, buffer.count, 0)
      if received > 0 { return .bytes(received) }
      if received == 0 { return .closed }
      switch errno {
      case EINTR: continue
      case EAGAIN, EWOULDBLOCK: return .wouldBlock
      case let code: return .failed(code)
      }
    }
  }

  /// `strerror`, with the number.
  static func errorText(_ code: Int32) -> String {
    "\(String(cString: strerror(code))) (errno \(code))"
  }
}

// `connect` and `send` are shadowed by this file's own functions of the same names.
private func systemConnect(_ fd: Int32, _ address: UnsafePointer<sockaddr>?, _ length: socklen_t) -> Int32 {
  connect(fd, address, length)
}

private func systemSend(_ fd: Int32, _ base: UnsafeRawPointer, _ count: Int, _ flags: Int32) -> Int {
  send(fd, base, count, flags)
}

/// The monotonic clock in nanoseconds, for deadlines on the connection threads (which do not
/// run on an injected `CacheClock`: socket time limits are real time).
enum Monotonic {
  static var now: UInt64 {
    var time = timespec()
    clock_gettime(CLOCK_MONOTONIC, &time)
    return UInt64(time.tv_sec) &* 1_000_000_000 &+ UInt64(time.tv_nsec)
  }

  /// The whole milliseconds from `now` to `deadline`, rounded up, for `poll`.
  static func milliseconds(until deadline: UInt64, from now: UInt64) -> Int32 {
    guard deadline > now else { return 0 }
    return Int32(clamping: (deadline - now + 999_999) / 1_000_000)
  }
}

extension Duration {
  /// The duration in whole nanoseconds: 0 when negative, saturating when huge.
  var nanoseconds: UInt64 {
    let (seconds, attoseconds) = components
    guard seconds >= 0 else { return 0 }
    guard seconds < 9_000_000_000 else { return .max }
    return UInt64(seconds) * 1_000_000_000 + UInt64(attoseconds / 1_000_000_000)
  }
}
