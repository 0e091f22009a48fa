import AsyncCache
import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import TestSupport
import Testing

@testable import AsyncCacheRedis

@Suite("A Redis outage, as an operator reads it", .redisServer, .timeLimit(.minutes(3)))
struct RedisOutageTests {
  @Test("an outage logs one warning and, once the server is back, one notice; the probes are debug")
  func oneWarningOneNotice() async throws {
    let server = try await RedisServer.start()
    let logs = RecordingLogHandler()
    // The breaker's delays and the subscription's backoff run on this clock: the test moves it
    // to the next probe instead of waiting for it.
    let clock = ManualClock()
    let layer = try makeLayer(server, namespace: "outage") {
      $0.logger = logs.logger(minimumLevel: .debug)
      $0.invalidation = RedisInvalidation()
      $0.clock = clock
    }
    try layer.forwardInvalidations(to: [try MemoryLayer<String, Data>()])
    try await layer.insert(Data("shared".utf8), for: "k")
    // Several connections, each of which the outage will close.
    while layer.statistics.connectionsOpened < 2, !Task.isCancelled {
      try await withThrowingTaskGroup(of: Void.self) { group in
        for _ in 0..<64 { group.addTask { _ = try await layer.value(for: "k") } }
        try await group.waitForAll()
      }
    }
    await eventually { layer.isReceivingInvalidations }
    logs.removeAll()

    /// A request, as a service sends them: `true` when Redis answered it (a miss included).
    /// Refused while the breaker is open, it moves the clock to when the next one may probe.
    func request() async -> Bool {
      do {
        _ = try await layer.value(for: "k")
        return true
      } catch {
        if let wait = (error as? RedisError)?.retryAfter { clock.advance(by: wait) }
        return false
      }
    }
    server.stop()
    // Requests keep failing (fast, once the breaker is open); several probes fail.
    while layer.statistics.circuitOpenings + layer.statistics.failedProbes < 4, !Task.isCancelled {
      _ = await request()
    }
    let restarted = try await RedisServer.start(port: server.port)
    defer { restarted.stop() }
    // Until a request is answered: the next probe finds the server back (empty: a miss).
    while await !request(), !Task.isCancelled {}
    // The subscription waits out its backoff on the clock, then subscribes again.
    while !layer.isReceivingInvalidations, !Task.isCancelled {
      await waitUntil { layer.isReceivingInvalidations || clock.sleeperCount > 0 }
      if !layer.isReceivingInvalidations { clock.advance(by: .seconds(1)) }
    }
    // The last piece to answer again logs the notice: the subscription says it is back once it
    // has read what it may have missed.
    await eventually { logs.records.contains { $0.level == .notice } }

    let records = logs.records.filter { $0.source == "RedisLayer" }
    let loud = records.filter { $0.level >= .warning }
    // One for the outage, whichever piece saw it first (the server's pool or the subscription):
    // however many connections, probes and attempts to subscribe again failed.
    #expect(loud.count == 1, "\(loud.map(\.message))")
    #expect(loud.allSatisfy { $0.level == .warning }, "nothing louder than a warning: no data was lost")
    // And one when the last of them answers again.
    let notices = records.filter { $0.level == .notice }
    #expect(notices.count == 1, "\(notices.map(\.message))")
    #expect(
      records.contains { $0.message.hasPrefix("circuit breaker for 127.0.0.1:\(server.port) opened") }
        && records.contains { $0.message.hasPrefix("circuit breaker for 127.0.0.1:\(server.port) closed") })
    #expect(
      records.contains { $0.message.hasPrefix("invalidations on") && $0.message.contains("resubscribed") },
      "the subscription's return is logged too (at debug when the server's was the notice)")
    // Every opening of the breaker is logged, all at debug but the outage's warning, if the
    // server's pool saw it first.
    let openings = records.filter { $0.message.hasPrefix("circuit breaker for 127.0.0.1:\(server.port) opened") }
    #expect(openings.count == layer.statistics.circuitOpenings)
    #expect(openings.count(where: { $0.level != .debug }) <= 1)
    // Each failed probe says so, at debug: an observer tells it from the outage's first opening.
    let probes = records.filter { $0.message.hasPrefix("circuit breaker for 127.0.0.1:\(server.port) probed") }
    #expect(probes.count == layer.statistics.failedProbes && probes.count >= 3, "\(probes.map(\.message))")
    #expect(probes.allSatisfy { $0.level == .debug })
    #expect(
      records.filter { $0.message.hasPrefix("connection to") }.allSatisfy { $0.level <= .info },
      "discarded connections are info, or debug once the breaker is open")
  }

  @Test("a subscription killed again and again soon after it is back logs one warning and one notice, and backs off")
  func flappingSubscription() async throws {
    let server = try await RedisServer.start()
    let logs = RecordingLogHandler()
    let events = EventLog<RedisLayerEvent>()
    // The subscription's backoff, and how long each subscription lived, run on this clock: a
    // subscription lives no time at all between a resubscription and the next kill, however
    // slowly the test runs (on the wall clock, a run starved for 10 s made a flap an outage).
    let clock = ManualClock()
    let layer = try makeLayer(server, namespace: "flap") {
      $0.logger = logs.logger(minimumLevel: .debug)
      $0.invalidation = RedisInvalidation()
      $0.eventHandler = events.handler
      $0.clock = clock
      // Those run in real time, on the connection's thread: long enough that a loaded machine
      // does not fail a resubscription (which would log a record of its own).
      $0.connectTimeout = .seconds(30)
      $0.operationTimeout = .seconds(30)
    }
    try layer.forwardInvalidations(to: [try MemoryLayer<String, Data>()])
    await eventually { layer.isReceivingInvalidations }
    func resubscriptions() -> Int {
      events.all.count { if case .invalidationsResubscribed = $0 { true } else { false } }
    }
    func interruptions() -> Int {
      events.all.count { if case .invalidationsInterrupted = $0 { true } else { false } }
    }
    // How long each time the subscription took to come back, on the clock.
    var downFor: [Duration] = []
    func isBack(_ round: Int) -> Bool { resubscriptions() >= round && layer.isReceivingInvalidations }
    // The subscription's backoff is due within the breaker's maximum delay (1 s); its health
    // check, the clock's only other timer here, is 10 s away.
    func isBackingOff() -> Bool { clock.nextDeadline.map { $0 <= clock.now.advanced(by: .seconds(1)) } ?? false }
    for round in 1...4 {
      let killedAt = clock.now
      let before = interruptions()
      let killed = try await server.command("CLIENT", "KILL", "TYPE", "pubsub")
      #expect(killed != .integer(0), "the subscription was killed")
      // Not a moment of the clock passes until the subscription has seen the kill: its life
      // ends at the kill.
      await waitUntil { interruptions() > before }
      // Then it waits out its backoff on the clock, moved in small steps, so that the time it
      // took is its backoff, rounded up to a step.
      while !isBack(round), !Task.isCancelled {
        await waitUntil { isBack(round) || isBackingOff() }
        if !isBack(round) { clock.advance(by: .milliseconds(25)) }
      }
      downFor.append(killedAt.duration(to: clock.now))
    }
    let records = logs.records.filter { $0.source == "RedisLayer" && $0.message.hasPrefix("invalidations on") }
    #expect(records.count == 8, "\(records.map(\.message))")
    #expect(records.count { $0.level == .warning } == 1 && records.first?.level == .warning)
    #expect(records.count { $0.level == .notice } == 1 && records.dropFirst().first?.level == .notice)
    #expect(records.dropFirst(2).allSatisfy { $0.level == .debug }, "a flap is not an outage of its own")
    // Backing off: the first wait is at most the initial 100 ms (with jitter, and a step); the
    // fourth is at least 100 ms doubled three times, halved by the jitter.
    try #require(downFor.count == 4)
    #expect(downFor[0] <= .milliseconds(125), "\(downFor)")
    #expect(downFor[3] >= .milliseconds(400), "\(downFor)")
  }

  @Test("a server loading its dataset after a restart answers LOADING: the breaker stays open until it serves")
  func loadingKeepsTheBreakerOpen() async throws {
    let directory = try TemporaryDirectory("redis-loading")
    defer { directory.remove() }
    let persisted = ["--dir", directory.url.path, "--dbfilename", "dump.rdb"]
    // A dataset to load, saved by a first server.
    let first = try await RedisServer.start(persisted)
    for batch in 0..<10 {
      var words = ["MSET"]
      // Random values, which the dump cannot compress: the server reads 1 KiB per 8 keys or so.
      for index in 0..<300 { words += ["key\(batch)-\(index)", (0..<3).map { _ in UUID().uuidString }.joined()] }
      _ = try await RedisServer.command(RESPCommand(words.map { Array($0.utf8) }), port: first.port)
    }
    _ = try await first.command("SAVE")
    first.stop(killing: false)
    // Restarted on the same port, it loads for 15 s (5 ms a key) and answers LOADING meanwhile
    // (it serves clients every 1 KiB it reads: every 40 ms or so).
    let loading = try await RedisServer.start(
      persisted + ["--key-load-delay", "5000", "--loading-process-events-interval-bytes", "1024"],
      port: first.port, readyWhen: "Loading RDB")
    defer { loading.stop() }
    let logs = RecordingLogHandler()
    let clock = ManualClock()
    let layer = try makeLayer(loading, namespace: "loading") {
      $0.logger = logs.logger(minimumLevel: .debug)
      $0.clock = clock
    }
    // Wait until the server answers LOADING (it may read its first bytes before it serves).
    await eventually {
      guard case .error(let text)? = try? await loading.command("GET", "x") else { return false }
      return text.hasPrefix("LOADING")
    }

    let refused = await #expect(throws: RedisError.self) { try await layer.value(for: "k") }
    #expect(
      refused?.code == .serverError && refused?.message.contains("LOADING") == true, "\(String(describing: refused))")
    #expect(layer.statistics.circuitOpenings == 1, "an answer that says it cannot serve opens the breaker")
    // Once the delay has passed, the probe finds it still loading: the breaker opens again.
    clock.advance(by: .seconds(1))
    await #expect(throws: RedisError.self) { try await layer.value(for: "k") }
    #expect(layer.statistics.failedProbes == 1)
    await #expect { try await layer.value(for: "k") } throws: { ($0 as? RedisError)?.code == .unavailable }

    // It serves again (here a new server on the port, so that the test need not wait out the
    // load): the next probe closes the breaker.
    loading.stop()
    let serving = try await RedisServer.start(port: first.port)
    defer { serving.stop() }
    clock.advance(by: .seconds(1))
    #expect(try await layer.value(for: "k") == nil)
    let records = logs.records
    #expect(records.filter { $0.level >= .warning }.count == 1, "\(records.map(\.message))")
    #expect(records.contains { $0.level == .debug && $0.message.contains("probed and opened again") })
    #expect(records.contains { $0.level == .notice && $0.message.contains("closed") })
  }

  @Test("the breaker waits at most a second between probes by default, jitter included")
  func probesWithinASecond() {
    let policy = RedisCircuitBreakerPolicy()
    #expect(policy.maximumDelay == .seconds(1))
    for openings in 1...40 {
      #expect(policy.delay(afterOpenings: openings, jitter: 1) <= .seconds(1))
      #expect(policy.delay(afterOpenings: openings, jitter: 0.5) >= .milliseconds(50))
    }
    #expect(policy.delay(afterOpenings: 1, jitter: 1) == .milliseconds(100))
    #expect(policy.delay(afterOpenings: 5, jitter: 1) == .seconds(1))
    // A policy given a longer first delay alone takes it as its longest.
    #expect(RedisCircuitBreakerPolicy(initialDelay: .seconds(2)).maximumDelay == .seconds(2))
  }
}
