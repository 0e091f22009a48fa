#if os(Linux)
  import Foundation
  import Glibc
  import Synchronization

  /// A process that outlives the test process by a moment and kills the children it leaves: a
  /// test process that crashes or is killed (a time limit, a sanitizer report, `kill -9`) cannot
  /// stop its `redis-server`s and probes, and a crashed run must not leave them behind.
  ///
  /// The watchdog is a `PersistenceProbe watchdog`, started once per process with the first
  /// child. Its standard input is a socket whose other end only this process holds (its other
  /// children close every descriptor but their standard streams as they start). Each child is
  /// announced on it once started (`+<pid>`), and withdrawn before it is reaped (`-<pid>`),
  /// while its pid cannot belong to another process yet. When this process ends, however it
  /// ends, the socket reaches its end: the watchdog kills the children still announced
  /// (`SIGKILL`, which also ends a stopped one) and exits.
  ///
  /// A `SIGKILL` of the test process between a child's start and its announcement leaves that
  /// child running: a window of a few microseconds.
  final class ChildWatchdog: Sendable {
    /// The watchdog of this process, started on first use; `nil` when it cannot be started (no
    /// `PersistenceProbe` was built): children then outlive a crashed test process, as before.
    static let shared: ChildWatchdog? = try? ChildWatchdog()

    private let process: ChildProcess
    /// This process's end of the socket pair whose other end is the watchdog's standard input.
    private let socket: Int32

    private init() throws {
      // A socket pair rather than a pipe: a write to a watchdog that died fails with EPIPE
      // (`MSG_NOSIGNAL`) instead of raising SIGPIPE in the test process.
      var ends: [Int32] = [-1, -1]
      guard socketpair(AF_UNIX, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0, &ends) == 0 else {
        throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EIO)
      }
      do {
        process = try ChildProcess(
          try Probe.executable(), arguments: ["watchdog"], standardInput: .descriptor(ends[1]),
          standardOutput: .null, standardError: .inherited, watched: false)
      } catch {
        close(ends[0])
        close(ends[1])
        throw error
      }
      // The watchdog has its own copy: only this process holds the writing end now.
      close(ends[1])
      socket = ends[0]
    }

    /// The watchdog's process identifier.
    var processIdentifier: Int32 { process.processIdentifier }

    /// The child `pid` is running: the watchdog kills it if this process ends first.
    func watch(_ pid: pid_t) {
      send("+\(pid)\n")
    }

    /// The child `pid` is about to be reaped: its pid may belong to another process after that.
    func forget(_ pid: pid_t) {
      send("-\(pid)\n")
    }

    /// Writes `line` (a few bytes, written whole: a stream socket's send of so little does not
    /// split, and the lock keeps lines from different threads apart).
    private func send(_ line: String) {
      let bytes = Array(line.utf8)
      // A watchdog that died cannot be told (EPIPE): the children then outlive a crash, as they
      // did before there was a watchdog.
      sendLock.withLock { _ in
        _ = bytes.withUnsafeBytes { Glibc.send(socket, $0.baseAddress, $0.count, Int32(MSG_NOSIGNAL)) }
      }
    }
    private let sendLock = Mutex<Void>(())
  }
#endif
