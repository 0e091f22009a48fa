import AsyncCache
import AsyncCacheTesting
import Testing

/// Every wait the testing module offers returns when its task is cancelled, so that a test's
/// time limit ends a wait for something that never happens instead of hanging the whole run.
/// Each wait is cancelled before it starts and while it waits (which of the two a yield gives
/// is up to the scheduler: both must end), and the double keeps working afterwards.
@Suite(.timeLimit(.minutes(3))) struct WaitCancellationTests {
  /// Starts `wait` in a task and cancels it, `rounds` times: at once, or after a yield.
  static func cancelled(rounds: Int = 40, _ wait: @escaping @Sendable () async -> Void) async {
    for round in 0..<rounds {
      let task = Task { await wait() }
      if round.isMultiple(of: 2) { await Task.yield() }
      task.cancel()
      await task.value
    }
  }

  @Test func manualClockWaitForSleepers() async throws {
    let clock = ManualClock()
    await Self.cancelled { await clock.waitForSleepers(1) }
    let sleeper = Task { try await clock.sleep(for: .seconds(1)) }
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    try await sleeper.value
  }

  @Test func gatedFetcherWaitForFetches() async throws {
    let origin = GatedFetcher<String, Int> { $0.count }
    await Self.cancelled { await origin.waitForFetches(1, for: "a") }
    let fetch = Task { try await origin.fetch("abc") }
    await origin.waitForFetches(1, for: "abc")
    origin.releaseAll()
    #expect(try await fetch.value == 3)
  }

  @Test func fakeLayerWaitForHeld() async throws {
    let layer = FakeLayer<String, Int>()
    layer.hold(.lookup)
    await Self.cancelled { await layer.waitForHeld(1, .lookup) }
    let lookup = Task { try await layer.entry(for: "a") }
    await layer.waitForHeld(1, .lookup)
    layer.release(.lookup)
    #expect(try await lookup.value == nil)
  }

  @Test func coalescingLayerWaitForLookups() async throws {
    let layer = FakeLayer<String, Int>()
    let shared = layer.coalescingLookups()
    await Self.cancelled { await shared.waitForLookups(1, for: "a") }
    layer.hold(.lookup)
    let lookup = Task { try await shared.entry(for: "a") }
    await shared.waitForLookups(1, for: "a")
    layer.release(.lookup)
    #expect(try await lookup.value == nil)
  }

  @Test func requestCappedLayerWaitForWaitingRequests() async throws {
    let layer = FakeLayer<String, Int>()
    let capped = try layer.cappingRequests(at: 1)
    await Self.cancelled { await capped.waitForWaitingRequests(1) }
    layer.hold(.lookup)
    let first = Task { try await capped.entry(for: "a") }
    await layer.waitForHeld(1, .lookup)
    let second = Task { try await capped.entry(for: "b") }
    await capped.waitForWaitingRequests(1)
    layer.release(.lookup)
    #expect(try await first.value == nil)
    #expect(try await second.value == nil)
  }
}
