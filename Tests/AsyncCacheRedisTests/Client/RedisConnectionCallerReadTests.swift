import AsyncCache
import Foundation
import Synchronization
import TestSupport
import Testing

@testable import AsyncCacheRedis

/// A lone command's reply read by its caller, on its own thread (see `RedisConnection`), against
/// a real server: every outcome of that read (the reply, a late reply handed to the thread, the
/// commands queued behind it, the server closing, a cancellation) answers every caller once.
///
/// One caller in the whole process reads at a time, and other suites send commands at the same
/// moment: a test that needs a caller's read tries again on a fresh key until it got one. A
/// caller made to wait for a reply the test lets come later blocks its thread all that time:
/// those callers run on a thread of their own (``ThreadExecutor``), never on the cooperative
/// pool, whose two threads every other test of the run needs.
@Suite("RedisConnection: replies read by their callers", .redisServer, .timeLimit(.minutes(3)))
struct RedisConnectionCallerReadTests {
  /// Nanoseconds: long enough for any reply on a loaded machine, so that a caller that reads
  /// keeps reading until the test lets the reply come.
  static let patient: UInt64 = 60_000_000_000

  /// Until when a test tries commands until one is read by its caller. One caller in the process
  /// reads at a time, and the other suites' lone commands take that turn often, for long
  /// stretches while the machine is loaded (200 tries in a row have all found it taken): a
  /// time, not a number of tries, within the suite's limit.
  static var triedUntil: ContinuousClock.Instant { .now.advanced(by: .seconds(120)) }

  /// Waits until no caller in the process is reading (see ``RedisConnection/callerWaiting``),
  /// so that a try is not spent while another suite's caller holds the turn. Another may take it
  /// before the try does: the tests try again.
  static func waitForTheCallersTurn() async {
    await waitUntil { !RedisConnection.callerWaiting.load(ordering: .acquiring) }
  }

  static func open(_ server: RedisServer, callerWaitLimit: UInt64) async throws -> RedisConnection {
    try await RedisConnection.open(
      host: "127.0.0.1", port: server.port, connectTimeout: .seconds(10), operationTimeout: .seconds(120),
      callerWaitLimit: callerWaitLimit, onClose: { _ in })
  }

  static func command(_ words: String...) -> RESPCommand { RESPCommand(words.map { Array($0.utf8) }) }

  /// Sends `BLPOP key 0` from a task of its own on `executor` (the server answers once `key`
  /// gets a value) and returns the task once the command is queued, with whether its caller
  /// reads the reply.
  static func blockingPop(
    _ key: String, on connection: RedisConnection, executor: ThreadExecutor
  ) async throws -> (task: Task<RESPValue, any Error>, callerReads: Bool) {
    let before = connection.repliesReadByCallers + connection.commandsHandedOver
    let task = Task(executorPreference: executor) { try await connection.send(command("BLPOP", key, "0")) }
    await eventually { connection.queue.commands == 1 }
    return (
      task, connection.queue.callerReads || connection.repliesReadByCallers + connection.commandsHandedOver > before
    )
  }

  @Test("lone commands' replies are read by their callers, in order, and nothing is left queued")
  func loneRepliesAreReadByTheirCallers() async throws {
    let server = try await RedisServer.start()
    defer { server.stop() }
    let connection = try await Self.open(server, callerWaitLimit: Self.patient)
    defer { connection.close(with: RedisError(code: .shutDown, message: "done")) }
    var sent = 0
    // Another suite's caller may be reading at any moment: enough commands that some are ours.
    await eventually {
      sent += 1
      let reply = try? await connection.send(Self.command("INCR", "counter"))
      #expect(reply == .integer(Int64(sent)))
      return connection.repliesReadByCallers >= 20 || sent >= 100_000
    }
    #if os(Linux)
      #expect(connection.repliesReadByCallers >= 20)
    #endif
    #expect(connection.commandsHandedOver == 0, "every reply came within a minute")
    #expect(connection.queue.commands == 0)
    #expect(connection.commandsInFlight == 0)
    #expect(!connection.isClosed)
  }

