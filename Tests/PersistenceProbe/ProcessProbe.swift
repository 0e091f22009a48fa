import Foundation
import PersistenceTestSupport

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// The probe's commands about processes: the test processes' watchdog, and a child for the
/// tests of `ChildProcess` itself.
enum ProcessProbe {
  static let commands: [String: @Sendable ([String]) async -> Int32] = [
    "watchdog": watchdog,
    "start-child": startChild,
    "outlive-watchdog": outliveWatchdog,
  ]

  /// `outlive-watchdog`: starts a child (and so the watchdog), kills the watchdog, starts and
  /// drops another child (its announcement goes to a watchdog that is gone), then prints
  /// `survived`: a dead watchdog must not take the process with it.
  @Sendable static func outliveWatchdog(_ arguments: [String]) async -> Int32 {
    do {
      let first = try ChildProcess(URL(fileURLWithPath: "/bin/true"), arguments: [], standardOutput: .null)
      first.waitUntilExit()
      guard let watchdog = ChildProcess.watchdogProcessIdentifier else {
        FileHandle.standardError.write(Data("outlive-watchdog: no watchdog\n".utf8))
        return 1
      }
      kill(watchdog, SIGKILL)
      // Reaped by no one here (it is the watchdog's own object's): wait for its socket to close.
      var status: Int32 = 0
      _ = waitpid(watchdog, &status, 0)
      let second = try ChildProcess(URL(fileURLWithPath: "/bin/true"), arguments: [], standardOutput: .null)
      second.waitUntilExit()
      emit("survived")
      return 0
    } catch {
      FileHandle.standardError.write(Data("outlive-watchdog: \(error)\n".utf8))
      return 1
    }
  }

  /// `watchdog`: reads `+<pid>` (a child started) and `-<pid>` (a child about to be reaped)
  /// lines from its standard input, whose writing end only the test process holds; when the
  /// input ends (the test process ended, however it ended), kills the children still running
  /// and exits. Interrupts and terminations are ignored until then: a Ctrl-C reaches the whole
  /// process group, and the watchdog must outlive the test process to do its work.
  @Sendable static func watchdog(_ arguments: [String]) async -> Int32 {
    signal(SIGINT, SIG_IGN)
    signal(SIGTERM, SIG_IGN)
    signal(SIGHUP, SIG_IGN)
    var children = Set<Int32>()
    while let line = readLine() {
      guard let pid = Int32(line.dropFirst()), pid > 0 else { continue }
      switch line.first {
      case "+": children.insert(pid)
      case "-": children.remove(pid)
      default: continue
      }
    }
    for pid in children { kill(pid, SIGKILL) }
    return 0
  }

  /// `start-child`: starts `/bin/sleep 600` as a `ChildProcess`, its standard output the
  /// probe's own; prints `started <pid>`, then waits to be killed. A test kills the probe and
  /// reads its output to the end: only the `sleep` holds it then, so the end comes when the
  /// `sleep` dies with the probe.
  @Sendable static func startChild(_ arguments: [String]) async -> Int32 {
    do {
      let child = try ChildProcess(
        URL(fileURLWithPath: "/bin/sleep"), arguments: ["600"], standardInput: .null, standardOutput: .inherited)
      emit("started \(child.processIdentifier)")
      while true { pause() }
    } catch {
      FileHandle.standardError.write(Data("start-child: \(error)\n".utf8))
      return 1
    }
  }
}
