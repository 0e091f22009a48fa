public import Foundation

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

#if os(Linux)
  import CChildProcess
  import Synchronization
#endif

/// A child process that a test starts, signals and waits for: the one place in the tests that
/// knows how processes are started.
///
/// Processes can be started on macOS and Linux. iOS, tvOS, watchOS and visionOS have no
/// `Process` (apps there cannot start programs): the tests compile for them, and the ones that
/// need a child process are disabled there through ``unavailableReason``. There the initializer
/// throws, so no instance exists and the other members never run.
///
/// On Linux the child is started with `posix_spawn` and waited for with `waitpid` on its own
/// pid, not with `Foundation.Process`. There, `Process` learns that a child exited when a socket
/// that only the child holds reaches its end; but a child started by another test at the same
/// moment can inherit that socket (its descriptors are listed for closing before the socket
/// exists), and then the first child's exit is never seen: `waitUntilExit()` spins for ever, and
/// CI hung in a test that had killed its probe. Here the child closes every descriptor but its
/// standard streams as it starts, so it holds nothing of another test's, and nothing but this
/// object reaps it, so a signal never reaches a pid that was reused. The child stays in the test
/// process's group: a Ctrl-C or a `timeout` that ends the tests ends it too. Dropping the
/// object kills the child (`SIGKILL`) and reaps it, so none outlives its test or stays a zombie;
/// and a test process that crashes or is killed has its children killed by its
/// ``ChildWatchdog``, so none outlives the run.
public final class ChildProcess: Sendable {
  /// What one of the child's standard streams is connected to.
  public enum Stream {
    /// The test process's own stream.
    case inherited
    /// `/dev/null`.
    case null
    /// A pipe; the child's end is closed in the test process once the child runs.
    case pipe(Pipe)
    /// An open descriptor of the test process (a socket, say), which the caller closes.
    case descriptor(Int32)
  }

  /// Why child processes cannot be started here, or `nil` where they can.
  public static var unavailableReason: String? {
    #if os(macOS) || os(Linux)
      nil
    #else
      "child processes can only be started on macOS and Linux"
    #endif
  }

  #if os(Linux)
    private let pid: pid_t
    /// How the child ended, once it was reaped; the lock also orders signals before the reaping,
    /// so a signal never reaches the pid once it is free for reuse.
    private let reaped = Mutex<Int32?>(nil)
    /// Held by a thread that waits for the exit, so that only one waits on the pid at a time and
    /// none waits on it once it is reaped (it may then belong to another process).
    private let waiting = Mutex<Void>(())
    /// The watchdog that kills the child if the test process ends first, told before it is reaped.
    private let watchdog: ChildWatchdog?
  #elseif os(macOS)
    private let process: Process
  #endif

  /// Starts `executable` with `arguments`.
  ///
  /// - Throws: When the executable cannot be started, or where ``unavailableReason`` says why
  ///   no process can be.
  public convenience init(
    _ executable: URL, arguments: [String], standardInput: Stream = .inherited,
    standardOutput: Stream = .inherited, standardError: Stream = .inherited
  ) throws {
    try self.init(
      executable, arguments: arguments, standardInput: standardInput, standardOutput: standardOutput,
      standardError: standardError, watched: true)
  }

  /// Starts `executable` with `arguments`; on Linux, a `watched` child is killed by the
  /// process's ``ChildWatchdog`` if the test process ends first (the watchdog itself is not).
  init(
    _ executable: URL, arguments: [String], standardInput: Stream, standardOutput: Stream, standardError: Stream,
    watched: Bool
  ) throws {
    #if os(Linux)
      let watchdog = watched ? ChildWatchdog.shared : nil
      pid = try Self.spawn(
        executable.path, arguments: arguments, streams: [standardInput, standardOutput, standardError])
      self.watchdog = watchdog
      watchdog?.watch(pid)
    #elseif os(macOS)
      process = Process()
      process.executableURL = executable
      process.arguments = arguments
      if let input = Self.connection(standardInput) { process.standardInput = input }
      if let output = Self.connection(standardOutput) { process.standardOutput = output }
      if let error = Self.connection(standardError) { process.standardError = error }
      try process.run()
    #else
      throw CocoaError(.featureUnsupported, userInfo: [NSLocalizedDescriptionKey: Self.unavailableReason ?? ""])
    #endif
  }

