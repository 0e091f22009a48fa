import Foundation
import PersistenceTestSupport
import Testing

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// The child processes the tests start (probes, redis-server, redis-cli): what they inherit, how
/// their end is reported, and that an exit is seen however many start at once.
@Suite("Child processes", .enabled(if: ChildProcess.unavailableReason == nil))
struct ChildProcessTests {
  /// The lines a child printed on its standard output, and its exit status.
  static func run(_ executable: String, _ arguments: [String]) throws -> (lines: [String], status: Int32) {
    let output = Pipe()
    let process = try ChildProcess(
      URL(fileURLWithPath: executable), arguments: arguments, standardInput: .null, standardOutput: .pipe(output))
    let printed = output.fileHandleForReading.readDataToEndOfFile()
    let status = process.waitUntilExit()
    return (String(decoding: printed, as: UTF8.self).split(separator: "\n").map(String.init), status)
  }

  @Test(
    "a child holds its standard streams and nothing else of the test process",
    .enabled(if: FileManager.default.fileExists(atPath: "/proc/self/fd")))
  func inheritsOnlyItsStandardStreams() throws {
    // Descriptors that a child would inherit unless it closes them: a pipe's ends are not
    // close-on-exec.
    let unrelated = Pipe()
    defer {
      try? unrelated.fileHandleForReading.close()
      try? unrelated.fileHandleForWriting.close()
    }
    #expect(unrelated.fileHandleForWriting.fileDescriptor > 2)

    let (lines, status) = try Self.run("/bin/ls", ["-1", "/proc/self/fd"])
    #expect(status == 0)
    // 0, 1 and 2, and the directory `ls` itself opened to list them.
    #expect(Set(lines).isSubset(of: ["0", "1", "2", "3"]), "the child held \(lines)")
    #expect(lines.contains("1"))
  }

  @Test("the exit status is reported, or the number of the signal that ended the child, as often as asked")
  func exitStatusAndSignal() throws {
    #expect(try Self.run("/bin/sh", ["-c", "exit 3"]).status == 3)

    let input = Pipe()
    let cat = try ChildProcess(URL(fileURLWithPath: "/bin/cat"), arguments: [], standardInput: .pipe(input))
    cat.send(SIGKILL)
    #expect(cat.waitUntilExit() == SIGKILL)
    #expect(cat.waitUntilExit() == SIGKILL)
    // Reaped: a signal now goes nowhere (its pid may belong to another process already).
    cat.send(SIGKILL)
    try? input.fileHandleForWriting.close()
  }

  @Test("a child's exit is seen while children started at the same moment live on", .timeLimit(.minutes(1)))
  func exitSeenBesideLongLivedChildren() async throws {
    // Long-lived children (each `cat` lives until its input closes) and short ones (`true`),
    // started from many tasks at once: the race that hid exits from `Foundation.Process`.
    let inputs = (0..<12).map { _ in Pipe() }
    let (cats, statuses) = try await withThrowingTaskGroup(of: (ChildProcess?, Int32?).self) { group in
      for index in 0..<24 {
        group.addTask {
          guard index.isMultiple(of: 2) else {
            return (nil, try ChildProcess(URL(fileURLWithPath: "/bin/true"), arguments: []).waitUntilExit())
          }
          let cat = try ChildProcess(
            URL(fileURLWithPath: "/bin/cat"), arguments: [], standardInput: .pipe(inputs[index / 2]),
            standardOutput: .null)
          return (cat, nil)
        }
      }
      return try await group.reduce(into: ([ChildProcess](), [Int32]())) { result, started in
        if let cat = started.0 { result.0.append(cat) }
        if let status = started.1 { result.1.append(status) }
      }
    }
    #expect(statuses == Array(repeating: 0, count: 12))
    // Each `cat` ends when its own input closes: no other child holds that pipe open.
    for input in inputs { try input.fileHandleForWriting.close() }
    #expect(cats.map { $0.waitUntilExit() } == Array(repeating: 0, count: 12))
  }
}
