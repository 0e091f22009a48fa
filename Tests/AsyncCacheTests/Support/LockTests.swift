import Dispatch
import Foundation
import Synchronization
import Testing

@testable import AsyncCache

/// The lock behind every segment of a memory layer and every `Locked` state: on Linux a futex
/// lock of this module (see `Concurrency/Lock.swift`), elsewhere the platform's.
///
/// A lost wake-up leaves a thread asleep for ever: the threads run on a dispatch group that is
/// waited for with a deadline, so that such a bug fails these tests instead of hanging them.
@Suite(.timeLimit(.minutes(3))) struct LockTests {
  /// How long the threads of a test may take: far more than they need, even under
  /// ThreadSanitizer.
  static let deadline = DispatchTimeInterval.seconds(30)

  @Test("threads that increment under the lock at once lose no increment")
  func mutualExclusion() {
    let counter = Locked(0)
    let threads = 4
    let increments = 20_000
    let group = DispatchGroup()
    for _ in 0..<threads {
      DispatchQueue.global().async(group: group) {
        for _ in 0..<increments {
          counter.withLock { $0 += 1 }
        }
      }
    }
    guard group.wait(timeout: .now() + Self.deadline) == .success else {
      Issue.record("the threads did not finish: a lost wake-up leaves a waiter asleep")
      return
    }
    #expect(counter.withLock { $0 } == threads * increments)
  }

  @Test("a segment's lock guards its state against threads that write and read at once")
  func segmentsUnderContention() throws {
    let memory = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 64, segmentCount: 1))
    DispatchQueue.concurrentPerform(iterations: 4) { thread in
      for step in 0..<10_000 {
        let key = (step &* 7 &+ thread) % 100
        if step % 3 == 0 {
          try? memory.insert(key, for: key)
        } else if let value = memory.value(for: key) {
          precondition(value == key, "key \(key) returned \(value)")
        }
      }
    }
    #expect(memory.invariantViolations.isEmpty)
    #expect(memory.count <= 64)
  }

  #if os(Linux) || os(Android)
    @Test("a thread that waits on a held lock marks it contended, and the unlock lets it in")
    func contendedLockWakesTheWaiter() {
      let counter = Locked(0)
      let word = counter.primitive
      counter.primitive.lock()
      #expect(word.pointee.load(ordering: .relaxed) == 1, "held without waiters")
      let done = DispatchSemaphore(value: 0)
      let waiter = Thread {
        counter.withLock { $0 += 1 }
        done.signal()
      }
      waiter.start()
      // The waiter sets the word to 2 before it sleeps on it: wait for that state, not for time.
      while word.pointee.load(ordering: .relaxed) != 2 { sched_yield() }
      #expect(counter.state == 0, "the waiter did not get in while the lock was held")
      counter.primitive.unlock()
      guard done.wait(timeout: .now() + Self.deadline) == .success else {
        Issue.record("the unlock did not wake the waiter")
        return
      }
      #expect(counter.withLock { $0 } == 1)
      #expect(word.pointee.load(ordering: .relaxed) == 0, "unlocked once everyone left")
    }
  #endif
}
