import Synchronization
import Testing

@testable import AsyncCache

#if canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Darwin)
  import Darwin
#endif

/// The time memory hits read with the `WallClock`: published by a thread, read exactly near an
/// expiry. These publishers tick by hand (no thread), so every step is the test's.
@Suite struct PublishedWallTimeTests {
  /// A published time long past, so that the exact time can never be mistaken for it.
  let published: Int64 = 1_000_000_000_000_000_000

  /// The exact wall time now, in nanoseconds since 1970.
  func exactNow() -> Int64 { WallClock().now.nanosecondsSince1970 }

  /// Whether `time`'s publisher runs.
  func isRunning(_ time: PublishedWallTime) -> Bool { time.running.load(ordering: .relaxed) }

  /// A publisher that runs and has published ``published``, with no read since.
  func runningPublisher() -> PublishedWallTime {
    let time = PublishedWallTime(startThread: nil)
    _ = time.time(checking: .max)
    #expect(time.tick(now: published))
    return time
  }

  @Test func theFirstReadTakesTheExactTimeAndStartsThePublisher() {
    let time = PublishedWallTime(startThread: nil)
    #expect(time.published.load(ordering: .relaxed) == 0)
    let before = exactNow()
    let read = time.time(checking: .max)
    let after = exactNow()
    #expect(read >= before && read <= after)
    #expect(time.published.load(ordering: .relaxed) == read, "the starting read publishes what it read")
    #expect(isRunning(time))
  }

  @Test func anExpiryBeyondTheMarginIsCheckedAgainstThePublishedTime() {
    let time = runningPublisher()
    #expect(time.time(checking: published + PublishedWallTime.margin + 1) == published)
    #expect(time.time(checking: .max) == published)
  }

  @Test func anExpiryWithinTheMarginIsCheckedAgainstTheExactTime() {
    let time = runningPublisher()
    for expiry in [published + PublishedWallTime.margin, published + 1, published, published - 1, Int64.min] {
      let before = exactNow()
      let read = time.time(checking: expiry)
      #expect(read >= before && read <= exactNow(), "expiry \(expiry)")
    }
    // An expiry that passed by the exact time but not by the published one: expired.
    let expiry = exactNow() - 1
    #expect(expiry > published + PublishedWallTime.margin)
    let time2 = PublishedWallTime(startThread: nil)
    _ = time2.time(checking: .max)
    #expect(time2.tick(now: expiry - PublishedWallTime.margin))
    #expect(time2.time(checking: expiry) > expiry, "within the margin the hit sees the entry expired")
  }

  @Test func eachTickPublishesItsTime() {
    let time = runningPublisher()
    #expect(time.tick(now: published + 4_000_000))
    #expect(time.time(checking: .max) == published + 4_000_000)
  }

  @Test func thePublisherStopsAfterIdleTicksWithoutARead() {
    let time = runningPublisher()
    // The tick that `runningPublisher()` made saw no read: one idle tick already.
    for tick in 2..<PublishedWallTime.idleTicks {
      #expect(time.tick(now: published), "tick \(tick)")
    }
    #expect(!time.tick(now: published))
    #expect(time.published.load(ordering: .relaxed) == 0)
    #expect(!isRunning(time))
    // The next read takes the exact time and starts it again.
    let before = exactNow()
    #expect(time.time(checking: .max) >= before)
    #expect(isRunning(time) && time.idle.load(ordering: .relaxed) == 0)
  }

  @Test func aReadKeepsThePublisherRunning() {
    let time = runningPublisher()
    for _ in 0..<(3 * PublishedWallTime.idleTicks) {
      _ = time.time(checking: .max)
      #expect(time.tick(now: published))
    }
    // A read near an expiry, which takes the exact time, counts as a read too.
    for _ in 0..<(2 * PublishedWallTime.idleTicks) {
      _ = time.time(checking: published)
      #expect(time.tick(now: published))
    }
  }

  @Test func aPublisherWhoseThreadCannotStartLeavesReadsTheExactTime() {
    let attempts = Atomic<Int>(0)
    let time = PublishedWallTime { _ in
      attempts.add(1, ordering: .relaxed)
      return EAGAIN
    }
    for _ in 0..<3 {
      let before = exactNow()
      #expect(time.time(checking: .max) >= before, "no published time: the exact one")
      #expect(time.published.load(ordering: .relaxed) == 0)
      #expect(!isRunning(time))
    }
    #expect(attempts.load(ordering: .relaxed) == 1, "the next attempt waits a second")
    // Once the delay passed, a read tries again.
    time.retryAfter.store(exactNow(), ordering: .relaxed)
    _ = time.time(checking: .max)
    #expect(attempts.load(ordering: .relaxed) == 2)
  }

