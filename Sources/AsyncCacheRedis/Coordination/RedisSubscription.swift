import AsyncCache

/// The subscription to a namespace's channels (invalidations, load announcements): a connection
/// of its own in subscriber mode, kept open (and opened again after a failure) until ``stop()``.
final class RedisSubscription: Sendable {
  struct Options: Sendable {
    var channels: [[UInt8]]
    /// The key prefix to track (`CLIENT TRACKING … BCAST PREFIX`), reported on
    /// `__redis__:invalidate` (which must be among the channels); `nil` for none.
    var trackingPrefixes: [[UInt8]] = []
    var connectTimeout: Duration
    var operationTimeout: Duration
    var handshake: [RESPCommand]
    var healthCheckInterval: Duration
    /// The layer's record of which of its pieces cannot reach Redis.
    var outage = RedisOutage()
    var backoff: RedisCircuitBreakerPolicy
    var clock: any CacheClock
    /// Whether a load waits on the server now (see ``RedisSubscription/checkHealthSoon()``): the
    /// server is then probed every quarter of the operation timeout.
    var isUrgent: @Sendable () -> Bool = { false }
    /// Asks the server something through the layer's own connections; `true` when it answered
    /// within the operation timeout. `nil`: no probing.
    var probe: (@Sendable () async -> Bool)? = nil
  }

  private let options: Options
  /// Where to subscribe: the server, or a master of the cluster.
  private let endpoint: @Sendable () async throws -> RedisEndpoint
  /// Applies a message (its channel, its payload); called in order.
  private let deliver: @Sendable ([UInt8], RESPValue) async -> Void
  /// Takes a message at once, on the connection's thread, when it returns `true` (it must be
  /// short); `deliver` gets the others.
  private let receiveNow: @Sendable ([UInt8], [UInt8]) -> Bool
  /// Called after subscribing again: messages may have been lost.
  private let resynchronize: @Sendable () async -> Void
  /// Called when the subscription closes or cannot open: messages may be lost from now on.
  private let interrupted: @Sendable () -> Void
  /// Called when the server did not answer the health check or a probe within the operation
  /// timeout (before the subscription closes, for the health check).
  private let unresponsive: @Sendable () -> Void
  /// Called when a probe was answered in time.
  private let responsive: @Sendable () -> Void
  private let counters: RedisCounters
  private let onEvent: RedisEventSink
  private let state = Locked(State())

  private struct State {
    var task: Task<Void, Never>?
    var connection: RedisConnection?
    var isSubscribed = false
    /// Subscribed, and what may have been missed before has been made up for (the targets
    /// emptied): every change from now on reaches them.
    var isInSync = false
    var isStopped = false
    /// The last attempt to subscribe failed, or the subscription broke and is not back yet:
    /// ``waitUntilSubscribed(for:)`` does not wait then.
    var isFailing = false
    /// Tasks waiting for the subscription to open (``waitUntilSubscribed(for:)``).
    var openWaiters: [UInt64: CheckedContinuation<Void, Never>] = [:]
    /// Waits whose time ran out (or were cancelled) before they were registered.
    var releasedWaiters: Set<UInt64> = []
    /// Waits begun and not ended: a timer that fires once its wait has ended marks nothing.
    var activeWaiters: Set<UInt64> = []
    var nextWaiter: UInt64 = 0
    /// The health check's sleep, until ``RedisSubscription/checkHealthSoon()`` ends it.
    var healthCheckSleep: UnsafeContinuation<Void, Never>?
    /// ``RedisSubscription/checkHealthSoon()`` was called while the health check was not asleep.
    var healthCheckAsked = false
  }

