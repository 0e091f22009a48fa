import Foundation
import Testing

@testable import AsyncCache

/// The threads that run socket loops ask the scheduler for short slices, so that they run soon
/// after they wake even while the cooperative pool computes.
@Suite(.timeLimit(.minutes(3))) struct DetachedThreadTests {
  /// The slice the scheduler gives the thread that runs `reactsQuickly`'s body, in nanoseconds,
  /// read from `/proc/thread-self/sched` (`nil` where the kernel does not tell: not Linux, or a
  /// kernel before EEVDF); and whether the scheduler agrees to short slices there at all (a
  /// seccomp filter may refuse the call).
  private static func slice(reactsQuickly: Bool) async -> (slice: Int?, allowed: Bool) {
    await withCheckedContinuation { (continuation: CheckedContinuation<(slice: Int?, allowed: Bool), Never>) in
      let thread = DetachedThread(label: "slice", reactsQuickly: reactsQuickly) {
        let text = (try? String(contentsOfFile: "/proc/thread-self/sched", encoding: .utf8)) ?? ""
        let line = text.split(separator: "\n").first { $0.hasPrefix("se.slice") }
        let slice = line.flatMap { Int($0.split(separator: ":").last!.trimmingCharacters(in: .whitespaces)) }
        // Asked again once read, to learn whether the call is allowed.
        continuation.resume(returning: (slice, reactsQuickly && DetachedThread.askForShortSlices()))
      }
      #expect(thread.start() == 0)
    }
  }

  /// The running kernel's version, as (major, minor); `nil` off Linux.
  private static var kernelVersion: (Int, Int)? {
    #if os(Linux)
      var name = utsname()
      guard uname(&name) == 0 else { return nil }
      let release = withUnsafeBytes(of: &name.release) { String(decoding: $0.prefix { $0 != 0 }, as: UTF8.self) }
      let parts = release.split(separator: ".").prefix(2).compactMap { Int($0.prefix { $0.isNumber }) }
      return parts.count == 2 ? (parts[0], parts[1]) : nil
    #else
      return nil
    #endif
  }

  @Test("a thread that reacts quickly asks for 100 µs slices; another keeps the default")
  func shortSlices() async throws {
    let quick = await Self.slice(reactsQuickly: true)
    let plain = await Self.slice(reactsQuickly: false)
    // Linux 6.12 and later take a slice from `sched_setattr` for the normal policy (this
    // project's CI runs one) where no filter refuses the call; elsewhere the thread keeps its
    // default, which is all it promises.
    guard let version = Self.kernelVersion, version >= (6, 12), quick.allowed else { return }
    #expect(quick.slice == 100_000)
    #expect(plain.slice != nil && plain.slice != 100_000)
  }

  @Test(
    "a thread bears its label, cut to whole characters within what the system keeps",
    arguments: [
      ("AsyncCache time", "AsyncCache time"), ("AsyncCache.DiskLayer", "AsyncCache.Disk"),
      ("Redis 127.0.0.1:6379", "Redis 127.0.0.1"), ("ключ-кэша", "ключ-кэш"), ("", ""),
    ])
  func bearsItsLabel(label: String, linuxName: String) async throws {
    #expect(DetachedThread.name(label, bytes: 15) == linuxName)
    #expect(DetachedThread.name(label, bytes: 63) == label)
    #if os(Linux)
      let name = await withCheckedContinuation { (continuation: CheckedContinuation<String?, Never>) in
        let thread = DetachedThread(label: label) {
          let comm = try? String(contentsOfFile: "/proc/thread-self/comm", encoding: .utf8)
          continuation.resume(returning: comm.map { String($0.dropLast()) })
        }
        #expect(thread.start() == 0)
      }
      // An empty label leaves the name the thread was born with (its process's); any other is
      // the label.
      #expect(label.isEmpty ? name?.isEmpty == false : name == linuxName)
    #endif
  }

  @Test("short slices keep the thread's policy: a batch thread stays a batch thread")
  func keepsPolicy() async throws {
    #if os(Linux)
      let batch: Int32 = 3  // SCHED_BATCH
      let policies = await withCheckedContinuation { (continuation: CheckedContinuation<(Int32, Int32), Never>) in
        let thread = DetachedThread(label: "batch") {
          var parameters = sched_param(sched_priority: 0)
          let before = sched_setscheduler(0, batch, &parameters) == 0 ? sched_getscheduler(0) : -1
          _ = DetachedThread.askForShortSlices()
          continuation.resume(returning: (before, sched_getscheduler(0)))
        }
        #expect(thread.start() == 0)
      }
      #expect(policies.0 == batch)
      #expect(policies.1 == batch)
    #endif
  }
}
