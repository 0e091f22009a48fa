import AsyncCache
import Synchronization

/// The connections of one layer to one server, with the circuit breaker in front of them.
///
/// Connections are shared: a command goes to the open connection with the fewest commands in
/// flight, where it is pipelined behind them. When every open connection is busy, the pool
/// opens another in the background, up to its maximum. Callers never wait for a connection
/// while one is open; with none open, they wait for the one being made (one attempt at a time).
///
/// Every operation passes the ``CircuitBreaker`` first, which turns a server that is down into
/// an immediate ``RedisError/Code/unavailable`` error until its delay has passed.
final class RedisConnectionPool: Sendable {
  struct Options: Sendable {
    var host: String
    var port: Int
    var connectTimeout: Duration
    var operationTimeout: Duration
    /// How long a lone command's caller may wait for its reply on its own thread, in
    /// nanoseconds (see ``RedisConnection``).
    var callerWaitLimit = RedisConnection.defaultCallerWaitLimit
    var maximumConnections: Int
    /// Sent first on every new connection, as one pipeline (`AUTH`, `SELECT`, `CLIENT SETNAME`).
    var handshake: [RESPCommand]
    var circuitBreaker: RedisCircuitBreakerPolicy
    var clock: any CacheClock
    /// The layer's record of which of its pieces cannot reach Redis, for the levels of the
    /// breaker's openings and closings.
    var outage = RedisOutage()
  }

  let options: Options
  /// `host:port`, for messages.
  let server: String
  let counters: RedisCounters
  private let onEvent: RedisEventSink
  private let state: Locked<State>
  /// Set while the breaker has failures to forget, so that a success on a healthy pool takes
  /// no lock to tell it.
  private let hasFailures = Atomic<Bool>(false)

  private struct State {
    var connections: [RedisConnection] = []
    var isConnecting = false
    /// The callers waiting for the connection being made, by id (a cancelled one leaves).
    var waiters: [UInt64: CheckedContinuation<RedisConnection, any Error>] = [:]
    var nextWaiter: UInt64 = 0
    /// Waiters cancelled before they were queued.
    var cancelledWaiters: Set<UInt64> = []
    /// Why the last attempt to connect failed, for callers that come to wait just after it.
    var lastConnectError: RedisError?
    var breaker: CircuitBreaker
    var isShutDown = false
  }

  init(options: Options, counters: RedisCounters, onEvent: @escaping RedisEventSink) {
    self.options = options
    self.server = "\(options.host):\(options.port)"
    self.counters = counters
    self.onEvent = onEvent
    self.state = Locked(State(breaker: CircuitBreaker(policy: options.circuitBreaker)))
  }

  /// Sends the commands of `writer` as one pipeline and returns their replies (error replies
  /// included).
  ///
  /// - Parameter cancellable: See ``RedisConnection/send(encoded:replies:cancellable:)``.
  /// - Throws: ``RedisError`` (``RedisError/Code/unavailable`` while the breaker is open),
  ///   `CancellationError` (when `cancellable`).
  func send(_ writer: RESPCommandWriter, cancellable: Bool = true) async throws -> [RESPValue] {
    let (connection, isProbe) = try await acquire()
    let replies: [RESPValue]
    do {
      replies = try await connection.send(
        encoded: writer.bytes, replies: writer.commandCount, cancellable: cancellable)
    } catch {
      // A connection that fails tells the breaker once, as it closes, however many commands
      // it fails. A probe that failed without that (cancelled, or sent on a connection that had
      // just closed) hands the role to the next operation.
      if isProbe { state.withLock { $0.breaker.abandonProbe() } }
      throw error
    }
    // A server that answers but cannot serve yet is not back: it fails the probe, or opens the
    // breaker.
    if let refusal = Self.notReady(replies) {
      let error = RedisError(
        code: .serverError, message: "\(server) answers but cannot serve yet: \(refusal.prefix(200))")
      recordFailure(error, opensAtOnce: true)
      throw error
    }
    if hasFailures.load(ordering: .relaxed) { recordSuccess() }
    return replies
  }

  /// The error reply among `replies` that says the server cannot serve yet: `LOADING` (it is
  /// loading its dataset, after a restart) or `MASTERDOWN` (a replica that lost its master).
  static func notReady(_ replies: [RESPValue]) -> String? {
    for reply in replies {
      guard case .error(let text) = reply else { continue }
      if text.hasPrefix("LOADING") || text.hasPrefix("MASTERDOWN") { return text }
    }
    return nil
  }