  init(
    options: Options, counters: RedisCounters, endpoint: @escaping @Sendable () async throws -> RedisEndpoint,
    receiveNow: @escaping @Sendable ([UInt8], [UInt8]) -> Bool = { _, _ in false },
    deliver: @escaping @Sendable ([UInt8], RESPValue) async -> Void,
    resynchronize: @escaping @Sendable () async -> Void, interrupted: @escaping @Sendable () -> Void,
    unresponsive: @escaping @Sendable () -> Void = {}, responsive: @escaping @Sendable () -> Void = {},
    onEvent: @escaping RedisEventSink
  ) {
    self.options = options
    self.counters = counters
    self.endpoint = endpoint
    self.deliver = deliver
    self.receiveNow = receiveNow
    self.resynchronize = resynchronize
    self.interrupted = interrupted
    self.unresponsive = unresponsive
    self.responsive = responsive
    self.onEvent = onEvent
  }

  /// Has the health check look at the server now if it is due by the urgent interval, and
  /// every quarter of the operation timeout while ``Options/isUrgent`` holds: a load that waits
  /// on the server calls it, so that it finds out within about one operation timeout that the
  /// server stopped answering (frozen, or cut off without a reset).
  func checkHealthSoon() {
    let sleep = state.withLock { state -> UnsafeContinuation<Void, Never>? in
      guard let sleep = state.healthCheckSleep else {
        state.healthCheckAsked = true
        return nil
      }
      state.healthCheckSleep = nil
      return sleep
    }
    sleep?.resume()
  }

  /// Returns when ``checkHealthSoon()`` is called (at once if it was since the last return), or
  /// when the task is cancelled.
  private func healthCheckRequested() async {
    await waitForWatcher { sleep in
      state.withLock { state in
        if state.healthCheckAsked {
          state.healthCheckAsked = false
          return false
        }
        state.healthCheckSleep = sleep
        return true
      }
    } unregister: {
      self.state.withLock { state in
        defer { state.healthCheckSleep = nil }
        return state.healthCheckSleep
      }
    }
  }

  /// Starts subscribing, once.
  func start() {
    state.withLock { state in
      guard state.task == nil, !state.isStopped else { return }
      state.task = Task { await self.run() }
    }
  }

  /// Stops for good and closes the connection.
  func stop() {
    let (task, connection, waiters) = state.withLock { state in
      state.isStopped = true
      state.isInSync = false
      defer { state.openWaiters = [:] }
      return (state.task, state.connection, state.openWaiters.values)
    }
    task?.cancel()
    connection?.close(with: RedisError(code: .shutDown, message: "the subscription was stopped"))
    for waiter in waiters { waiter.resume() }
    interrupted()
  }

  /// Whether the subscription is open now.
  var isSubscribed: Bool { state.withLock { $0.isSubscribed } }

  /// Whether the subscription is open and done making up for what it may have missed before
  /// (its `resynchronize` has returned): `false` from the moment its connection closes until
  /// then.
  var isInSync: Bool { state.withLock { $0.isInSync } }

  /// Whether the subscription's connection is open, as far as this process knows.
  var isConnectionOpen: Bool { state.withLock { $0.connection.map { !$0.isClosed } ?? false } }

  /// The waits for the subscription still recorded (begun, waiting, or ended early): 0 once
  /// every ``waitUntilSubscribed(for:)`` has returned.
  var recordedWaits: Int {
    state.withLock { $0.activeWaiters.count + $0.releasedWaiters.count + $0.openWaiters.count }
  }

  /// How a wait for the subscription ended.
  enum WaitOutcome: Sendable, Equatable {
    /// The subscription is open.
    case subscribed
    /// It is failing (its server is down) or stopped, or the waiting task was cancelled.
    case unavailable
    /// It did not open within the time given.
    case timedOut
  }