  /// Whether a child dies with the process that started it, when that one is killed without a
  /// chance to stop it: on Linux, through the ``ChildWatchdog``.
  public static var diesWithItsStarter: Bool {
    #if os(Linux)
      true
    #else
      false
    #endif
  }

  /// The process identifier of this process's watchdog, once a child started it (Linux); for
  /// the tests of the watchdog itself.
  public static var watchdogProcessIdentifier: Int32? {
    #if os(Linux)
      ChildWatchdog.shared?.processIdentifier
    #else
      nil
    #endif
  }

  /// The child's process identifier.
  public var processIdentifier: Int32 {
    #if os(Linux)
      pid
    #elseif os(macOS)
      process.processIdentifier
    #else
      Self.unreachable()
    #endif
  }

  /// Sends `signal` (`SIGKILL`, `SIGTERM`…) to the child, by its process identifier.
  public func send(_ signal: Int32) {
    #if os(Linux)
      reaped.withLock { status in
        if status == nil { _ = kill(pid, signal) }
      }
    #elseif os(macOS)
      _ = kill(process.processIdentifier, signal)
    #else
      Self.unreachable()
    #endif
  }

  /// Waits for the child to exit; returns its exit status, or the number of the signal that
  /// ended it. Blocks the calling thread.
  @discardableResult
  public func waitUntilExit() -> Int32 {
    #if os(Linux)
      waiting.withLock { _ in
        if let status = reaped.withLock({ $0 }) { return status }
        // Not reaped, and no other thread can reap it meanwhile (they wait for `waiting`): waits
        // for the exit without reaping and without `reaped`, so that `send` never waits behind
        // it, then reaps under `reaped` (at once: the child has exited).
        var information = siginfo_t()
        while waitid(P_PID, id_t(pid), &information, WEXITED | WNOWAIT) == -1 && errno == EINTR {}
        return reap()
      }
    #elseif os(macOS)
      process.waitUntilExit()
      return process.terminationStatus
    #else
      Self.unreachable()
    #endif
  }

  /// Reads `output` (the read end of a pipe the child writes to) to its end, then waits for the
  /// child to exit; returns what it read and the exit status. Both block, so they run on a thread
  /// of their own: the awaiting test holds none of the cooperative pool's few threads meanwhile
  /// (a child that takes seconds, such as `redis-cli --cluster create`, would otherwise stall
  /// the other tests that share the pool). A cancellation (a test's time limit) kills the child,
  /// which ends both: the result then reports `SIGKILL`.
  public func outputAndExit(reading output: FileHandle) async -> (output: Data, status: Int32) {
    await withTaskCancellationHandler {
      await withCheckedContinuation { continuation in
        Thread.detachNewThread {
          let read = output.readDataToEndOfFile()
          continuation.resume(returning: (read, self.waitUntilExit()))
        }
      }
    } onCancel: {
      send(SIGKILL)
    }
  }

  #if os(Linux)
    deinit {
      // Nothing can signal or wait for the child any more: it ends here, and is reaped.
      send(SIGKILL)
      reap()
    }

    /// Reaps the child, waiting for it to exit if it has not, unless it was reaped already;
    /// returns how it ended.
    @discardableResult
    private func reap() -> Int32 {
      reaped.withLock { status in
        if let status { return status }
        // Before the pid is free for reuse: the watchdog must not kill another process by it.
        watchdog?.forget(pid)
        var raw: Int32 = 0
        while waitpid(pid, &raw, 0) == -1 {
          precondition(errno == EINTR, "waitpid(\(pid)) failed: \(String(cString: strerror(errno)))")
        }
        let ended = Self.exitStatus(raw)
        status = ended
        return ended
      }
    }