  /// Closes every connection; operations in flight and later ones fail with
  /// ``RedisError/Code/shutDown``.
  func shutDown() {
    let error = RedisError(code: .shutDown, message: "the Redis layer for \(server) was shut down")
    let (connections, waiters) = state.withLock { state in
      state.isShutDown = true
      defer {
        state.connections = []
        state.waiters = [:]
      }
      return (state.connections, Array(state.waiters.values))
    }
    for connection in connections { connection.close(with: error) }
    for waiter in waiters { waiter.resume(throwing: error) }
    options.outage.forget(server)
  }

  /// The breaker's state, for tests and statistics.
  var breakerState: CircuitBreaker.State { state.withLock { $0.breaker.state } }

  /// Whether the breaker is closed: the server answers, as far as the pool knows.
  private var isReachable: Bool { state.withLock { $0.breaker.state == .closed } }

  /// Open connections.
  var openConnections: Int { state.withLock { $0.connections.count(where: { !$0.isClosed }) } }

  /// Commands sent and not yet answered, on every connection.
  var commandsInFlight: Int { state.withLock { $0.connections.reduce(0) { $0 + $1.commandsInFlight } } }
  /// The callers waiting for the connection being made.
  var connectionWaiters: Int { state.withLock { $0.waiters.count } }

  // MARK: - Connections

  private enum Step {
    case use(RedisConnection)
    case connect
    case wait
    case reject(RedisError)

    var isConnect: Bool {
      if case .connect = self { true } else { false }
    }
  }

  private func acquire() async throws -> (RedisConnection, isProbe: Bool) {
    let now = options.clock.now
    var isProbe = false
    var connectsInBackground = false
    let step = state.withLock { state -> Step in
      if state.isShutDown {
        return .reject(RedisError(code: .shutDown, message: "the Redis layer for \(server) was shut down"))
      }
      switch state.breaker.admit(at: now) {
      case .pass: break
      case .probe: isProbe = true
      case .reject(let retryAt): return .reject(unavailable(retryAt: retryAt, now: now))
      }
      state.connections.removeAll(where: \.isClosed)
      if let best = state.connections.min(by: { $0.commandsInFlight < $1.commandsInFlight }) {
        if best.commandsInFlight > 0 && state.connections.count < options.maximumConnections
          && !state.isConnecting
        {
          state.isConnecting = true
          connectsInBackground = true
        }
        return .use(best)
      }
      if state.isConnecting { return .wait }
      state.isConnecting = true
      return .connect
    }
    // Connections are made in tasks of their own, never in a caller's: a caller cancelled
    // during the handshake must not fail the others waiting for the connection.
    if connectsInBackground || step.isConnect {
      let inBackground = connectsInBackground
      Task { _ = try? await self.connect(inBackground: inBackground) }
    }
    do {
      switch step {
      case .use(let connection):
        return (connection, isProbe)
      case .reject(let error):
        counters.rejected.add(1, ordering: .relaxed)
        throw error
      case .connect, .wait:
        let id = state.withLock { state in
          state.nextWaiter += 1
          return state.nextWaiter
        }
        // A cancellation that came after the wait ended leaves nothing behind.
        defer { state.withLock { _ = $0.cancelledWaiters.remove(id) } }
        let connection = try await withTaskCancellationHandler {
          try await withCheckedThrowingContinuation { continuation in waitForConnection(continuation, id: id) }
        } onCancel: {
          // The connection is still made, for the others; this caller stops waiting at once.
          let waiter = state.withLock { state in
            let waiter = state.waiters.removeValue(forKey: id)
            if waiter == nil { state.cancelledWaiters.insert(id) }
            return waiter
          }
          waiter?.resume(throwing: CancellationError())
        }
        return (connection, isProbe)
      }
    } catch {
      if isProbe { state.withLock { $0.breaker.abandonProbe() } }
      throw error
    }
  }

  private func waitForConnection(_ continuation: CheckedContinuation<RedisConnection, any Error>, id: UInt64) {
    enum Outcome {
      case queued
      case cancelled
      case ready(RedisConnection)
      case failed(RedisError?)
    }
    let outcome = state.withLock { state -> Outcome in
      if state.cancelledWaiters.remove(id) != nil { return .cancelled }
      if let open = state.connections.first(where: { !$0.isClosed }) { return .ready(open) }
      guard state.isConnecting else { return .failed(state.lastConnectError) }
      state.waiters[id] = continuation
      return .queued
    }
    switch outcome {
    case .queued: break
    case .cancelled: continuation.resume(throwing: CancellationError())
    case .ready(let connection): continuation.resume(returning: connection)
    case .failed(let error):
      continuation.resume(
        throwing: error
          ?? RedisError(code: .connectionFailed, message: "the connection to \(server) closed as it opened"))
    }
  }