  @Test func aForgottenPublisherIsReadExactlyAndStartsAgain() {
    let time = runningPublisher()
    #expect(time.time(checking: .max) == published)
    // What the child of a fork does first: the parent's thread is not there.
    time.forgetAfterFork()
    #expect(time.published.load(ordering: .relaxed) == 0)
    let before = exactNow()
    #expect(time.time(checking: .max) >= before)
    #expect(isRunning(time))
    #expect(time.published.load(ordering: .relaxed) >= before)
  }

  @Test func theSharedPublishersTimeIsNeverAheadOfTheExactTime() {
    let time = PublishedWallTime.shared
    for _ in 0..<10_000 {
      let before = exactNow()
      let read = time.time(checking: .max)
      let after = exactNow()
      #expect(read <= after, "a published time is never ahead of the exact time")
      // A generous bound (4 ms periods): only a descheduled thread makes it lag more.
      #expect(read >= before - 1_000_000_000)
    }
  }

  @Test func theSharedPublishersThreadPublishes() {
    let time = PublishedWallTime.shared
    let first = time.time(checking: .max)
    // Reads keep it running; its thread publishes every 4 ms. Bounded, so a broken thread fails
    // the test instead of hanging it.
    let deadline = exactNow() + 30_000_000_000
    var latest = first
    while latest <= first && exactNow() < deadline {
      latest = time.time(checking: .max)
    }
    #expect(latest > first, "the thread published a later time")
  }

  // MARK: Through a memory layer on the wall clock

  @Test func aWallClockEntryIsAMissAsSoonAsTheExactTimePassesItsExpiry() throws {
    let memory = try MemoryLayer<String, Int>(configuration: .init())
    for round in 0..<3 {
      // 100 ms: the first hits decide with the published time, the last 50 ms with the exact one.
      try memory.insert(1, for: "a", timeToLive: .milliseconds(100))
      let expiry = try #require(memory.entry(for: "a")?.expiresAt)
      // Hits keep the publisher running; they go on until the exact time passes the expiry.
      while WallClock().now < expiry { _ = memory.value(for: "a") }
      #expect(memory.value(for: "a") == nil, "round \(round): served past its expiry")
      #expect(!memory.contains("a"))
    }
  }

  #if os(Linux)
    /// Whether the process runs under ThreadSanitizer, whose runtime exports `__tsan_init`.
    static let runsUnderThreadSanitizer = dlsym(nil, "__tsan_init") != nil

    /// The child checks the handler's work and nothing more: atomics only, no lock, no thread
    /// (that a read with nothing published takes the exact time and starts a publisher is the
    /// tests' above). Not under ThreadSanitizer: its runtime keeps locks of its own, which the
    /// child of a multithreaded process can find held for ever (seen: a child spinning for
    /// minutes, its parent waiting).
    @Test(.enabled(if: !runsUnderThreadSanitizer, "a forked child may find ThreadSanitizer's locks held"))
    func theChildOfAForkDoesNotReadTheParentsPublishedTime() throws {
      let memory = try MemoryLayer<String, Int>(configuration: .init())
      // The parent's publisher runs, and its fork handler is registered.
      try memory.insert(CacheEntry(0, expiresAt: WallClock().now.advanced(by: .seconds(60))), for: "warm")
      #expect(memory.value(for: "warm") == 0)
      #expect(PublishedWallTime.shared.published.load(ordering: .relaxed) != 0)
      let child = fork()
      if child == 0 {
        // A hang must end the child, not the suite (SIGALRM unblocked, its default kills); and
        // the child must not hold the other tests' descriptors (sockets whose end they wait for).
        var alarmOnly = sigset_t()
        sigemptyset(&alarmOnly)
        sigaddset(&alarmOnly, SIGALRM)
        sigprocmask(SIG_UNBLOCK, &alarmOnly, nil)
        signal(SIGALRM, SIG_DFL)
        alarm(20)
        for descriptor in 3..<Int32(min(sysconf(Int32(_SC_OPEN_MAX)), 65_536)) { close(descriptor) }
        // Nothing published and no publisher: the child's first hit would read the exact time
        // (the parent's time, which no thread moves here, would keep entries fresh for ever).
        let shared = PublishedWallTime.shared
        let forgotten = shared.published.load(ordering: .relaxed) == 0 && !shared.running.load(ordering: .relaxed)
        _exit(forgotten ? 0 : 1)
      }
      #expect(child > 0)
      var status: Int32 = 0
      var waited = waitpid(child, &status, 0)
      while waited == -1 && errno == EINTR { waited = waitpid(child, &status, 0) }
      #expect(waited == child)
      #expect(status & 0x7F == 0, "the child ended by signal \(status & 0x7F)")
      #expect((status >> 8) & 0xFF == 0, "child exit \((status >> 8) & 0xFF): 1 means it kept the parent's time")
    }
  #endif
}