  @Test("a reply later than the caller's wait goes to the connection's thread, which answers it")
  func aLateReplyIsHandedToTheThread() async throws {
    #if os(Linux)
      let server = try await RedisServer.start()
      defer { server.stop() }
      let executor = ThreadExecutor(label: "caller")
      defer { executor.stop() }
      // A millisecond: the reply, which waits for the test's push, is always later.
      let connection = try await Self.open(server, callerWaitLimit: 1_000_000)
      defer { connection.close(with: RedisError(code: .shutDown, message: "done")) }
      var handedOver = false
      var attempt = 0
      let deadline = Self.triedUntil
      while !handedOver, ContinuousClock.now < deadline, !Task.isCancelled {
        defer { attempt += 1 }
        await Self.waitForTheCallersTurn()
        let (task, callerReads) = try await Self.blockingPop("gate-\(attempt)", on: connection, executor: executor)
        if callerReads {
          await eventually { connection.commandsHandedOver == 1 }
          handedOver = true
        }
        _ = try await server.command("LPUSH", "gate-\(attempt)", "open")
        let reply = try await task.value
        #expect(reply == .array([.bulkString(Array("gate-\(attempt)".utf8)), .bulkString(Array("open".utf8))]))
      }
      #expect(handedOver || Task.isCancelled, "one of \(attempt) commands in 2 minutes was read by its caller first")
      #expect(connection.repliesReadByCallers == 0)
      // The connection goes on: the thread watches for replies again.
      #expect(try await connection.send(Self.command("PING")) == .simpleString("PONG"))
      #expect(connection.queue.commands == 0)
    #endif
  }

  @Test("commands queued behind one whose caller reads are answered, in order, once it is done")
  func commandsBehindACallersReadAreAnswered() async throws {
    #if os(Linux)
      let server = try await RedisServer.start()
      defer { server.stop() }
      let executor = ThreadExecutor(label: "caller")
      defer { executor.stop() }
      let connection = try await Self.open(server, callerWaitLimit: Self.patient)
      defer { connection.close(with: RedisError(code: .shutDown, message: "done")) }
      var tested = false
      var attempt = 0
      let deadline = Self.triedUntil
      while !tested, ContinuousClock.now < deadline, !Task.isCancelled {
        defer { attempt += 1 }
        await Self.waitForTheCallersTurn()
        // Replies read by their callers: the idle thread then watches only for the closing.
        for _ in 0..<3 { _ = try await connection.send(Self.command("PING")) }
        let (first, second) = ("first-\(attempt)", "second-\(attempt)")
        let (pop, callerReads) = try await Self.blockingPop(first, on: connection, executor: executor)
        // Queued in this order: two echoes, a pop whose reply waits for the second push (after
        // the caller is done reading), two echoes.
        var behind: [Task<RESPValue, any Error>] = []
        for index in 0..<5 {
          let words = index == 2 ? ["BLPOP", second, "0"] : ["ECHO", "\(attempt)-\(index)"]
          behind.append(Task { try await connection.send(RESPCommand(words.map { Array($0.utf8) })) })
          await eventually { connection.queue.commands == index + 2 }
        }
        tested = callerReads
        _ = try await server.command("LPUSH", first, "open")
        #expect(try await pop.value == .array([.bulkString(Array(first.utf8)), .bulkString(Array("open".utf8))]))
        #expect(try await behind[1].value == .bulkString(Array("\(attempt)-1".utf8)))
        _ = try await server.command("LPUSH", second, "open")
        for (index, task) in behind.enumerated() {
          let expected: RESPValue =
            index == 2
            ? .array([.bulkString(Array(second.utf8)), .bulkString(Array("open".utf8))])
            : .bulkString(Array("\(attempt)-\(index)".utf8))
          #expect(try await task.value == expected)
        }
      }
      #expect(tested || Task.isCancelled, "one of \(attempt) commands in 2 minutes was read by its caller")
      #expect(connection.queue.commands == 0)
    #endif
  }

