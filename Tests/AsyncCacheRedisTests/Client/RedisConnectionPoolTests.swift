import AsyncCache
import TestSupport
import Testing

@testable import AsyncCacheRedis

/// A pool for `server` whose time limits no test reaches: commands here block on purpose
/// (`BLPOP … 0`) until the test pushes what they wait for.
private func makePool(
  _ server: RedisServer, maximumConnections: Int, handshake: [RESPCommand] = [], events: EventLog<RedisLayerEvent>
) -> RedisConnectionPool {
  RedisConnectionPool(
    options: .init(
      host: "127.0.0.1", port: server.port, connectTimeout: .seconds(600), operationTimeout: .seconds(600),
      maximumConnections: maximumConnections, handshake: handshake, circuitBreaker: RedisCircuitBreakerPolicy(),
      clock: WallClock()),
    counters: RedisCounters(), onEvent: { event, _ in events.append(event) })
}

extension RedisConnectionPool {
  /// Sends one command and returns its reply.
  fileprivate func send(_ words: String...) async throws -> RESPValue {
    let replies = try await send(RESPCommandWriter([RESPCommand(words.map { Array($0.utf8) })]))
    try #require(replies.count == 1)
    return replies[0]
  }
}

private func isConnected(_ event: RedisLayerEvent) -> Bool {
  if case .connected = event { true } else { false }
}

private func isDiscarded(_ event: RedisLayerEvent) -> Bool {
  if case .connectionDiscarded = event { true } else { false }
}

/// The reply of a `BLPOP` that got `value` from `list`.
private func popped(_ list: String, _ value: String) -> RESPValue {
  .array([.bulkString(Array(list.utf8)), .bulkString(Array(value.utf8))])
}

