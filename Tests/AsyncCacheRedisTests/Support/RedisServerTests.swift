import AsyncCache
import Testing

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// The servers the tests start: they end when stopped, whatever state a test left them in.
@Suite("Test Redis servers", .redisServer, .timeLimit(.minutes(1)))
struct RedisServerTests {
  @Test("a frozen server stopped with SIGTERM exits: it is let go on to act on the signal")
  func frozenServerStops() async throws {
    let server = try await RedisServer.start()
    let pid = server.pid
    server.freeze()
    // A blocking wait, on a thread of its own. Should it not end, the test's time limit fails
    // it and kills the server, so that the run goes on.
    let outlived = Locked(false)
    await withTaskCancellationHandler {
      await withCheckedContinuation { continuation in
        let stop: @Sendable () -> Void = {
          server.stop(killing: false)
          continuation.resume()
        }
        if DetachedThread(label: "stop redis", body: stop).start() != 0 { stop() }
      }
    } onCancel: {
      outlived.withLock { $0 = true }
      kill(pid, SIGKILL)
    }
    #expect(!outlived.withLock { $0 }, "the frozen server did not stop on SIGTERM")
    // Reaped: the pid names no process any more.
    #expect(kill(pid, 0) == -1 && errno == ESRCH)
  }
}