  @Test("the server closing the connection as a caller reads fails that caller, and the connection")
  func theServerClosingFailsTheReadingCaller() async throws {
    #if os(Linux)
      let server = try await RedisServer.start()
      defer { server.stop() }
      let executor = ThreadExecutor(label: "caller")
      defer { executor.stop() }
      var tested = false
      var attempt = 0
      let deadline = Self.triedUntil
      while !tested, ContinuousClock.now < deadline, !Task.isCancelled {
        defer { attempt += 1 }
        await Self.waitForTheCallersTurn()
        let connection = try await Self.open(server, callerWaitLimit: Self.patient)
        defer { connection.close(with: RedisError(code: .shutDown, message: "done")) }
        guard case .integer(let id) = try await connection.send(Self.command("CLIENT", "ID")) else {
          Issue.record("CLIENT ID did not answer an integer")
          return
        }
        let (pop, callerReads) = try await Self.blockingPop("gate-\(attempt)", on: connection, executor: executor)
        tested = callerReads
        #expect(try await server.command("CLIENT", "KILL", "ID", "\(id)") == .integer(1))
        await #expect(throws: RedisError.self) { try await pop.value }
        #expect(connection.isClosed)
        await #expect(throws: RedisError.self) { try await connection.send(Self.command("PING")) }
      }
      #expect(tested || Task.isCancelled, "one of \(attempt) commands in 2 minutes was read by its caller")
    #endif
  }

  @Test("a caller cancelled as it reads ends with CancellationError; its reply is dropped, not given to the next")
  func aCancelledReadingCallerLeavesTheConnectionInOrder() async throws {
    #if os(Linux)
      let server = try await RedisServer.start()
      defer { server.stop() }
      let executor = ThreadExecutor(label: "caller")
      defer { executor.stop() }
      // Two milliseconds: a cancelled caller stops reading that soon.
      let connection = try await Self.open(server, callerWaitLimit: 2_000_000)
      defer { connection.close(with: RedisError(code: .shutDown, message: "done")) }
      var tested = false
      var attempt = 0
      let deadline = Self.triedUntil
      while !tested, ContinuousClock.now < deadline, !Task.isCancelled {
        defer { attempt += 1 }
        await Self.waitForTheCallersTurn()
        let key = "gate-\(attempt)"
        let (pop, callerReads) = try await Self.blockingPop(key, on: connection, executor: executor)
        tested = callerReads
        pop.cancel()
        await #expect(throws: CancellationError.self) { try await pop.value }
        #expect(connection.queue.commands == 1, "the command keeps its place")
        _ = try await server.command("LPUSH", key, "open")
        #expect(try await connection.send(Self.command("ECHO", "next")) == .bulkString(Array("next".utf8)))
        #expect(connection.queue.commands == 0)
      }
      #expect(tested || Task.isCancelled, "one of \(attempt) commands in 2 minutes was read by its caller")
    #endif
  }

  @Test("one caller in the process reads at a time: another lone command goes to its connection's thread")
  func oneCallerReadsAtATime() async throws {
    let server = try await RedisServer.start()
    defer { server.stop() }
    // One thread each: the first caller may block its own while it reads.
    let (executor, other) = (ThreadExecutor(label: "first caller"), ThreadExecutor(label: "second caller"))
    defer {
      executor.stop()
      other.stop()
    }
    let first = try await Self.open(server, callerWaitLimit: Self.patient)
    let second = try await Self.open(server, callerWaitLimit: Self.patient)
    defer {
      first.close(with: RedisError(code: .shutDown, message: "done"))
      second.close(with: RedisError(code: .shutDown, message: "done"))
    }
    let (one, _) = try await Self.blockingPop("one", on: first, executor: executor)
    let (two, _) = try await Self.blockingPop("two", on: second, executor: other)
    #expect(!(first.queue.callerReads && second.queue.callerReads))
    _ = try await server.command("LPUSH", "two", "b")
    _ = try await server.command("LPUSH", "one", "a")
    #expect(try await one.value == .array([.bulkString(Array("one".utf8)), .bulkString(Array("a".utf8))]))
    #expect(try await two.value == .array([.bulkString(Array("two".utf8)), .bulkString(Array("b".utf8))]))
  }