@Suite("RedisConnectionPool against a real redis-server", .redisServer, .timeLimit(.minutes(3)))
struct RedisConnectionPoolTests {
  @Test("commands share one idle connection: no other opens")
  func sharesOneConnection() async throws {
    let server = try await RedisServer.start()
    let events = EventLog<RedisLayerEvent>()
    let pool = makePool(server, maximumConnections: 4, events: events)
    defer {
      pool.shutDown()
      server.stop()
    }
    for _ in 0..<5 { #expect(try await pool.send("PING") == .simpleString("PONG")) }
    #expect(pool.openConnections == 1)
    #expect(pool.counters.connectionsOpened.load(ordering: .relaxed) == 1)
    #expect(events.all.count(where: isConnected) == 1)
  }

  @Test("while every connection is busy one more opens, up to the maximum and never past it")
  func growsToTheMaximum() async throws {
    let server = try await RedisServer.start()
    let events = EventLog<RedisLayerEvent>()
    let pool = makePool(server, maximumConnections: 2, events: events)
    defer {
      pool.shutDown()
      server.stop()
    }
    let lists = ["q1", "q2", "q3", "q4"]
    var blocked: [Task<RESPValue, any Error>] = []
    for (index, list) in lists.enumerated() {
      blocked.append(Task { try await pool.send("BLPOP", list, "0") })
      await waitUntil { pool.commandsInFlight == index + 1 }
      // The second command found the first connection busy: it queued behind it and had a
      // second one opened.
      if index == 1 { await events.waitFor(2, where: isConnected) }
    }
    #expect(pool.openConnections == 2, "four commands in flight, two connections at most")
    for list in lists { _ = try await server.command("LPUSH", list, "v \(list)") }
    for (task, list) in zip(blocked, lists) { #expect(try await task.value == popped(list, "v \(list)")) }
    #expect(try await pool.send("PING") == .simpleString("PONG"))
    #expect(pool.counters.connectionsOpened.load(ordering: .relaxed) == 2)
    #expect(events.all.count(where: isConnected) == 2)
  }

  @Test("callers that come while the only connection is being made wait for it, and all are answered on it")
  func waitersGetTheConnection() async throws {
    let server = try await RedisServer.start()
    let events = EventLog<RedisLayerEvent>()
    // The handshake waits for the test: the connection is being made until the gate opens.
    let gate = RESPCommand("BLPOP", "gate", "0")
    let pool = makePool(server, maximumConnections: 1, handshake: [gate], events: events)
    defer {
      pool.shutDown()
      server.stop()
    }
    let callers = (0..<5).map { _ in Task { try await pool.send("PING") } }
    #expect(pool.openConnections == 0, "the handshake has not finished")
    _ = try await server.command("LPUSH", "gate", "open")
    for caller in callers { #expect(try await caller.value == .simpleString("PONG")) }
    #expect(pool.counters.connectionsOpened.load(ordering: .relaxed) == 1)
  }

  @Test("a connection the server closes is discarded, and the next command opens another")
  func brokenConnectionReplaced() async throws {
    let server = try await RedisServer.start()
    let events = EventLog<RedisLayerEvent>()
    let pool = makePool(server, maximumConnections: 1, events: events)
    defer {
      pool.shutDown()
      server.stop()
    }
    guard case .integer(let first) = try await pool.send("CLIENT", "ID") else {
      Issue.record("CLIENT ID did not answer an integer")
      return
    }
    #expect(try await server.command("CLIENT", "KILL", "ID", "\(first)") == .integer(1))
    await events.waitFor(1, where: isDiscarded)
    #expect(pool.openConnections == 0)
    guard case .integer(let second) = try await pool.send("CLIENT", "ID") else {
      Issue.record("CLIENT ID did not answer an integer")
      return
    }
    #expect(second != first, "a new connection")
    #expect(events.all.count(where: isConnected) == 2)
    #expect(pool.breakerState == .closed, "one lost connection does not open the breaker")
  }

  @Test("shutDown fails commands in flight and later ones with a typed shutDown error")
  func shutDownFailsInFlightAndLater() async throws {
    let server = try await RedisServer.start()
    let events = EventLog<RedisLayerEvent>()
    let pool = makePool(server, maximumConnections: 1, events: events)
    defer { server.stop() }
    let blocked = Task { try await pool.send("BLPOP", "never", "0") }
    await waitUntil { pool.commandsInFlight == 1 }
    pool.shutDown()
    let inFlight = await #expect(throws: RedisError.self) { try await blocked.value }
    #expect(inFlight?.code == .shutDown)
    let later = await #expect(throws: RedisError.self) { try await pool.send("PING") }
    #expect(later?.code == .shutDown)
    #expect(pool.openConnections == 0)
    #expect(events.all.count(where: isDiscarded) == 0, "a shut-down connection is not reported as discarded")
  }

  @Test("shutDown fails the callers waiting for a connection being made with a typed shutDown error")
  func shutDownFailsWaiters() async throws {
    let server = try await RedisServer.start()
    let events = EventLog<RedisLayerEvent>()
    let pool = makePool(server, maximumConnections: 1, handshake: [RESPCommand("BLPOP", "gate", "0")], events: events)
    defer { server.stop() }
    // Each caller waits for the connection, or, arriving after shutDown, is refused at once:
    // either way with the same typed error.
    let callers = (0..<3).map { _ in Task { try await pool.send("PING") } }
    pool.shutDown()
    for caller in callers {
      let error = await #expect(throws: RedisError.self) { try await caller.value }
      #expect(error?.code == .shutDown)
    }
    // Lets the connection being made finish its handshake: it finds the pool shut down and closes.
    _ = try await server.command("LPUSH", "gate", "open")
  }

  @Test("a caller cancelled while it waits for the connection ends with CancellationError; the others are answered")
  func cancelledWaiter() async throws {
    let server = try await RedisServer.start()
    let events = EventLog<RedisLayerEvent>()
    let pool = makePool(server, maximumConnections: 1, handshake: [RESPCommand("BLPOP", "gate", "0")], events: events)
    defer {
      pool.shutDown()
      server.stop()
    }
    let cancelled = Task { try await pool.send("PING") }
    let other = Task { try await pool.send("PING") }
    // Both wait for the one connection, whose handshake waits at the gate.
    await waitUntil { pool.connectionWaiters == 2 }
    cancelled.cancel()
    // The cancelled caller ends at once, while the connection is still being made.
    await #expect(throws: CancellationError.self) { try await cancelled.value }
    #expect(pool.connectionWaiters == 1)
    _ = try await server.command("LPUSH", "gate", "open")
    #expect(try await other.value == .simpleString("PONG"))
    #expect(try await pool.send("PING") == .simpleString("PONG"), "the connection was not given up")
    #expect(pool.counters.connectionsOpened.load(ordering: .relaxed) == 1)
  }
}
