import AsyncCache
package import Foundation

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// A small HTTP/1.1 server on 127.0.0.1 and an ephemeral port that answers as the test scripts
/// it, one request per connection (`Connection: close`), honestly or in the hostile ways a
/// client must survive: a body trickled a byte at a time, header lines or `100 Continue`s
/// without end, a body of hundreds of megabytes, bytes of the test's own making (a gzip bomb, a
/// `Retry-After`), and a second response on a kept-alive connection.
///
/// All socket I/O is blocking and runs on threads of the server's own (one accepts, one per
/// connection), never on the cooperative pool. Every thread waits with `poll` on its socket *and*
/// on a wake pipe that ``stop()`` writes to, so stopping wakes them all, whatever they wait for.
/// SIGPIPE is suppressed per socket (`MSG_NOSIGNAL`, `SO_NOSIGPIPE` on Apple platforms).
package final class LoopbackHTTPServer: Sendable {
  /// A request as the server read it.
  package struct Request: Sendable {
    package var method: String
    package var path: String
    /// Header fields, names lowercased.
    package var headers: [String: String]
    /// 1 for the first request to this path, 2 for the second, …
    package var number: Int
  }

  /// How the server answers a request.
  package enum Response: Sendable {
    /// A whole response.
    case status(Int, body: Data = Data())
    /// A 200 that announces `declaredLength` bytes but sends only `sent`, then holds the
    /// connection open until the client closes it or the server stops.
    case partial(declaredLength: Int, sent: Data)
    /// No answer at all: the connection is held until the client closes it or the server stops.
    case noAnswer
    /// `bytes` as they are (a head and body of the test's making, see
    /// ``LoopbackHTTPServer/response(status:fields:body:)``), then the connection is closed as
    /// after `.status`.
    case raw(Data)
    /// `head`, then `chunk` again every `interval`, for as long as the client keeps the
    /// connection open: a body one byte at a time, header lines without end, `100 Continue`s
    /// without end. The connection is held once the head and the first chunk are written.
    case trickle(head: Data, chunk: Data, interval: Duration)
    /// `head`, then `bodySize` bytes, as fast as the client takes them; the bytes of the body
    /// written are counted (``bodyBytesSent(for:)``). With `pausingAfter` less than `bodySize`,
    /// the server writes that much of the body, and then holds the connection: a client that
    /// waits for the rest waits forever.
    case flood(head: Data, bodySize: Int, pausingAfter: Int = .max)
    /// `first` (a whole response) on a connection left open, as a server that keeps connections
    /// alive would; then, once the test calls ``release(_:)`` for the path, `second` on the same
    /// connection, unasked for. The connection is held until the client closes it or the server
    /// stops; later requests on it are read and left unanswered.
    case keepAlive(first: Data, second: Data)
  }

  /// Something the test can wait for with ``waitFor(_:)``.
  package enum Event: Hashable, Sendable {
    /// A `.partial`, `.noAnswer`, `.trickle`, `.keepAlive` or pausing `.flood` response to `path`
    /// has been written (the head and first chunk of a `.trickle`, the body up to the pause of a
    /// `.flood`) and its connection is held.
    case held(path: String)
    /// The client closed a held, trickled or flooded connection to `path` (it gave up or
    /// cancelled), or closed a `.flood` connection after the whole body.
    case clientClosed(path: String)
    /// The second response of a `.keepAlive` to `path` has been written.
    case secondResponseSent(path: String)
  }

  package typealias Route = @Sendable (Request) -> Response

  private struct State {
    var isStopping = false
    var threads = 0
    var requestCounts: [String: Int] = [:]
    var connections = 0
    var bodyBytesSent: [String: Int] = [:]
    var released: Set<String> = []
    var events: [Event: Int] = [:]
    var nextWaiterID: UInt64 = 0
    var eventWaiters: [UInt64: (event: Event, continuation: CheckedContinuation<Void, any Error>)] = [:]
    /// Waits cancelled before they registered: they must not register.
    var cancelledWaiters: Set<UInt64> = []
    var stopWaiters: [CheckedContinuation<Void, Never>] = []
  }

  /// The port the server listens on.
  package let port: UInt16
  private let listener: Int32
  private let wakePipe: (read: Int32, write: Int32)
  private let routes: [String: Route]
  private let state = Locked(State())

  /// Starts a server that answers each path with its route, and anything else with a 404.
  package init(routes: [String: Route]) throws {
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
  package static func bindLoopback(listening: Bool) throws -> (descriptor: Int32, port: UInt16) {
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
  package func url(_ path: String) -> URL { URL(string: "http://127.0.0.1:\(port)\(path)")! }

  /// How many requests for `path` the server has read.
  package func requestCount(for path: String) -> Int { state.withLock { $0.requestCounts[path, default: 0] } }

  /// How many connections the server has accepted.
  package var connectionCount: Int { state.withLock { $0.connections } }

  /// How many bytes of `.flood` bodies to `path` the server has written.
  package func bodyBytesSent(for path: String) -> Int { state.withLock { $0.bodyBytesSent[path, default: 0] } }

  /// Lets the `.keepAlive` connections to `path` write their second response.
  package func release(_ path: String) { state.withLock { _ = $0.released.insert(path) } }

  /// The bytes of a response: the status line, `Content-Length` unless `fields` has one (or has
  /// `Transfer-Encoding`), `fields` in order, and `body`.
  package static func response(status: Int, fields: KeyValuePairs<String, String> = [:], body: Data = Data()) -> Data {
    head(status: status, fields: fields, contentLength: body.count) + body
  }

  /// The head of a response: the status line, `fields` in order, then `Content-Length:
  /// contentLength` unless `contentLength` is `nil` or `fields` sets the length or
  /// `Transfer-Encoding`, then the empty line.
  package static func head(status: Int, fields: KeyValuePairs<String, String> = [:], contentLength: Int?) -> Data {
    var text = "HTTP/1.1 \(status) \(reasons[status] ?? "Status")\r\n"
    for (name, value) in fields { text += "\(name): \(value)\r\n" }
    let names = Set(fields.map { $0.key.lowercased() })
    if let contentLength, names.isDisjoint(with: ["content-length", "transfer-encoding"]) {
      text += "Content-Length: \(contentLength)\r\n"
    }
    return Data((text + "\r\n").utf8)
  }

  private static let reasons = [
    100: "Continue", 200: "OK", 404: "Not Found", 410: "Gone", 429: "Too Many Requests", 500: "Internal Server Error",
    503: "Service Unavailable",
  ]

  /// Returns once `event` has happened (at once if it already has).
  ///
  /// - Throws: `CancellationError` when the waiting task is cancelled first (by a time limit, say),
  ///   so that a test whose event never comes fails instead of hanging.
  package func waitFor(_ event: Event) async throws {
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
  package func stop() async {
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
      state.withLock { $0.connections += 1 }
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
    case .raw(let bytes):
      guard sendAll(connection, bytes) else { return }
      shutdown(connection, Int32(SHUT_WR))
      drainUntilClosed(connection)
    case .trickle(let head, let chunk, let interval):
      trickle(connection, path: request.path, head: head, chunk: chunk, interval: interval)
    case .flood(let head, let bodySize, let pausingAfter):
      flood(connection, path: request.path, head: head, bodySize: bodySize, pausingAfter: pausingAfter)
    case .keepAlive(let first, let second):
      keepAlive(connection, path: request.path, first: first, second: second)
    }
  }

  private func keepAlive(_ connection: Int32, path: String, first: Data, second: Data) {
    guard sendAll(connection, first) else { return }
    record(.held(path: path))
    // The release comes from the test, not the socket: look for it between short waits.
    while !state.withLock({ $0.released.contains(path) }) {
      switch waitForClose(connection, milliseconds: 10) {
      case .closed: return record(.clientClosed(path: path))
      case .stopping: return
      case .open: continue
      }
    }
    guard sendAll(connection, second) else { return record(.clientClosed(path: path)) }
    record(.secondResponseSent(path: path))
    hold(connection, path: path)
  }

  private func trickle(_ connection: Int32, path: String, head: Data, chunk: Data, interval: Duration) {
    guard sendAll(connection, head + chunk) else { return }
    record(.held(path: path))
    let milliseconds = Int32(interval / .milliseconds(1))
    while true {
      switch waitForClose(connection, milliseconds: milliseconds) {
      case .closed:
        record(.clientClosed(path: path))
        return
      case .stopping:
        return
      case .open:
        guard sendAll(connection, chunk) else {
          record(.clientClosed(path: path))
          return
        }
      }
    }
  }

  private func flood(_ connection: Int32, path: String, head: Data, bodySize: Int, pausingAfter: Int) {
    guard sendAll(connection, head) else { return }
    let block = Data(repeating: UInt8(ascii: "z"), count: 65_536)
    var remaining = Swift.min(bodySize, pausingAfter)
    while remaining > 0 {
      let part = block.prefix(remaining)
      guard sendAll(connection, part) else {
        // The client went away before the whole body: it stopped the transfer.
        if !state.withLock({ $0.isStopping }) { record(.clientClosed(path: path)) }
        return
      }
      remaining -= part.count
      state.withLock { $0.bodyBytesSent[path, default: 0] += part.count }
    }
    if pausingAfter < bodySize { return hold(connection, path: path) }
    shutdown(connection, Int32(SHUT_WR))
    if drainUntilClosed(connection) { record(.clientClosed(path: path)) }
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

  private enum ConnectionState { case open, closed, stopping }

  /// Waits up to `milliseconds` for the client to close `connection`, reading and dropping what
  /// it sends meanwhile.
  private func waitForClose(_ connection: Int32, milliseconds: Int32) -> ConnectionState {
    var descriptors = [
      pollfd(fd: connection, events: Int16(POLLIN), revents: 0),
      pollfd(fd: wakePipe.read, events: Int16(POLLIN), revents: 0),
    ]
    let ready = poll(&descriptors, 2, milliseconds)
    if ready < 0 { return errno == EINTR ? .open : .closed }
    if descriptors[1].revents != 0 { return .stopping }
    guard descriptors[0].revents != 0 else { return .open }
    var buffer = [UInt8](repeating: 0, count: 16_384)
    let count = recv(connection, &buffer, buffer.count, Int32(MSG_DONTWAIT))
    if count > 0 || (count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) { return .open }
    return .closed
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
    head(
      status: status, fields: ["Content-Type": "application/octet-stream", "Connection": "close"],
      contentLength: contentLength)
  }

  private static func posixError(_ call: String) -> any Error {
    NSError(domain: NSPOSIXErrorDomain, code: Int(errno), userInfo: [NSLocalizedDescriptionKey: "\(call) failed"])
  }
}

/// Runs `body` with a server answering `routes`, and stops the server however `body` ends.
package func withLoopbackHTTPServer<Output>(
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
package func withRefusingLoopbackPort<Output>(_ body: (UInt16) async throws -> Output) async throws -> Output {
  let (descriptor, port) = try LoopbackHTTPServer.bindLoopback(listening: false)
  defer { close(descriptor) }
  return try await body(port)
}
