import AsyncCache
import Foundation
import PersistenceTestSupport
import Synchronization
import Testing

@testable import AsyncCacheRedis

#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#endif

/// A `redis-server` of the test's own: started on a free loopback port with no persistence,
/// stopped (or killed) by its pid.
///
/// Tests that need one carry ``RedisServer/required``: without `redis-server` on the `PATH`
/// they are skipped with a message saying how to install it, except in CI (`CI=true`), where
/// they run and fail.
final class RedisServer: Sendable {
  /// The port the server listens on, on 127.0.0.1.
  let port: Int
  /// The server's process id.
  let pid: Int32
  private let process: Locked<ChildProcess?>
  private let output: Output

  /// The condition that skips a suite without `redis-server`, outside CI.
  static let isInstalled = executable != nil
  /// Why no server can be started on this platform at all (only macOS and Linux start processes).
  static let unavailableReason = ChildProcess.unavailableReason
  static let isCI = ProcessInfo.processInfo.environment["CI"] == "true"
  static let skipMessage =
    "redis-server is not installed: install it (Debian/Ubuntu: apt-get install redis-server; macOS: brew install "
    + "redis) to run the Redis tests"

  /// `redis-server` on the `PATH`, or in the usual places.
  static let executable: String? = {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    let directories = path.split(separator: ":").map(String.init) + ["/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"]
    return directories.map { "\($0)/redis-server" }.first { FileManager.default.isExecutableFile(atPath: $0) }
  }()

  private init(port: Int, process: ChildProcess, output: Output) {
    self.port = port
    self.pid = process.processIdentifier
    self.process = Locked(process)
    self.output = output
  }

  deinit {
    stop()
  }

  /// The endpoint to configure a layer with.
  var endpoint: RedisEndpoint { RedisEndpoint(host: "127.0.0.1", port: port) }

  /// Starts a server with `arguments` added to the defaults (`--save "" --appendonly no`), on
  /// `port` or a free one, and returns once it accepts connections (once its log says
  /// `readyWhen`).
  static func start(
    _ arguments: [String] = [], port: Int? = nil, readyWhen: String = "Ready to accept connections"
  ) async throws -> RedisServer {
    guard let executable else {
      throw ServerError("redis-server is required here (CI=true) but is not installed. \(skipMessage)")
    }
    var lastError: (any Error)?
    for _ in 0..<5 {
      let chosen = try port ?? freePort()
      do {
        return try await launch(executable, port: chosen, arguments: arguments, readyWhen: readyWhen)
      } catch {
        lastError = error
        // A port chosen here may have been taken by another process in between: try another.
        if port != nil { break }
      }
    }
    throw lastError ?? ServerError("redis-server did not start")
  }

  private static func launch(
    _ executable: String, port: Int, arguments: [String], readyWhen: String
  ) async throws -> RedisServer {
    let pipe = Pipe()
    let process = try ChildProcess(
      URL(fileURLWithPath: executable),
      arguments: [
        "--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
        "--logfile", "", "--loglevel", "notice", "--protected-mode", "no",
      ] + arguments,
      standardInput: .null, standardOutput: .pipe(pipe), standardError: .pipe(pipe))
    let output = Output()
    let ready: Bool = await withCheckedContinuation { continuation in
      // Reads the server's log until it exits, so that it never blocks on a full pipe; says
      // when the server is ready, or that it exited first.
      let thread = DetachedThread(label: "redis-server log") {
        let handle = pipe.fileHandleForReading
        var reported = false
        while true {
          let data = handle.availableData
          if data.isEmpty { break }
          output.append(data)
          if !reported && output.contains(readyWhen) {
            reported = true
            continuation.resume(returning: true)
          }
        }
        if !reported { continuation.resume(returning: false) }
      }
      if thread.start() != 0 { continuation.resume(returning: false) }
    }
    guard ready else {
      process.waitUntilExit()
      throw ServerError("redis-server on port \(port) exited before it was ready:\n\(output.text)")
    }
    return RedisServer(port: port, process: process, output: output)
  }

