import AsyncCache
import Foundation

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// A small HTTP/1.1 server on 127.0.0.1 and an ephemeral port that answers as the test scripts
/// it, one request per connection (`Connection: close`).
///
/// All socket I/O is blocking and runs on threads of the server's own (one accepts, one per
/// connection), never on the cooperative pool. Every thread waits with `poll` on its socket *and*
/// on a wake pipe that ``stop()`` writes to, so stopping wakes them all, whatever they wait for.
/// SIGPIPE is suppressed per socket (`MSG_NOSIGNAL`, `SO_NOSIGPIPE` on Apple platforms).
final class LoopbackHTTPServer: Sendable {
  /// A request as the server read it.
  struct Request: Sendable {
    var method: String
    var path: String
    /// Header fields, names lowercased.
    var headers: [String: String]
    /// 1 for the first request to this path, 2 for the second, …
    var number: Int
  }

  /// How the server answers a request.
  enum Response: Sendable {
    /// A whole response.
    case status(Int, body: Data = Data())
    /// A 200 that announces `declaredLength` bytes but sends only `sent`, then holds the
    /// connection open until the client closes it or the server stops.
    case partial(declaredLength: Int, sent: Data)
    /// No answer at all: the connection is held until the client closes it or the server stops.
    case noAnswer
  }

  /// Something the test can wait for with ``waitFor(_:)``.
  enum Event: Hashable, Sendable {
    /// A `.partial` or `.noAnswer` response to `path` has been written and its connection is held.
    case held(path: String)
    /// The client closed a held connection to `path` (it gave up or cancelled).
    case clientClosed(path: String)
  }

  typealias Route = @Sendable (Request) -> Response

  private struct State {
    var isStopping = false
    var threads = 0
    var requestCounts: [String: Int] = [:]
    var events: [Event: Int] = [:]
    var nextWaiterID: UInt64 = 0
    var eventWaiters: [UInt64: (event: Event, continuation: CheckedContinuation<Void, any Error>)] = [:]
    /// Waits cancelled before they registered: they must not register.
    var cancelledWaiters: Set<UInt64> = []
    var stopWaiters: [CheckedContinuation<Void, Never>] = []
  }

  /// The port the server listens on.
  let port: UInt16
  private let listener: Int32
  private let wakePipe: (read: Int32, write: Int32)
  private let routes: [String: Route]
  private let state = Locked(State())

  /// Starts a server that answers each path with its route, and anything else with a 404.
  init(routes: [String: Route]) throws {
    self.routes = routes
    var pipeEnds: [Int32] = [0, 0]
    guard pipe(&pipeEnds) == 0 else { throw Self.posixError("pipe") }
    do {
      (listener, port) = try Self.bindLoopback(listening: true)
    } catch {
      close(pipeEnds[0])
      close(pipeEnds[1])
      throw error
    }
    wakePipe = (pipeEnds[0], pipeEnds[1])
    spawn { $0.acceptLoop() }
  }

  /// A TCP socket bound to 127.0.0.1 and an ephemeral port, listening or not (connections to a
  /// port bound but not listened on are refused, and no one else can take it meanwhile).
  static func bindLoopback(listening: Bool) throws -> (descriptor: Int32, port: UInt16) {
    #if canImport(Glibc) || canImport(Musl)
      let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #else
      let descriptor = socket(AF_INET, SOCK_STREAM, 0)
    #endif
    guard descriptor >= 0 else { throw posixError("socket") }
    var address = sockaddr_in()
    #if canImport(Darwin)
      address.sin_len = UInt8(MemoryLayout<sockaddr_in>.size)
    #endif
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = 0  // an ephemeral port, read back below
    address.sin_addr.s_addr = UInt32(0x7F00_0001).bigEndian
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let ready = withUnsafeMutablePointer(to: &address) { pointer in
      pointer.withMemoryRebound(to: sockaddr.self, capacity: 1) { address in
        bind(descriptor, address, length) == 0 && (!listening || listen(descriptor, 64) == 0)
          && getsockname(descriptor, address, &length) == 0
      }
    }
    guard ready else {
      let error = posixError("bind/listen")
      close(descriptor)
      throw error
    }
    return (descriptor, UInt16(bigEndian: address.sin_port))
  }

  /// The URL of `path` on this server.
  func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

  /// How many requests for `path` the server has read.
  func requestCount(for path: String) -> Int { state.withLock { $0.requestCounts[path, default: 0] } }