    /// Starts `path`: its standard streams connected as `streams` says, every other descriptor
    /// closed, signals at their defaults and unblocked. Returns its pid.
    private static func spawn(_ path: String, arguments: [String], streams: [Stream]) throws -> pid_t {
      var actions = posix_spawn_file_actions_t()
      try check(posix_spawn_file_actions_init(&actions), "posix_spawn_file_actions_init")
      defer { posix_spawn_file_actions_destroy(&actions) }
      var parentEnds: [FileHandle] = []
      for (descriptor, stream) in zip(Int32(0)..., streams) {
        switch stream {
        case .inherited:
          break
        case .null:
          try check(
            posix_spawn_file_actions_addopen(
              &actions, descriptor, "/dev/null", descriptor == 0 ? O_RDONLY : O_WRONLY, 0),
            "posix_spawn_file_actions_addopen")
        case .pipe(let pipe):
          let end = descriptor == 0 ? pipe.fileHandleForReading : pipe.fileHandleForWriting
          try check(
            posix_spawn_file_actions_adddup2(&actions, end.fileDescriptor, descriptor),
            "posix_spawn_file_actions_adddup2")
          if !parentEnds.contains(where: { $0 === end }) { parentEnds.append(end) }
        case .descriptor(let open):
          try check(posix_spawn_file_actions_adddup2(&actions, open, descriptor), "posix_spawn_file_actions_adddup2")
        }
      }
      try closeEverythingElse(&actions)

      var attributes = posix_spawnattr_t()
      try check(posix_spawnattr_init(&attributes), "posix_spawnattr_init")
      defer { posix_spawnattr_destroy(&attributes) }
      var none = sigset_t()
      var all = sigset_t()
      sigemptyset(&none)
      sigfillset(&all)
      try check(posix_spawnattr_setsigmask(&attributes, &none), "posix_spawnattr_setsigmask")
      try check(posix_spawnattr_setsigdefault(&attributes, &all), "posix_spawnattr_setsigdefault")
      try check(
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF)),
        "posix_spawnattr_setflags")

      let argv = ([path] + arguments).map { strdup($0) } + [nil]
      defer {
        for argument in argv { free(argument) }
      }
      var pid = pid_t()
      let result = posix_spawn(&pid, path, &actions, &attributes, argv, environ)
      guard result == 0 else { throw Self.error(result, "cannot start \(path)") }
      // The child has its own copies now; the test keeps only its ends of the pipes.
      for end in parentEnds { try? end.close() }
      return pid
    }

    /// Closes every descriptor from 3 up in the child, after the standard streams are in place.
    private static func closeEverythingElse(_ actions: inout posix_spawn_file_actions_t) throws {
      let result = child_process_add_close_from(&actions, 3)
      guard result == ENOSYS else { return try check(result, "posix_spawn_file_actions_addclosefrom_np") }
      // glibc before 2.34 (and musl): the descriptors open now, one by one (closing one that
      // another thread closes meanwhile is no error in the child). One that another thread opens
      // between this listing and the spawn is inherited: the race of `Foundation.Process`, left
      // only where the C library cannot close them all.
      let open: [String]
      do {
        open = try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd")
      } catch {
        throw Self.error(ENOSYS, "cannot list the descriptors to close in a child (/proc/self/fd): \(error)")
      }
      for descriptor in open.compactMap({ Int32($0) }) where descriptor > 2 {
        try check(posix_spawn_file_actions_addclose(&actions, descriptor), "posix_spawn_file_actions_addclose")
      }
    }

    /// Throws an error naming `call` unless `result` is 0.
    private static func check(_ result: Int32, _ call: String) throws {
      guard result != 0 else { return }
      throw error(result, "\(call) failed")
    }

    /// The error number `code` of `what`, with its description.
    private static func error(_ code: Int32, _ what: String) -> POSIXError {
      POSIXError(
        POSIXErrorCode(rawValue: code) ?? .EIO,
        userInfo: [NSLocalizedDescriptionKey: "\(what): \(String(cString: strerror(code)))"])
    }

    /// The exit status of a child that exited, or the number of the signal that ended it.
    private static func exitStatus(_ raw: Int32) -> Int32 {
      let signal = raw & 0x7f
      return signal == 0 ? (raw >> 8) & 0xff : signal
    }
  #elseif os(macOS)
    /// What `Process` takes for a standard stream; `nil` to leave it inherited.
    private static func connection(_ stream: Stream) -> Any? {
      switch stream {
      case .inherited: nil
      case .null: FileHandle.nullDevice
      case .pipe(let pipe): pipe
      case .descriptor(let open): FileHandle(fileDescriptor: open, closeOnDealloc: false)
      }
    }
  #else
    /// The body of every member but `init`, which throws here: no instance exists to call them on.
    private static func unreachable() -> Never {
      preconditionFailure(unavailableReason ?? "no child process on this platform")
    }
  #endif
}
