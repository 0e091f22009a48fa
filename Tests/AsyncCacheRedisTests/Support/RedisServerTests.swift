import AsyncCache
import Foundation
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
    // A blocking wait, on a thread of its own; should it not end, the test fails (and kills the
    // server) instead of hanging the run.
    let stopped = Locked(false)
    let backstop = Task {
      try await Task.sleep(for: .seconds(30))
      if !stopped.withLock({ $0 }) {
        Issue.record("the frozen server did not stop on SIGTERM")
        kill(pid, SIGKILL)
      }
    }
    await withCheckedContinuation { continuation in
      Thread.detachNewThread {
        server.stop(killing: false)
        stopped.withLock { $0 = true }
        continuation.resume()
      }
    }
    backstop.cancel()
    // Reaped: the pid names no process any more.
    #expect(kill(pid, 0) == -1 && errno == ESRCH)
  }
}