  /// Starts subscribing (once) and waits until the subscription is open, the subscription is
  /// stopped, `limit` has passed (on the timers' clock) or the task is cancelled. Returns at once while
  /// the subscription is failing (its server is down): the caller goes on without it.
  @discardableResult
  func waitUntilSubscribed(for limit: Duration) async -> WaitOutcome {
    start()
    let clock = options.clock
    let deadline = clock.now.advanced(by: limit)
    let id = state.withLock { state -> UInt64 in
      state.nextWaiter += 1
      state.activeWaiters.insert(state.nextWaiter)
      return state.nextWaiter
    }
    let timer = Task {
      do { try await clock.sleep(until: deadline, tolerance: nil) } catch { return }
      self.releaseOpenWaiter(id)
    }
    defer {
      timer.cancel()
      state.withLock { state in
        state.releasedWaiters.remove(id)
        state.activeWaiters.remove(id)
      }
    }
    await withTaskCancellationHandler {
      await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
        let waits = state.withLock { state -> Bool in
          guard !state.isSubscribed, !state.isStopped, !state.isFailing, !Task.isCancelled,
            !state.releasedWaiters.contains(id)
          else {
            return false
          }
          state.openWaiters[id] = continuation
          return true
        }
        if !waits { continuation.resume() }
      }
    } onCancel: {
      releaseOpenWaiter(id)
    }
    let (subscribed, failing) = state.withLock { ($0.isSubscribed, $0.isFailing || $0.isStopped) }
    if subscribed { return .subscribed }
    if failing || Task.isCancelled { return .unavailable }
    return clock.now >= deadline ? .timedOut : .unavailable
  }

  /// Marks the subscription as failing and ends the waits for it.
  private func failing() {
    let waiters = state.withLock { state in
      state.isFailing = true
      defer { state.openWaiters = [:] }
      return state.openWaiters.values
    }
    for waiter in waiters { waiter.resume() }
  }

  /// Ends wait `id`, or marks it ended if it has not begun yet.
  private func releaseOpenWaiter(_ id: UInt64) {
    state.withLock { state -> CheckedContinuation<Void, Never>? in
      guard let continuation = state.openWaiters.removeValue(forKey: id) else {
        if state.activeWaiters.contains(id) { state.releasedWaiters.insert(id) }
        return nil
      }
      return continuation
    }?.resume()
  }

  /// How long a subscription must have lived for its end not to count as a failure in a row
  /// (at least; the health check's interval if longer): a subscription closed soon after it
  /// opens, again and again (a proxy's idle timeout, a server that kills subscribers whose
  /// output buffer grows), backs off up to the breaker's maximum delay instead of emptying the
  /// layers in a tight loop.
  static var stableLifetime: Duration { .seconds(10) }

  private func run() async {
    let channel = options.channels.map { String(decoding: $0, as: UTF8.self) }.joined(separator: ", ")
    // Failures in a row; a subscription that closes before it has lived `stableLifetime`
    // counts as one.
    var failures = 0
    // Whether messages may have been missed since forwarding began.
    var missedMessages = false
    // Whether an interruption was reported and no subscription has lived `stableLifetime`
    // since: the attempts that fail after it, and a subscription that breaks again soon after
    // it is back (flapping), are logged at debug. The first is a warning unless the layer's
    // outage was reported already (see RedisOutage).
    var interruptionReported = false
    // Whether the subscription is down, and whether it went down while an interruption was
    // still reported (a flap): its end is then debug too.
    var isDown = false
    var flapping = false
    func reportInterruption(_ reason: String) {
      let first = !isDown
      if first {
        isDown = true
        flapping = interruptionReported
      }
      var level = CacheLogLevel.debug
      // Told every time (but in a flap, which is not an outage of its own), so that the outage
      // stays open while the subscription keeps failing; a warning the first time, if no other
      // piece of the layer reported the outage already.
      if !flapping {
        let told = options.outage.failed("subscription")
        if first { level = told }
      }
      onEvent(.invalidationsInterrupted(channel: channel, reason: reason), level)
      interruptionReported = true
    }
    while !Task.isCancelled {
      if failures > 0 {
        do { try await options.clock.sleep(for: backoff(after: failures)) } catch { return }
      }
      let connection: RedisConnection
      let messages: AsyncStream<Message>
      let closeReason: Locked<RedisError?>
      do {
        (connection, messages, closeReason) = try await subscribe()
      } catch {
        if Task.isCancelled { return }
        failures += 1
        missedMessages = true
        failing()
        interrupted()
        reportInterruption("cannot subscribe: \(error)")
        continue
      }
      let subscribedAt = options.clock.now
      if missedMessages { await resynchronize() }
      // Before the event, so that whoever hears of the subscription's return finds it in sync;
      // unless the connection closed meanwhile (its close cleared the flag already, or finds it
      // set and clears it): messages may be lost again, and the next one makes up for them.
      state.withLock { state in
        if !state.isStopped && !connection.isClosed { state.isInSync = true }
      }
      if missedMessages {
        // A notice when it ends the layer's outage; debug after a flap.
        let level = options.outage.answered("subscription", usual: .debug)
        onEvent(.invalidationsResubscribed(channel: channel), flapping ? .debug : level)
      }
      isDown = false
      flapping = false
      await serve(connection, messages)
      state.withLock {
        $0.isSubscribed = false
        $0.isInSync = false
        $0.connection = nil
      }
      failing()
      interrupted()
      if Task.isCancelled { return }
      missedMessages = true
      let lived = subscribedAt.duration(to: options.clock.now)
      if lived >= Swift.max(Self.stableLifetime, options.healthCheckInterval) {
        failures = 0
        interruptionReported = false
      } else {
        failures += 1
      }
      let reason = closeReason.withLock { $0 }.map { "\($0)" } ?? "the subscriber connection closed"
      reportInterruption(reason)
    }
  }

  /// A message as received: its channel and its payload.
  typealias Message = (channel: [UInt8], payload: RESPValue)

  /// Opens a subscriber connection and subscribes to the channels.
  private func subscribe() async throws -> (
    RedisConnection, AsyncStream<Message>, closeReason: Locked<RedisError?>
  ) {
    let endpoint = try await endpoint()
    let (messages, continuation) = AsyncStream<Message>.makeStream()
    let closeReason = Locked<RedisError?>(nil)
    let channels = options.channels
    let receiveNow = receiveNow
    let state = state
    let connection = try await RedisConnection.open(
      host: endpoint.host, port: endpoint.port, connectTimeout: options.connectTimeout,
      operationTimeout: options.operationTimeout, isSubscriber: true,
      onPush: { push in
        // ["message", channel, payload]
        guard case .array(let parts?) = push, parts.count == 3, parts[0] == .bulkString(Array("message".utf8)),
          case .bulkString(let from?) = parts[1], channels.contains(from)
        else { return }
        if case .bulkString(let bytes?) = parts[2], receiveNow(from, bytes) { return }
        continuation.yield((from, parts[2]))
      },
      onClose: { error in
        closeReason.withLock { $0 = error }
        // From now on messages may be lost (unless this is a connection of the past, closed
        // late, and a newer one is open).
        state.withLock { state in
          if state.connection.map(\.isClosed) ?? true { state.isInSync = false }
        }
        continuation.finish()
      })
    let registered = state.withLock { state in
      guard !state.isStopped else { return false }
      state.connection = connection
      return true
    }
    guard registered else {
      connection.close(with: RedisError(code: .shutDown, message: "the subscription was stopped"))
      throw CancellationError()
    }
    do {
      try await RedisConnectionPool.handshake(options.handshake, on: connection)
      if !options.trackingPrefixes.isEmpty {
        // The server reports the prefix's changes to this very connection, which subscribes to
        // the channel they come on (RESP2 needs the redirection).
        guard case .integer(let id) = try await connection.send(RESPCommand("CLIENT", "ID")) else {
          throw RedisError(code: .protocolError, message: "\(connection.server) answered CLIENT ID with no integer")
        }
        let reply = try await connection.send(
          RESPCommand(
            [
              Array("CLIENT".utf8), Array("TRACKING".utf8), Array("ON".utf8), Array("REDIRECT".utf8),
              Array(String(id).utf8), Array("BCAST".utf8),
            ] + options.trackingPrefixes.flatMap { [Array("PREFIX".utf8), $0] }))
        if case .error(let text) = reply {
          throw RedisError.reply(text, to: "CLIENT TRACKING", server: connection.server)
        }
      }
      // One confirmation per channel.
      let replies = try await connection.send(
        encoded: RESPCommandWriter([RESPCommand([Array("SUBSCRIBE".utf8)] + channels)]).bytes, replies: channels.count)
      for reply in replies {
        guard case .array(let parts?) = reply, parts.first == .bulkString(Array("subscribe".utf8)) else {
          throw RedisError(
            code: .protocolError,
            message: "\(connection.server) answered SUBSCRIBE with \(String(describing: reply).prefix(200))")
        }
      }
    } catch {
      connection.close(with: RedisError(code: .shutDown, message: "the subscription failed: \(error)"))
      throw error
    }
    let waiters = state.withLock { state in
      state.isSubscribed = true
      state.isFailing = false
      defer { state.openWaiters = [:] }
      return state.openWaiters.values
    }
    for waiter in waiters { waiter.resume() }
    return (connection, messages, closeReason)
  }

  /// Applies messages until the connection closes, checking it with `PING` every health-check
  /// interval; while a load waits on the server, probes the server every quarter of the
  /// operation timeout besides.
  ///
  /// The probes go through the layer's connections, not the subscription's: one answered late
  /// (a server busy for a moment) reports the server unresponsive, and the next one answered
  /// reports it back, while the subscription stays open and loses no message. Only the
  /// subscription's own health check closes it.
  private func serve(_ connection: RedisConnection, _ messages: AsyncStream<Message>) async {
    let interval = options.healthCheckInterval
    let urgentInterval = min(interval, options.operationTimeout / 4)
    let clock = options.clock
    let isUrgent = options.isUrgent
    let probe = options.probe
    let deliver = deliver
    await withTaskGroup(of: Void.self) { group in
      group.addTask {
        for await message in messages { await deliver(message.channel, message.payload) }
      }
      group.addTask {
        var lastCheck = clock.now
        var lastProbe = clock.now
        while !Task.isCancelled {
          let probing = probe != nil && isUrgent()
          let checkDue = lastCheck.advanced(by: interval)
          let probeDue = lastProbe.advanced(by: urgentInterval)
          let due = probing ? min(checkDue, probeDue) : checkDue
          if clock.now < due {
            // Until the check is due, or a load begins to wait on the server (it may be due
            // sooner then).
            await withTaskGroup(of: Void.self) { sleep in
              sleep.addTask { try? await clock.sleep(until: due, tolerance: nil) }
              sleep.addTask { await self.healthCheckRequested() }
              await sleep.next()
              sleep.cancelAll()
            }
            continue
          }
          if probing, let probe, clock.now >= probeDue {
            lastProbe = clock.now
            if await probe() { self.responsive() } else { self.unresponsive() }
            continue
          }
          lastCheck = clock.now
          do {
            _ = try await connection.send(RESPCommand("PING"))
          } catch let error as RedisError where error.code == .timedOut {
            // The server stopped answering: the loads waiting on it must not wait any more.
            self.unresponsive()
            return
          } catch {
            // A failed reply closes the connection, which ends the messages.
            return
          }
        }
      }
      await group.next()
      group.cancelAll()
    }
    connection.close(
      with: RedisError(code: .connectionClosed, message: "the subscription to \(connection.server) ended"))
  }

  /// The delay before attempt `failures + 1`: the breaker's initial delay, doubled per failure
  /// up to its maximum, with jitter.
  private func backoff(after failures: Int) -> Duration {
    let initial = options.backoff.initialDelay
    let maximum = options.backoff.maximumDelay
    var delay = initial
    for _ in 1..<min(failures, 32) where delay < maximum { delay *= 2 }
    return min(delay, maximum) * Double.random(in: 0.5...1)
  }
}
