import Testing

@testable import AsyncCache

/// The time memory hits read with the `WallClock`: published by a thread, read exactly near an
/// expiry. These publishers tick by hand (`startsThread: false`), so every step is the test's.
@Suite struct PublishedWallTimeTests {
  /// A published time long past, so that the exact time can never be mistaken for it.
  let published: Int64 = 1_000_000_000_000_000_000

  /// The exact wall time now, in nanoseconds since 1970.
  func exactNow() -> Int64 { WallClock().now.nanosecondsSince1970 }

  /// A publisher that runs and has published ``published``, with no read since.
  func runningPublisher() -> PublishedWallTime {
    let time = PublishedWallTime(startsThread: false)
    _ = time.time(checking: .max)
    #expect(time.tick(now: published))
    return time
  }

  @Test func theFirstReadTakesTheExactTimeAndStartsThePublisher() {
    let time = PublishedWallTime(startsThread: false)
    #expect(time.published.load(ordering: .relaxed) == 0)
    let before = exactNow()
    let read = time.time(checking: .max)
    let after = exactNow()
    #expect(read >= before && read <= after)
    #expect(time.published.load(ordering: .relaxed) == read, "the starting read publishes what it read")
    #expect(time.publisher.withLock { $0.running })
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
    let time2 = PublishedWallTime(startsThread: false)
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
    #expect(!time.publisher.withLock { $0.running })
    // The next read takes the exact time and starts it again.
    let before = exactNow()
    #expect(time.time(checking: .max) >= before)
    #expect(time.publisher.withLock { $0.running && $0.idle == 0 })
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
}
