import AsyncCache
import Foundation

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// A `PersistenceProbe` child process that a test starts, talks to over its standard streams,
/// and stops or kills.
///
/// The probe prints one line per step it completes (`ready`, `wrote 12`, …), so tests wait for
/// a line instead of sleeping, and kill it at a chosen step. Suites that start probes carry
/// `.enabled(if: Probe.unavailableReason == nil, …)`: only macOS and Linux start processes.
public final class Probe: Sendable {
  private let process: ChildProcess
  private let input: FileHandle
  private let lines: LineReader
  private let blockedWaits = Locked(0)

  /// Why probes cannot be started here, or `nil` where they can (macOS and Linux).
  public static var unavailableReason: String? { ChildProcess.unavailableReason }

  /// The probe's process identifier.
  public var pid: Int32 { process.processIdentifier }

  /// Starts the probe with `arguments` (the first one names its command).
  public init(_ arguments: [String]) throws {
    let stdin = Pipe()
    let stdout = Pipe()
    process = try ChildProcess(
      try Self.executable(), arguments: arguments, standardInput: .pipe(stdin), standardOutput: .pipe(stdout))
    input = stdin.fileHandleForWriting
    lines = LineReader(stdout.fileHandleForReading)
  }

  // The waits read the probe's lines one at a time: a test waits for one thing at a time.
  // Each runs on a thread of its own, and its task's cancellation (the test's time limit) kills
  // the probe, which ends every wait on it.

  /// The next line the probe printed, or `nil` once it closed its output (it exited).
  public func nextLine() async -> String? {
    await offThePool { self.lines.next() }
  }

  /// Reads lines until one starts with `prefix`; returns it, or `nil` if the probe exited first.
  @discardableResult
  public func waitForLine(startingWith prefix: String) async -> String? {
    await offThePool {
      while let line = self.lines.next() {
        if line.hasPrefix(prefix) { return line }
      }
      return nil
    }
  }

  /// Sends a line to the probe's standard input.
  public func send(_ line: String) {
    try? input.write(contentsOf: Data((line + "\n").utf8))
  }

  /// Closes the probe's standard input (probes that hold something release it and exit).
  public func closeInput() {
    try? input.close()
  }

  /// Kills the probe with `SIGKILL` and waits for it to exit.
  public func kill() async {
    sendKill()
    await waitForExit()
  }

  /// Sends `SIGKILL` to the probe and returns at once: from a thread that picks the moment of a
  /// kill. ``waitForExit()`` then waits for the probe to end.
  public func sendKill() {
    process.send(SIGKILL)
  }

  /// Waits for the probe to exit and returns its exit status.
  @discardableResult
  public func waitForExit() async -> Int32 {
    await offThePool { self.process.waitUntilExit() }
  }

  /// Runs `wait`, which blocks until the probe does something, on a thread of its own: the
  /// awaiting test holds none of the cooperative pool's few threads meanwhile. A cancellation
  /// (the test's time limit) kills the probe, which ends every wait on it: its output closes and
  /// it exits.
  private func offThePool<Result: Sendable>(_ wait: @escaping @Sendable () -> Result) async -> Result {
    await withTaskCancellationHandler {
      await withCheckedContinuation { continuation in
        let blocked = blockedWaits
        let waitAndResume: @Sendable () -> Void = {
          blocked.withLock { $0 += 1 }
          let result = wait()
          blocked.withLock { $0 -= 1 }
          continuation.resume(returning: result)
        }
        // With no thread to be had, on this one: it blocks, but it ends.
        if DetachedThread(label: "probe wait", body: waitAndResume).start() != 0 { waitAndResume() }
      }
    } onCancel: {
      process.send(SIGKILL)
    }
  }

  /// How many waits are blocked on the probe now, on their threads.
  public var waitsInProgress: Int { blockedWaits.withLock { $0 } }

  /// The `PersistenceProbe` executable, which SwiftPM builds into the same products directory as
  /// the tests.
  static func executable() throws -> URL {
    let directories = searchDirectories(
      testBundle: Bundle(for: Probe.self).bundleURL, mainBundle: Bundle.main.bundleURL,
      firstArgument: CommandLine.arguments.first ?? "")
    guard let probe = executable(in: directories) else {
      throw CocoaError(
        .fileNoSuchFile,
        userInfo: [
          NSLocalizedDescriptionKey:
            "PersistenceProbe was not built in any of \(directories.map(\.path).joined(separator: ", "))"
        ])
    }
    return probe
  }

  /// Where the probe may be, in order.
  ///
  /// On Linux the tests run as an executable in the products directory: `Bundle.main` and
  /// `argv[0]` point there. On macOS `swift test` runs them inside `xctest` or
  /// `swiftpm-testing-helper` from the toolchain, so those point into the toolchain, and the
  /// products directory is the one that holds the test bundle (`….xctest`) with this code: that
  /// comes first. The main bundle's parents follow, for layouts that nest it deeper.
  static func searchDirectories(testBundle: URL, mainBundle: URL, firstArgument: String) -> [URL] {
    var directories = [testBundle.deletingLastPathComponent()]
    var directory = mainBundle
    for _ in 0..<6 {
      directories.append(directory)
      directory.deleteLastPathComponent()
    }
    directories.append(URL(fileURLWithPath: firstArgument).deletingLastPathComponent())
    return directories
  }

  /// The first `PersistenceProbe` executable in `directories`.
  static func executable(in directories: [URL]) -> URL? {
    directories.lazy.map { $0.appendingPathComponent("PersistenceProbe") }.first {
      FileManager.default.isExecutableFile(atPath: $0.path)
    }
  }
}

/// Splits a pipe's bytes into lines.
final class LineReader: Sendable {
  private let handle: FileHandle
  private let buffer = LockedBuffer()

  init(_ handle: FileHandle) { self.handle = handle }

  func next() -> String? {
    while true {
      if let line = buffer.takeLine() { return line }
      let chunk = handle.availableData
      if chunk.isEmpty { return buffer.takeRest() }
      buffer.append(chunk)
    }
  }
}

/// The bytes read but not yet returned as lines.
// SAFETY: `bytes` is only touched while `lock` is held.
final class LockedBuffer: @unchecked Sendable {
  private let lock = NSLock()
  private var bytes: [UInt8] = []

  func append(_ data: Data) {
    lock.withLock { bytes.append(contentsOf: data) }
  }

  func takeLine() -> String? {
    lock.withLock {
      guard let newline = bytes.firstIndex(of: UInt8(ascii: "\n")) else { return nil }
      let line = String(decoding: bytes[..<newline], as: UTF8.self)
      bytes.removeSubrange(...newline)
      return line
    }
  }

  func takeRest() -> String? {
    lock.withLock {
      guard !bytes.isEmpty else { return nil }
      defer { bytes.removeAll() }
      return String(decoding: bytes, as: UTF8.self)
    }
  }
}
