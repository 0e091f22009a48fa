import AsyncCache
import Dispatch
import Foundation
import PersistenceTestSupport
import Testing

#if canImport(Glibc)
  import Glibc
#elseif canImport(Darwin)
  import Darwin
#endif

/// The child processes the tests start (probes, redis-server, redis-cli): what they inherit, also
/// when many start at once, how their end is reported, and what dropping one does.
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

  /// Whether a child's descriptor that links to `target` is one the program opens itself while
  /// it starts: the dynamic loader's cache, a shared library, or the C library's locale data
  /// (`cat` sets its locale first thing; CI saw one hold `/usr/lib/locale/C.utf8/LC_COLLATE`).
  static func isTheLoaders(_ target: String) -> Bool {
    target == "/etc/ld.so.cache"
      || (target.hasPrefix("/") && URL(fileURLWithPath: target).lastPathComponent.contains(".so"))
      || target.hasPrefix("/usr/lib/locale/") || target.hasPrefix("/usr/share/locale/")
      // The locale's aliases, which setlocale reads (a run under ThreadSanitizer saw a `cat`
      // hold it for that moment).
      || target == "/etc/locale.alias"
      // glibc's character-set conversion modules, which a program's locale set-up opens (CI saw
      // a `cat` hold /usr/lib/x86_64-linux-gnu/gconv/gconv-modules.cache for that moment).
      || target.contains("/gconv/")
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

  @Test("outputAndExit returns what the child printed and its status, waiting on a thread of its own")
  func outputAndExit() async throws {
    let output = Pipe()
    let child = try ChildProcess(
      URL(fileURLWithPath: "/bin/sh"), arguments: ["-c", "echo printed; exit 3"], standardInput: .null,
      standardOutput: .pipe(output))
    let (printed, status) = await child.outputAndExit(reading: output.fileHandleForReading)
    #expect(String(decoding: printed, as: UTF8.self) == "printed\n")
    #expect(status == 3)
  }

  @Test("a cancelled outputAndExit kills a child that would never end, and returns", .timeLimit(.minutes(1)))
  func outputAndExitCancelled() async throws {
    let output = Pipe()
    let input = Pipe()
    defer { try? input.fileHandleForWriting.close() }
    // `cat` waits for input that never comes: only the cancellation ends it.
    let child = try ChildProcess(
      URL(fileURLWithPath: "/bin/sh"), arguments: ["-c", "echo started; exec cat"], standardInput: .pipe(input),
      standardOutput: .pipe(output))
    let waiting = Task { await child.outputAndExit(reading: output.fileHandleForReading) }
    waiting.cancel()
    let (printed, status) = await waiting.value
    #expect(status == SIGKILL)
    #expect(String(decoding: printed, as: UTF8.self).hasPrefix("started") || printed.isEmpty)
  }

  @Test("a child whose object is dropped is killed and reaped, so none outlives its test")
  func droppedChildIsKilled() throws {
    let input = Pipe()
    defer { try? input.fileHandleForWriting.close() }
    var cat: ChildProcess? = try ChildProcess(
      URL(fileURLWithPath: "/bin/cat"), arguments: [], standardInput: .pipe(input), standardOutput: .null)
    let pid = cat?.processIdentifier ?? 0
    #expect(kill(pid, 0) == 0)
    cat = nil
    // Reaped, not a zombie: the pid names no process any more.
    #expect(kill(pid, 0) == -1 && errno == ESRCH)
  }

  @Test(
    "a child dies with the test process that started it, even one killed without a chance to clean up",
    .enabled(if: ChildProcess.diesWithItsStarter), .timeLimit(.minutes(3)))
  func childrenDieWithTheTestProcess() async throws {
    // The probe starts a `sleep` whose output is the probe's; killed, the probe leaves the
    // `sleep` the only holder of that pipe, so reading it to the end waits for it to die.
    let probe = try Probe(["start-child"])
    let started = try #require(await probe.waitForLine(startingWith: "started "))
    let sleep = try #require(Int32(started.dropFirst("started ".count)))
    await probe.kill()
    let outlived = Locked(false)
    await withTaskCancellationHandler {
      // Reads to the end, which comes when no process holds the pipe.
      while await probe.nextLine() != nil {}
    } onCancel: {
      // The time limit: the `sleep` outlived the probe. Kill it so that the read ends.
      outlived.withLock { $0 = true }
      _ = kill(sleep, SIGKILL)
    }
    #expect(!outlived.withLock { $0 }, "the sleep (pid \(sleep)) outlived the probe that started it")
  }

  @Test(
    "a watchdog that died does not take the test process with it: children start and end as before",
    .enabled(if: ChildProcess.diesWithItsStarter))
  func deadWatchdogIsHarmless() async throws {
    let probe = try Probe(["outlive-watchdog"])
    #expect(await probe.waitForLine(startingWith: "survived") == "survived")
  }

  @Test(
    "a wait for a line the probe never prints ends when its task is cancelled: the probe is killed",
    .timeLimit(.minutes(1)))
  func probeWaitsEndWithTheirTask() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    // Prints `locked`, then nothing until its input closes, which the test never does.
    let probe = try Probe(["sqlite-hold-write-lock", folder.appending("held.sqlite").path])
    #expect(await probe.waitForLine(startingWith: "locked") == "locked")
    let waiting = Task { await probe.waitForLine(startingWith: "released") }
    // Once the wait blocks its thread on the probe's output…
    while probe.waitsInProgress == 0, !Task.isCancelled { await Task.yield() }
    // …a cancellation, as a test's time limit makes, ends it with no line.
    waiting.cancel()
    // Should it not, this test's own time limit fails it, and kills the probe so that the run
    // goes on.
    let outlived = Locked(false)
    let line = await withTaskCancellationHandler {
      await waiting.value
    } onCancel: {
      outlived.withLock { $0 = true }
      probe.sendKill()
    }
    #expect(!outlived.withLock { $0 }, "the cancelled wait did not end")
    #expect(line == nil)
    #expect(await probe.waitForExit() == SIGKILL)
    #expect(probe.waitsInProgress == 0)
  }

  @Test(
    "children started at the same moment hold only their own standard streams, and each ends when its input closes",
    .enabled(if: FileManager.default.fileExists(atPath: "/proc/self/fd")))
  func concurrentChildrenHoldNothingOfEachOther() throws {
    // Started from several threads at once (not tasks: starting one blocks its thread), each
    // while the others' pipes are open in this process: a child that inherited another's pipe
    // would keep it open, and `Foundation.Process` missed exits that way.
    let inputs = (0..<16).map { _ in Pipe() }
    let cats = Locked<[Int: ChildProcess]>([:])
    let failures = Locked<[String]>([])
    DispatchQueue.concurrentPerform(iterations: inputs.count) { index in
      do {
        let cat = try ChildProcess(
          URL(fileURLWithPath: "/bin/cat"), arguments: [], standardInput: .pipe(inputs[index]), standardOutput: .null)
        cats.withLock { $0[index] = cat }
      } catch {
        failures.withLock { $0.append("cat \(index): \(error)") }
      }
    }
    #expect(failures.withLock { $0 }.isEmpty)
    let started = cats.withLock { $0 }
    // `posix_spawn` returns once the child runs the program, its descriptors closed. The
    // program's loader may still be opening its libraries then (CI saw a `cat` hold descriptor
    // 3 for that moment), or the program its locale: files of the system, nothing of this
    // process's.
    var heldOnlyTheirOwn = true
    for (index, cat) in started.sorted(by: { $0.key < $1.key }) {
      let directory = "/proc/\(cat.processIdentifier)/fd"
      let inherited = try FileManager.default.contentsOfDirectory(atPath: directory)
        .filter { !["0", "1", "2"].contains($0) }
        // One closed since it was listed is gone: not held.
        .compactMap { try? FileManager.default.destinationOfSymbolicLink(atPath: "\(directory)/\($0)") }
        .filter { !Self.isTheLoaders($0) }
      heldOnlyTheirOwn = heldOnlyTheirOwn && inherited.isEmpty
      #expect(inherited.isEmpty, "cat \(index) held \(inherited.sorted())")
    }
    // Otherwise a `cat` would wait for an input another holds open: dropped, they are killed.
    guard heldOnlyTheirOwn else { return }
    // Each `cat` ends when its own input closes: no other child holds that pipe open.
    for input in inputs { try input.fileHandleForWriting.close() }
    #expect(started.values.map { $0.waitUntilExit() } == Array(repeating: 0, count: started.count))
  }
}