  /// Opens a connection, runs the handshake and adds it to the pool; the caller has set
  /// `isConnecting`. A failure opens the breaker at once, unless the pool has other
  /// connections (`inBackground`), when it counts like any other failure.
  private func connect(inBackground: Bool) async throws -> RedisConnection {
    do {
      let connection = try await RedisConnection.open(
        host: options.host, port: options.port, connectTimeout: options.connectTimeout,
        operationTimeout: options.operationTimeout, callerWaitLimit: options.callerWaitLimit,
        counters: counters,
        onClose: { [weak self, server] error in
          guard error.code != .shutDown, let self else { return }
          self.counters.connectionsDiscarded.add(1, ordering: .relaxed)
          // Recovered on its own (the next command opens another): info, or debug while the
          // breaker is open, whose opening said the server cannot be reached.
          self.onEvent(.connectionDiscarded(server: server, reason: error), self.isReachable ? .info : .debug)
          if error.countsAsFailure { self.recordFailure(error, opensAtOnce: false) }
        })
      do {
        try await Self.handshake(options.handshake, on: connection)
      } catch {
        connection.close(with: RedisError(code: .shutDown, message: "the handshake failed"))
        throw error
      }
      let (waiters, isShutDown) = state.withLock { state in
        state.isConnecting = false
        state.lastConnectError = nil
        if !state.isShutDown { state.connections.append(connection) }
        defer { state.waiters = [:] }
        return (Array(state.waiters.values), state.isShutDown)
      }
      if isShutDown {
        let error = RedisError(code: .shutDown, message: "the Redis layer for \(server) was shut down")
        connection.close(with: error)
        for waiter in waiters { waiter.resume(throwing: error) }
        throw error
      }
      counters.connectionsOpened.add(1, ordering: .relaxed)
      onEvent(.connected(server: server), isReachable ? nil : .debug)
      for waiter in waiters { waiter.resume(returning: connection) }
      return connection
    } catch {
      let waiters = state.withLock { state in
        state.isConnecting = false
        state.lastConnectError = error as? RedisError
        defer { state.waiters = [:] }
        return Array(state.waiters.values)
      }
      if let error = error as? RedisError, error.code != .shutDown {
        recordFailure(error, opensAtOnce: !inBackground)
      }
      for waiter in waiters { waiter.resume(throwing: error) }
      throw error
    }
  }

  /// Sends `commands` (`AUTH`, `SELECT`, `CLIENT SETNAME`) as one pipeline on a new
  /// connection; an error reply fails it.
  static func handshake(_ commands: [RESPCommand], on connection: RedisConnection) async throws {
    guard !commands.isEmpty else { return }
    let replies = try await connection.send(commands)
    for (command, reply) in zip(commands, replies) {
      guard case .error(let text) = reply else { continue }
      let name = String(decoding: command.arguments[0], as: UTF8.self)
      let error = RedisError.reply(text, to: name, server: connection.server)
      if error.code == .authenticationFailed { throw error }
      throw RedisError(code: .connectionFailed, message: error.message)
    }
  }

  // MARK: - The breaker

  private func recordSuccess() {
    let closed = state.withLock { state in
      defer { hasFailures.store(false, ordering: .relaxed) }
      return state.breaker.recordSuccess()
    }
    if closed { onEvent(.circuitClosed(server: server), options.outage.answered(server, usual: .notice)) }
  }

  private func recordFailure(_ error: RedisError, opensAtOnce: Bool) {
    if error.code == .timedOut { counters.timeouts.add(1, ordering: .relaxed) }
    let now = options.clock.now
    let jitter = Double.random(in: 0.5...1)
    let opening = state.withLock { state in
      hasFailures.store(true, ordering: .relaxed)
      return state.breaker.recordFailure(at: now, opensAtOnce: opensAtOnce, jitter: jitter)
    }
    guard let opening else { return }
    // Told whatever the opening, so that a failing probe holds the outage open.
    let level = options.outage.failed(server)
    if opening.isReopening {
      // The outage's warning was logged as the breaker first opened: a probe is debug.
      counters.failedProbes.add(1, ordering: .relaxed)
      onEvent(.probeFailed(server: server, until: opening.until, lastError: error), .debug)
    } else {
      counters.circuitOpenings.add(1, ordering: .relaxed)
      // One warning per outage of the layer: the first opening while every other piece answers;
      // the other servers' openings at debug.
      onEvent(.circuitOpened(server: server, until: opening.until, lastError: error), level)
    }
  }

  private func unavailable(retryAt: CacheInstant?, now: CacheInstant) -> RedisError {
    guard let retryAt else {
      return RedisError(
        code: .unavailable,
        message: "the circuit breaker for \(server) is waiting for a probe; nothing was sent")
    }
    let wait = now.duration(to: retryAt)
    return RedisError(
      code: .unavailable,
      message: "the circuit breaker for \(server) is open after repeated failures; nothing was sent, "
        + "the next attempt may go in \(wait.readable)",
      retryAfter: wait)
  }
}