  @Test("a lone command the socket takes only in part keeps its reply, even when the thread reads it first")
  func aPartlySentLoneCommandKeepsItsReply() async throws {
    let server = try await RedisServer.start()
    defer { server.stop() }
    let executor = ThreadExecutor(label: "caller")
    defer { executor.stop() }
    let opened = Locked<RedisConnection?>(nil)
    let held = Atomic<Int>(0)
    // The caller, preempted after it woke the thread: the thread sends the rest and reads the
    // reply before the caller queues for it.
    let connection = try await RedisConnection.open(
      host: "127.0.0.1", port: server.port, connectTimeout: .seconds(10), operationTimeout: .seconds(120),
      callerWaitLimit: Self.patient,
      afterPartialSend: {
        held.add(1, ordering: .relaxed)
        let deadline = ContinuousClock.now.advanced(by: .seconds(60))
        while opened.withLock({ $0?.commandsInFlight ?? 0 }) > 0, ContinuousClock.now < deadline {
          sched_yield()
        }
      }, onClose: { _ in })
    opened.withLock { $0 = connection }
    defer { connection.close(with: RedisError(code: .shutDown, message: "done")) }
    // More than a loopback socket's buffer takes at once.
    let size = 16 << 20
    let value = [UInt8](repeating: UInt8(ascii: "a"), count: size)
    var attempts = 0
    let deadline = Self.triedUntil
    // Another suite's caller may be reading at that moment: then the command goes the usual way.
    // Where callers never read (not Linux), a few tries show that the usual way works.
    while held.load(ordering: .relaxed) == 0, ContinuousClock.now < deadline, !Task.isCancelled,
      RedisConnection.callersMayRead || attempts < 5
    {
      attempts += 1
      await Self.waitForTheCallersTurn()
      // The hook holds the caller's thread: not one of the pool's.
      let set = Task(executorPreference: executor) {
        try await connection.send(RESPCommand([Array("SET".utf8), Array("big".utf8), value]))
      }
      #expect(try await set.value == .simpleString("OK"))
    }
    #if os(Linux)
      #expect(
        held.load(ordering: .relaxed) == 1 || Task.isCancelled,
        "the caller sent part of it, then the thread answered it (\(attempts) tries in 2 minutes)")
    #endif
    #expect(!connection.isClosed)
    #expect(try await connection.send(Self.command("STRLEN", "big")) == .integer(Int64(size)))
    // The reply waited for its caller; the next lone caller reads as before.
    #expect(try await connection.send(Self.command("PING")) == .simpleString("PONG"))
    #expect(connection.queue.commands == 0)
  }

  @Test("the layer counts the replies its callers read; with callerWaitLimit zero, none is")
  func theLayerCountsAndCanTurnItOff() async throws {
    let server = try await RedisServer.start()
    defer { server.stop() }
    let reading = try makeLayer(server)
    let never = try makeLayer(server) { $0.callerWaitLimit = .zero }
    try await reading.insert(Data("v".utf8), for: "k")
    var reads = 0
    // Another suite's caller may be reading at any moment: enough reads that some are ours.
    try await eventually { () async throws -> Bool in
      reads += 1
      let (read, unread) = (try await reading.value(for: "k"), try await never.value(for: "k"))
      #expect(read == Data("v".utf8) && unread == Data("v".utf8))
      return reading.statistics.repliesReadByCallers > 0 || reads >= 100_000
    }
    #if os(Linux)
      #expect(reading.statistics.repliesReadByCallers > 0)
    #endif
    #expect(never.statistics.repliesReadByCallers == 0)
    #expect(never.statistics.hits == reads)
    try await reading.close()
    try await never.close()
  }

  @Test("after a reply its caller read, the idle connection still notices the server closing it")
  func anIdleConnectionNoticesTheClosing() async throws {
    let server = try await RedisServer.start()
    defer { server.stop() }
    let closed = Locked<RedisError?>(nil)
    let connection = try await RedisConnection.open(
      host: "127.0.0.1", port: server.port, connectTimeout: .seconds(10), operationTimeout: .seconds(120),
      callerWaitLimit: Self.patient, onClose: { error in closed.withLock { $0 = error } })
    defer { connection.close(with: RedisError(code: .shutDown, message: "done")) }
    guard case .integer(let id) = try await connection.send(Self.command("CLIENT", "ID")) else {
      Issue.record("CLIENT ID did not answer an integer")
      return
    }
    for _ in 0..<10 { _ = try await connection.send(Self.command("PING")) }
    #expect(try await server.command("CLIENT", "KILL", "ID", "\(id)") == .integer(1))
    // `onClose` is called once the connection is marked closed.
    await eventually { closed.withLock { $0 != nil } }
    #expect(connection.isClosed)
    #expect(closed.withLock { $0?.code } == .connectionClosed)
  }
}
