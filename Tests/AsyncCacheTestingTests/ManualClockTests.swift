import AsyncCache
import AsyncCacheTesting
import Testing

@Suite(.timeLimit(.minutes(3))) struct ManualClockTests {
  @Test func timeMovesOnlyWhenAdvanced() {
    let clock = ManualClock()
    let start = clock.now
    #expect(clock.now == start)
    clock.advance(by: .seconds(5))
    #expect(clock.now == start.advanced(by: .seconds(5)))
    clock.advance(to: start)  // not backwards
    #expect(clock.now == start.advanced(by: .seconds(5)))
  }

  @Test func sleepersWakeWhenTheirDeadlineComesEarliestFirst() async throws {
    let clock = ManualClock()
    let order = Locked<[Int]>([])
    let late = Task {
      try await clock.sleep(for: .seconds(10))
      order.withLock { $0.append(10) }
    }
    let early = Task {
      try await clock.sleep(for: .seconds(3))
      order.withLock { $0.append(3) }
    }
    await clock.waitForSleepers(2)
    #expect(clock.nextDeadline == clock.now.advanced(by: .seconds(3)))
    clock.advance(by: .seconds(2))
    #expect(clock.sleeperCount == 2, "no deadline has come")
    clock.advance(by: .seconds(1))
    try await early.value
    #expect(order.withLock { $0 } == [3])
    clock.advance(by: .seconds(7))
    try await late.value
    #expect(order.withLock { $0 } == [3, 10])
    #expect(clock.sleeperCount == 0)
  }

  @Test func aPastDeadlineReturnsAtOnce() async throws {
    let clock = ManualClock()
    try await clock.sleep(until: clock.now)
    #expect(clock.sleeperCount == 0)
  }

  @Test func aCancelledSleeperThrowsAndLeaves() async throws {
    let clock = ManualClock()
    let sleeper = Task { try await clock.sleep(for: .seconds(60)) }
    await clock.waitForSleepers(1)
    sleeper.cancel()
    await #expect(throws: CancellationError.self) { try await sleeper.value }
    #expect(clock.sleeperCount == 0)
  }

  @Test func itDrivesTaskSleepAsAGenericClock() async throws {
    let clock = ManualClock()
    let sleeper = Task { try await Task.sleep(for: .milliseconds(500), clock: clock) }
    await clock.waitForSleepers(1)
    clock.advance(by: .milliseconds(500))
    try await sleeper.value
  }
}