  /// Stops the server with `SIGKILL` (no chance to say goodbye) or `SIGTERM`, by its pid, and
  /// waits for it to exit.
  func stop(killing: Bool = true) {
    guard
      let process = self.process.withLock({ process in
        defer { process = nil }
        return process
      })
    else {
      return
    }
    process.send(killing ? SIGKILL : SIGTERM)
    // A frozen server (``freeze()``) acts on SIGTERM only once it runs again.
    process.send(SIGCONT)
    process.waitUntilExit()
  }

  /// Freezes the server (`SIGSTOP`): it keeps accepting connections and answers nothing until
  /// ``thaw()``.
  func freeze() {
    process.withLock { $0?.send(SIGSTOP) }
  }

  /// Lets a frozen server go on (`SIGCONT`).
  func thaw() {
    process.withLock { $0?.send(SIGCONT) }
  }

  /// The server's log so far.
  var log: String { output.text }

  /// Sends one command on a connection of its own and returns the reply (error replies too).
  func command(_ words: String...) async throws -> RESPValue {
    try await Self.command(RESPCommand(words.map { Array($0.utf8) }), port: port)
  }

  static func command(_ command: RESPCommand, port: Int) async throws -> RESPValue {
    let connection = try await RedisConnection.open(
      host: "127.0.0.1", port: port, connectTimeout: .seconds(5), operationTimeout: .seconds(10), onClose: { _ in })
    defer { connection.close(with: RedisError(code: .shutDown, message: "done")) }
    return try await connection.send(command)
  }

  /// Runs `redis-cli -p <port> <words>` (the one installed beside `redis-server`), as a person
  /// or a script would, and returns what it printed, trimmed.
  func cli(_ words: String...) async throws -> String {
    guard let serverPath = Self.executable else { throw ServerError(Self.skipMessage) }
    let cli = URL(fileURLWithPath: serverPath).deletingLastPathComponent().appendingPathComponent("redis-cli")
    let output = Pipe()
    let process = try ChildProcess(
      cli, arguments: ["-h", "127.0.0.1", "-p", String(port)] + words,
      standardInput: .null, standardOutput: .pipe(output), standardError: .pipe(output))
    let (printed, status) = await process.outputAndExit(reading: output.fileHandleForReading)
    let text = String(decoding: printed, as: UTF8.self).trimmingCharacters(in: .whitespacesAndNewlines)
    guard status == 0 else {
      throw ServerError("redis-cli \(words.joined(separator: " ")) failed (\(status)): \(text)")
    }
    return text
  }

  /// A port that was free a moment ago.
  static func freePort() throws -> Int {
    try bindable(0)
  }

  /// Binds `port` on 127.0.0.1 (any free one for 0) and returns the port bound, then lets it go.
  static func bindable(_ port: Int) throws -> Int {
    #if canImport(Darwin)
      let fd = socket(AF_INET, SOCK_STREAM, 0)
    #else
      let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
    #endif
    guard fd >= 0 else { throw ServerError("socket() failed") }
    defer { close(fd) }
    var address = sockaddr_in()
    address.sin_family = sa_family_t(AF_INET)
    address.sin_port = UInt16(port).bigEndian
    address.sin_addr.s_addr = inet_addr("127.0.0.1")
    var length = socklen_t(MemoryLayout<sockaddr_in>.size)
    let bound = withUnsafeMutablePointer(to: &address) {
      $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { pointer -> Bool in
        bind(fd, pointer, length) == 0 && getsockname(fd, pointer, &length) == 0
      }
    }
    guard bound else { throw ServerError("cannot bind loopback port \(port): errno \(errno)") }
    return Int(UInt16(bigEndian: address.sin_port))
  }

  struct ServerError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
  }

  private final class Output: Sendable {
    private let bytes = Locked(Data())

    func append(_ data: Data) { bytes.withLock { $0.append(data) } }
    func contains(_ text: String) -> Bool { bytes.withLock { $0.range(of: Data(text.utf8)) != nil } }
    var text: String { bytes.withLock { String(decoding: $0, as: UTF8.self) } }
  }
}

extension Trait where Self == ConditionTrait {
  /// Runs the test where `redis-server` is installed, or in CI, where its absence fails it;
  /// never where no process can be started.
  static var redisServer: Self {
    .enabled(
      if: RedisServer.unavailableReason == nil && (RedisServer.isInstalled || RedisServer.isCI),
      Comment(rawValue: RedisServer.unavailableReason ?? RedisServer.skipMessage))
  }
}
