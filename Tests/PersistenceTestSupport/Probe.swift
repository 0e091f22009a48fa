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
/// a line instead of sleeping, and kill it at a chosen step.
public final class Probe: Sendable {
  private let process: Process
  private let input: FileHandle
  private let lines: LineReader

  /// The probe's process identifier.
  public var pid: Int32 { process.processIdentifier }

  /// Starts the probe with `arguments` (the first one names its command).
  public init(_ arguments: [String]) throws {
    process = Process()
    process.executableURL = try Self.executable()
    process.arguments = arguments
    let stdin = Pipe()
    let stdout = Pipe()
    process.standardInput = stdin
    process.standardOutput = stdout
    process.standardError = FileHandle.standardError
    try process.run()
    input = stdin.fileHandleForWriting
    lines = LineReader(stdout.fileHandleForReading)
  }

  /// The next line the probe printed, or `nil` once it closed its output (it exited).
  ///
  /// Blocks the calling thread: call it from a test, not from library code.
  public func nextLine() -> String? {
    lines.next()
  }

  /// Reads lines until one starts with `prefix`; returns it, or `nil` if the probe exited first.
  @discardableResult
  public func waitForLine(startingWith prefix: String) -> String? {
    while let line = nextLine() {
      if line.hasPrefix(prefix) { return line }
    }
    return nil
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
  public func kill() {
    _ = Foundation.kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
  }

  /// Waits for the probe to exit and returns its exit status.
  @discardableResult
  public func waitForExit() -> Int32 {
    process.waitUntilExit()
    return process.terminationStatus
  }

  /// The `PersistenceProbe` executable, built beside the test bundle.
  static func executable() throws -> URL {
    var directory = Bundle.main.bundleURL
    let manager = FileManager.default
    for _ in 0..<6 {
      let candidate = directory.appendingPathComponent("PersistenceProbe")
      if manager.isExecutableFile(atPath: candidate.path) { return candidate }
      directory.deleteLastPathComponent()
    }
    let argumentDirectory = URL(fileURLWithPath: CommandLine.arguments[0]).deletingLastPathComponent()
    let candidate = argumentDirectory.appendingPathComponent("PersistenceProbe")
    if manager.isExecutableFile(atPath: candidate.path) { return candidate }
    throw CocoaError(
      .fileNoSuchFile,
      userInfo: [NSLocalizedDescriptionKey: "PersistenceProbe was not built beside \(Bundle.main.bundleURL.path)"])
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
