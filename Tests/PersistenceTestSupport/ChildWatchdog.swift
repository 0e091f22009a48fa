#if os(Linux)
  import Foundation
  import Glibc

  /// A process that outlives the test process by a moment and kills the children it leaves: a
  /// test process that crashes or is killed (a time limit, a sanitizer report, `kill -9`) cannot
  /// stop its `redis-server`s and probes, and a crashed run must not leave them behind.
  ///
  /// The watchdog is a `PersistenceProbe watchdog`, started once per process with the first
  /// child. Its standard input is a pipe whose writing end only this process holds (its other
  /// children close every descriptor but their standard streams as they start). Each child is
  /// announced on it once started (`+<pid>`), and withdrawn before it is reaped (`-<pid>`),
  /// while its pid cannot belong to another process yet. When this process ends, however it
  /// ends, the pipe reaches its end: the watchdog kills the children still announced
  /// (`SIGKILL`, which also ends a stopped one) and exits.
  ///
  /// A `SIGKILL` of the test process between a child's start and its announcement leaves that
  /// child running: a window of a few microseconds.
  final class ChildWatchdog: Sendable {
    /// The watchdog of this process, started on first use; `nil` when it cannot be started (no
    /// `PersistenceProbe` was built): children then outlive a crashed test process, as before.
    static let shared: ChildWatchdog? = try? ChildWatchdog()

    private let process: ChildProcess
    private let input: FileHandle

    private init() throws {
      let pipe = Pipe()
      process = try ChildProcess(
        try Probe.executable(), arguments: ["watchdog"], standardInput: .pipe(pipe), standardOutput: .null,
        standardError: .inherited, watched: false)
      input = pipe.fileHandleForWriting
    }

    /// The child `pid` is running: the watchdog kills it if this process ends first.
    func watch(_ pid: pid_t) {
      send("+\(pid)\n")
    }

    /// The child `pid` is about to be reaped: its pid may belong to another process after that.
    func forget(_ pid: pid_t) {
      send("-\(pid)\n")
    }

    /// Writes `line` (shorter than `PIPE_BUF`, so written whole, whatever other threads write).
    private func send(_ line: String) {
      let bytes = Array(line.utf8)
      // A watchdog that died cannot be told: the children then outlive a crash, as before.
      _ = bytes.withUnsafeBytes { write(input.fileDescriptor, $0.baseAddress, $0.count) }
    }
  }
#endif
