import AsyncCache
import AsyncCacheTesting
import Foundation
import Synchronization
import TestSupport
import Testing

@testable import AsyncCacheRedis

#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#endif

extension EventLog<RedisLayerEvent> {
  var circuitOpenings: Int { all.count { if case .circuitOpened = $0 { true } else { false } } }
  var circuitClosings: Int { all.count { if case .circuitClosed = $0 { true } else { false } } }
  var discarded: [RedisError] {
    all.compactMap { if case .connectionDiscarded(_, let reason) = $0 { reason } else { nil } }
  }
}

/// Waits (yielding) until `condition` holds, or until the calling task is cancelled.
func waitUntil(_ condition: () -> Bool) async {
  while !condition() && !Task.isCancelled { await Task.yield() }
}

func code(of error: any Error) -> RedisError.Code? { (error as? RedisError)?.code }

@Suite("RedisLayer faults, for real", .redisServer)
struct RedisFaultTests {
  @Test("a killed server: fail fast, fall through in a chain, the breaker opens, and a restart reconnects")
  func killedAndRestarted() async throws {
    let server = try await RedisServer.start()
    let clock = ManualClock()
    let events = EventLog<RedisLayerEvent>()
    let redis = try makeLayer(server) {
      $0.clock = clock
      $0.eventHandler = events.handler
      // Long enough that a test which waited for it would be obvious; failures must not wait.
      $0.operationTimeout = .seconds(30)
      $0.circuitBreaker = RedisCircuitBreakerPolicy(initialDelay: .seconds(1), maximumDelay: .seconds(8))
    }
    let chain = try CacheChain<String, Data>([
      .init(try MemoryLayer<String, Data>(), failurePolicy: .skip),
      .init(redis, failurePolicy: .skip),
    ])
    let cache = try LoadingCache(chain: chain, origin: ClosureFetcher { key in Data("origin \(key)".utf8) })
    try await redis.insert(Data("shared".utf8), for: "k")
    #expect(try await cache.value(for: "k") == Data("shared".utf8))

    server.stop()
    // The connection's thread sees the close; the next operations fail without waiting: the
    // broken connection, then a refused connect, which opens the breaker.
    var codes: [RedisError.Code] = []
    while codes.last != .unavailable && codes.count < 4 {
      do {
        _ = try await redis.value(for: "k")
        Issue.record("a read from a killed server succeeded")
      } catch {
        codes.append(try #require(code(of: error)))
      }
    }
    #expect(codes.last == .unavailable, "\(codes) \(events.all)")
    #expect(codes.dropLast().allSatisfy { $0 == .connectionClosed || $0 == .connectionFailed }, "\(codes)")
    #expect(events.circuitOpenings == 1)
    let opened = redis.statistics.connectionsOpened
    #expect(redis.statistics.timeouts == 0)

    // While it is open, the chain falls through to the origin without touching the network.
    #expect(try await cache.value(for: "other") == Data("origin other".utf8))
    #expect(redis.statistics.rejected >= 2)
    #expect(redis.statistics.connectionsOpened == opened)
    try #require(chain.statistics.tiers.count == 2)
    #expect(chain.statistics.tiers[1].failures >= 1)

    let restarted = try await RedisServer.start(port: server.port)
    await #expect {
      try await redis.ping()
    } throws: { error in
      let error = error as? RedisError
      return error?.code == .unavailable && error?.retryAfter.map { $0 > .zero && $0 <= .seconds(1) } == true
    }
    clock.advance(by: .seconds(1))
    // The probe connects to the restarted server and closes the breaker.
    try await redis.ping()
    #expect(events.circuitClosings == 1)
    #expect(try await redis.value(for: "k") == nil, "the restarted server is empty")
    try await redis.insert(Data("again".utf8), for: "k")
    #expect(try await redis.value(for: "k") == Data("again".utf8))
    _ = restarted
  }