  /// Returns once `event` has happened (at once if it already has).
  ///
  /// - Throws: `CancellationError` when the waiting task is cancelled first (by a time limit, say),
  ///   so that a test whose event never comes fails instead of hanging.
  func waitFor(_ event: Event) async throws {
    let id = state.withLock { state in
      state.nextWaiterID += 1
      return state.nextWaiterID
    }
    try await withTaskCancellationHandler {
      try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<Void, any Error>) in
        let outcome: Result<Void, any Error>? = state.withLock { state in
          if state.events[event, default: 0] > 0 { return .success(()) }
          if state.cancelledWaiters.remove(id) != nil { return .failure(CancellationError()) }
          state.eventWaiters[id] = (event, continuation)
          return nil
        }
        if let outcome { continuation.resume(with: outcome) }
      }
    } onCancel: {
      let waiter = state.withLock { state in
        let waiter = state.eventWaiters.removeValue(forKey: id)
        if waiter == nil { state.cancelledWaiters.insert(id) }
        return waiter
      }
      waiter?.continuation.resume(throwing: CancellationError())
    }
  }

  /// Wakes every thread of the server, closes its sockets and returns once all its threads have
  /// ended. Held connections are closed. Safe to call more than once.
  func stop() async {
    let first = state.withLock { state in
      defer { state.isStopping = true }
      return !state.isStopping
    }
    // The byte is never read: the pipe stays readable, so every `poll` on it returns from now on.
    if first { _ = write(wakePipe.write, [UInt8(0)], 1) }
    await withCheckedContinuation { continuation in
      let finished = state.withLock { state in
        if state.threads == 0 { return true }
        state.stopWaiters.append(continuation)
        return false
      }
      if finished { continuation.resume() }
    }
    if first {
      close(wakePipe.read)
      close(wakePipe.write)
    }
  }

  // MARK: Threads

  private func spawn(_ body: @escaping @Sendable (LoopbackHTTPServer) -> Void) {
    state.withLock { $0.threads += 1 }
    let thread = Thread { [self] in
      body(self)
      let waiters: [CheckedContinuation<Void, Never>] = state.withLock { state in
        state.threads -= 1
        guard state.threads == 0 else { return [] }
        defer { state.stopWaiters = [] }
        return state.stopWaiters
      }
      for waiter in waiters { waiter.resume() }
    }
    thread.start()
  }

  private func acceptLoop() {
    defer { close(listener) }
    while waitUntilReady(listener, for: POLLIN) {
      let connection = accept(listener, nil, nil)
      guard connection >= 0 else { continue }
      #if canImport(Darwin)
        var on: Int32 = 1
        setsockopt(connection, SOL_SOCKET, SO_NOSIGPIPE, &on, socklen_t(MemoryLayout<Int32>.size))
      #endif
      spawn { $0.serve(connection) }
    }
  }

  private func serve(_ connection: Int32) {
    defer { close(connection) }
    guard var request = readRequest(connection) else { return }
    request.number = state.withLock { state in
      state.requestCounts[request.path, default: 0] += 1
      return state.requestCounts[request.path]!
    }
    let response = routes[request.path]?(request) ?? .status(404, body: Data("no route for \(request.path)".utf8))
    switch response {
    case .status(let status, let body):
      guard sendAll(connection, Self.head(status: status, contentLength: body.count) + body) else { return }
      // Closing with unread input would reset the connection under the client's feet: say we are
      // done and wait for the client to close first.
      shutdown(connection, Int32(SHUT_WR))
      drainUntilClosed(connection)
    case .partial(let declaredLength, let sent):
      guard sendAll(connection, Self.head(status: 200, contentLength: declaredLength) + sent) else { return }
      hold(connection, path: request.path)
    case .noAnswer:
      hold(connection, path: request.path)
    }
  }

  private func hold(_ connection: Int32, path: String) {
    record(.held(path: path))
    if drainUntilClosed(connection) { record(.clientClosed(path: path)) }
  }

  // MARK: I/O

  /// Waits until `descriptor` is ready for `events`; `false` when the server stops first.
  private func waitUntilReady(_ descriptor: Int32, for events: Int32) -> Bool {
    var descriptors = [
      pollfd(fd: descriptor, events: Int16(events), revents: 0),
      pollfd(fd: wakePipe.read, events: Int16(POLLIN), revents: 0),
    ]
    while true {
      let ready = poll(&descriptors, 2, -1)
      if ready < 0 && errno == EINTR { continue }
      guard ready > 0, descriptors[1].revents == 0 else { return false }
      if descriptors[0].revents != 0 { return true }
    }
  }

  /// Reads the request line and header fields; `nil` when the client or the server gave up.
  private func readRequest(_ connection: Int32) -> Request? {
    var bytes: [UInt8] = []
    let end: [UInt8] = Array("\r\n\r\n".utf8)
    while bytes.count < 65_536 {
      guard let chunk = receive(connection), !chunk.isEmpty else { return nil }
      bytes += chunk
      if let range = bytes.firstRange(of: end) {
        let lines = String(decoding: bytes[..<range.lowerBound], as: UTF8.self).split(separator: "\r\n")
        let requestLine = lines.first?.split(separator: " ") ?? []
        guard requestLine.count == 3 else { return nil }
        var headers: [String: String] = [:]
        for line in lines.dropFirst() {
          guard let colon = line.firstIndex(of: ":") else { continue }
          headers[line[..<colon].lowercased()] = line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
        }
        let path = String(requestLine[1].prefix { $0 != "?" })
        return Request(method: String(requestLine[0]), path: path, headers: headers, number: 0)
      }
    }
    return nil
  }

  /// Receives what is there: empty at the end of the stream, `nil` on an error or a stop.
  private func receive(_ connection: Int32) -> [UInt8]? {
    var buffer = [UInt8](repeating: 0, count: 16_384)
    while waitUntilReady(connection, for: POLLIN) {
      let count = recv(connection, &buffer, buffer.count, Int32(MSG_DONTWAIT))
      if count >= 0 { return Array(buffer[..<count]) }
      if errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR { return nil }
    }
    return nil
  }

  /// Reads and drops input until the client closes the connection: `true` then, `false` when the
  /// server stopped first.
  @discardableResult
  private func drainUntilClosed(_ connection: Int32) -> Bool {
    while let chunk = receive(connection) {
      if chunk.isEmpty { return true }
    }
    return !state.withLock { $0.isStopping }
  }

  /// Sends all of `bytes`; `false` when the client went away or the server stopped.
  private func sendAll(_ connection: Int32, _ bytes: Data) -> Bool {
    #if canImport(Darwin)
      let flags = Int32(MSG_DONTWAIT)
    #else
      let flags = Int32(MSG_DONTWAIT | MSG_NOSIGNAL)
    #endif
    return bytes.withUnsafeBytes { buffer in
      var offset = 0
      while offset < buffer.count {
        guard waitUntilReady(connection, for: POLLOUT) else { return false }
        let count = send(connection, buffer.baseAddress! + offset, buffer.count - offset, flags)
        if count > 0 {
          offset += count
        } else if errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR {
          return false
        }
      }
      return true
    }
  }

  private func record(_ event: Event) {
    let waiters = state.withLock { state in
      state.events[event, default: 0] += 1
      let ready = state.eventWaiters.filter { $0.value.event == event }
      for id in ready.keys { state.eventWaiters[id] = nil }
      return ready.values
    }
    for waiter in waiters { waiter.continuation.resume() }
  }

  private static func head(status: Int, contentLength: Int) -> Data {
    let reason = [200: "OK", 404: "Not Found", 410: "Gone", 500: "Internal Server Error", 503: "Service Unavailable"]
    return Data(
      ("HTTP/1.1 \(status) \(reason[status] ?? "Status")\r\nContent-Length: \(contentLength)\r\n"
        + "Content-Type: application/octet-stream\r\nConnection: close\r\n\r\n").utf8)
  }

  private static func posixError(_ call: String) -> any Error {
    NSError(domain: NSPOSIXErrorDomain, code: Int(errno), userInfo: [NSLocalizedDescriptionKey: "\(call) failed"])
  }
}

/// Runs `body` with a server answering `routes`, and stops the server however `body` ends.
func withLoopbackHTTPServer<Output>(
  routes: [String: LoopbackHTTPServer.Route],
  _ body: (LoopbackHTTPServer) async throws -> Output
) async throws -> Output {
  let server = try LoopbackHTTPServer(routes: routes)
  do {
    let result = try await body(server)
    await server.stop()
    return result
  } catch {
    await server.stop()
    throw error
  }
}

/// Runs `body` with a loopback port that refuses connections: bound, not listening.
func withRefusingLoopbackPort<Output>(_ body: (UInt16) async throws -> Output) async throws -> Output {
  let (descriptor, port) = try LoopbackHTTPServer.bindLoopback(listening: false)
  defer { close(descriptor) }
  return try await body(port)
}
