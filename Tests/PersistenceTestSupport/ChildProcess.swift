public import Foundation

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// A child process that a test starts, signals and waits for: the one place in the tests that
/// knows where `Foundation.Process` exists.
///
/// Processes can be started on macOS and Linux. iOS, tvOS, watchOS and visionOS have no
/// `Process` (apps there cannot start programs): the tests compile for them, and the ones that
/// need a child process are disabled there through ``unavailableReason``. There the initializer
/// throws, so no instance exists and the other members never run.
public final class ChildProcess: Sendable {
  /// What one of the child's standard streams is connected to.
  public enum Stream {
    /// The test process's own stream.
    case inherited
    /// `/dev/null`.
    case null
    /// A pipe; the child's end is closed in the test process once the child runs.
    case pipe(Pipe)
  }

  /// Why child processes cannot be started here, or `nil` where they can.
  public static var unavailableReason: String? {
    #if os(macOS) || os(Linux)
      nil
    #else
      "child processes can only be started on macOS and Linux"
    #endif
  }

  #if os(macOS) || os(Linux)
    private let process: Process
  #endif

  /// Starts `executable` with `arguments`.
  ///
  /// - Throws: When the executable cannot be started, or where ``unavailableReason`` says why
  ///   no process can be.
  public init(
    _ executable: URL, arguments: [String], standardInput: Stream = .inherited,
    standardOutput: Stream = .inherited, standardError: Stream = .inherited
  ) throws {
    #if os(macOS) || os(Linux)
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

  /// The child's process identifier.
  public var processIdentifier: Int32 {
    #if os(macOS) || os(Linux)
      process.processIdentifier
    #else
      Self.unreachable()
    #endif
  }

  /// Sends `signal` (`SIGKILL`, `SIGTERM`…) to the child, by its process identifier.
  public func send(_ signal: Int32) {
    #if os(macOS) || os(Linux)
      _ = kill(process.processIdentifier, signal)
    #else
      Self.unreachable()
    #endif
  }

  /// Waits for the child to exit; returns its exit status, or the number of the signal that
  /// ended it. Blocks the calling thread.
  @discardableResult
  public func waitUntilExit() -> Int32 {
    #if os(macOS) || os(Linux)
      process.waitUntilExit()
      return process.terminationStatus
    #else
      Self.unreachable()
    #endif
  }

  #if os(macOS) || os(Linux)
    /// What `Process` takes for a standard stream; `nil` to leave it inherited.
    private static func connection(_ stream: Stream) -> Any? {
      switch stream {
      case .inherited: nil
      case .null: FileHandle.nullDevice
      case .pipe(let pipe): pipe
      }
    }
  #else
    /// The body of every member but `init`, which throws here: no instance exists to call them on.
    private static func unreachable() -> Never {
      preconditionFailure(unavailableReason ?? "no child process on this platform")
    }
  #endif
}