  @Test("a paused server: the command times out, its connection is discarded, the next command gets its own reply")
  func pausedServer() async throws {
    let server = try await RedisServer.start()
    let events = EventLog<RedisLayerEvent>()
    let layer = try makeLayer(server) {
      $0.operationTimeout = .seconds(1)
      $0.maximumConnections = 1
      $0.eventHandler = events.handler
    }
    try await layer.insert(Data("A".utf8), for: "a")
    try await layer.insert(Data("B".utf8), for: "b")
    _ = try await server.command("CLIENT", "PAUSE", "60000", "WRITE")
    await #expect {
      try await layer.insert(Data("late".utf8), for: "a")
    } throws: { error in
      let error = error as? RedisError
      return error?.code == .timedOut && error?.message.contains("1s") == true
    }
    #expect(layer.statistics.timeouts == 1)
    #expect(layer.statistics.connectionsDiscarded == 1)
    #expect(events.discarded.map(\.code) == [.timedOut])
    _ = try await server.command("CLIENT", "UNPAUSE")
    // The late "+OK" went to the discarded connection; this read gets its own reply.
    #expect(try await layer.value(for: "b") == Data("B".utf8))
    #expect(layer.statistics.connectionsOpened == 2)
  }

  @Test("repeated timeouts open the breaker; a probe after the delay closes it")
  func timeoutsOpenTheBreaker() async throws {
    let server = try await RedisServer.start()
    let clock = ManualClock()
    let events = EventLog<RedisLayerEvent>()
    let layer = try makeLayer(server) {
      $0.clock = clock
      $0.operationTimeout = .seconds(1)
      $0.circuitBreaker = RedisCircuitBreakerPolicy(failureThreshold: 2, initialDelay: .seconds(2))
      $0.eventHandler = events.handler
    }
    try await layer.ping()
    _ = try await server.command("CLIENT", "PAUSE", "60000", "WRITE")
    for _ in 0..<2 {
      await #expect { try await layer.insert(Data("x".utf8), for: "k") } throws: { code(of: $0) == .timedOut }
    }
    #expect(events.circuitOpenings == 1)
    await #expect { try await layer.value(for: "k") } throws: { code(of: $0) == .unavailable }
    #expect(layer.statistics.rejected == 1)
    _ = try await server.command("CLIENT", "UNPAUSE")
    clock.advance(by: .seconds(2))
    #expect(try await layer.value(for: "nothing") == nil)
    #expect(events.circuitClosings == 1)
    #expect(layer.statistics.circuitOpenings == 1)
  }

  @Test("commands pipelined behind one that times out fail with it, and the breaker counts one failure")
  func oneTimeoutIsOneFailure() async throws {
    let server = try await RedisServer.start()
    let layer = try makeLayer(server) {
      $0.operationTimeout = .seconds(1)
      $0.maximumConnections = 1
      $0.circuitBreaker = RedisCircuitBreakerPolicy(failureThreshold: 2)
    }
    try await layer.ping()
    _ = try await server.command("CLIENT", "PAUSE", "60000", "WRITE")
    try await withThrowingTaskGroup(of: RedisError.Code?.self) { group in
      for index in 0..<3 {
        group.addTask {
          do {
            try await layer.insert(Data("x".utf8), for: "\(index)")
            return nil
          } catch {
            return code(of: error)
          }
        }
      }
      for try await failure in group { #expect(failure == .timedOut) }
    }
    #expect(layer.statistics.timeouts == 1)
    #expect(layer.statistics.connectionsDiscarded == 1)
    #expect(layer.statistics.circuitOpenings == 0)
    _ = try await server.command("CLIENT", "UNPAUSE")
    try await layer.ping()
  }

  @Test("a cancelled caller returns at once; its late reply is dropped and the connection goes on")
  func cancellation() async throws {
    let server = try await RedisServer.start()
    let layer = try makeLayer(server) {
      $0.operationTimeout = .seconds(30)
      $0.maximumConnections = 1
    }
    try await layer.insert(Data("B".utf8), for: "b")
    _ = try await server.command("CLIENT", "PAUSE", "60000", "WRITE")
    let blocked = Task { try await layer.insert(Data("late".utf8), for: "a") }
    await waitUntil { layer.commandsInFlight == 1 }
    blocked.cancel()
    await #expect(throws: CancellationError.self) { try await blocked.value }
    // Queued behind the cancelled command on the same connection.
    let read = Task { try await layer.value(for: "b") }
    await waitUntil { layer.commandsInFlight == 2 }
    _ = try await server.command("CLIENT", "UNPAUSE")
    #expect(try await read.value == Data("B".utf8))
    #expect(layer.statistics.connectionsDiscarded == 0)
    #expect(layer.statistics.connectionsOpened == 1)
    #expect(bytes(try await server.command("GET", "test:a"))?.suffix(4) == Array("late".utf8))
  }

  @Test("a full server (maxmemory, noeviction) refuses writes with outOfMemory; reads go on")
  func outOfMemory() async throws {
    let server = try await RedisServer.start(["--maxmemory", "4mb", "--maxmemory-policy", "noeviction"])
    let layer = try makeLayer(server)
    let value = Data(repeating: 7, count: 256 << 10)
    var refusal: RedisError?
    for index in 0..<64 {
      do {
        try await layer.insert(value, for: "\(index)")
      } catch {
        refusal = error as? RedisError
        break
      }
    }
    let error = try #require(refusal)
    #expect(error.code == .outOfMemory)
    #expect(error.message.contains("OOM") && error.message.contains("SET"))
    #expect(try await layer.value(for: "0") == value)
    // An error reply is an answer: the connection and the breaker are fine.
    #expect(layer.statistics.connectionsDiscarded == 0)
    #expect(layer.statistics.circuitOpenings == 0)
  }

  @Test("bytes that are not the protocol fail with protocolError and discard the connection")
  func protocolError() async throws {
    let peer = try ScriptedPeer(.reply(Array("hello there\r\n".utf8)))
    let events = EventLog<RedisLayerEvent>()
    let layer = try RedisLayer<String, Data>(
      configuration: .init(endpoint: RedisEndpoint(host: "127.0.0.1", port: peer.port), eventHandler: events.handler))
    let sequence = layer.events()
    await #expect {
      try await layer.ping()
    } throws: { error in
      let error = error as? RedisError
      return error?.code == .protocolError && (error?.underlying as? RESPProtocolError) != nil
    }
    #expect(layer.statistics.connectionsDiscarded == 1)
    #expect(events.discarded.map(\.code) == [.protocolError])
    try await layer.close()
    var delivered: [RedisLayerEvent] = []
    for await event in sequence { delivered.append(event) }  // ends: the layer is shut down
    #expect(delivered.map(\.description) == events.all.map(\.description), "the sequence gets what the handler gets")
  }

  @Test("writing to a connection the peer reset fails with connectionClosed, never SIGPIPE")
  func noSigpipe() async throws {
    let peer = try ScriptedPeer(.resetMidRequest)
    let layer = try RedisLayer<String, Data>(
      configuration: .init(endpoint: RedisEndpoint(host: "127.0.0.1", port: peer.port)))
    // More than the socket buffers hold: the sends go on after the reset arrived.
    await #expect {
      try await layer.insert(Data(repeating: 1, count: 8 << 20), for: "k")
    } throws: { error in
      code(of: error) == .connectionClosed
    }
    #expect(layer.statistics.connectionsDiscarded == 1)
  }
}

@Suite("Socket")
struct SocketTests {
  @Test("a send to a peer that is gone returns EPIPE instead of raising SIGPIPE")
  func sendToClosedPeer() throws {
    var ends: [Int32] = [0, 0]
    #if canImport(Darwin)
      let type = SOCK_STREAM
    #else
      let type = Int32(SOCK_STREAM.rawValue)
    #endif
    try #require(socketpair(AF_UNIX, type, 0, &ends) == 0)
    defer { close(ends[0]) }
    #if canImport(Darwin)
      // Darwin's sockets take the option on the socket, as `Socket.connect` sets it.
      var one: Int32 = 1
      _ = setsockopt(ends[0], SOL_SOCKET, SO_NOSIGPIPE, &one, socklen_t(MemoryLayout<Int32>.size))
    #endif
    close(ends[1])
    let bytes: [UInt8] = Array("*1\r\n$4\r\nPING\r\n".utf8)
    for _ in 0..<2 {
      let result = bytes.withUnsafeBytes { Socket.send(ends[0], $0) }
      guard case .failed(let code) = result else {
        Issue.record("expected a failure, got \(result)")
        return
      }
      #expect(code == EPIPE)
    }
  }
}
