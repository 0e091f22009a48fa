import AsyncCacheTesting
import TestSupport
import Testing

@testable import AsyncCache

@Suite("RequestCappedLayer", .timeLimit(.minutes(3)))
struct RequestCappedLayerTests {

  @Test("at most N requests reach the layer; the others wait for a slot")
  func cap() async throws {
    let fake = FakeLayer<String, Int>(entries: ["a": CacheEntry(1), "b": CacheEntry(2)])
    let capped = try fake.cappingRequests(at: 2)
    fake.hold(.lookup)
    let holders = [Task { try await capped.entry(for: "a") }, Task { try await capped.entry(for: "b") }]
    await fake.waitForHeld(2, .lookup)
    let queued = (1...3).map { index in Task { try await capped.entry(for: "q\(index)") } }
    await capped.waitForWaitingRequests(3)
    #expect(fake.callCount(.lookup) == 2, "the queued requests have not reached the layer")
    #expect(capped.requestsInFlight == 2 && capped.requestsWaiting == 3)

    fake.release(.lookup)
    #expect(try await holders[0].value?.value == 1)
    #expect(try await holders[1].value?.value == 2)
    for task in queued { #expect(try await task.value == nil) }
    #expect(capped.requestsInFlight == 0 && capped.requestsWaiting == 0)
  }

  @Test("waiters get the slot in the order they came")
  func firstComeFirstServed() async throws {
    let fake = FakeLayer<String, Int>()
    let recorded = RecordingLayer(fake)
    let capped = try recorded.cappingRequests(at: 1)
    fake.hold(.lookup)
    let holder = Task { try await capped.entry(for: "holder") }
    await fake.waitForHeld(1, .lookup)
    var queued: [Task<CacheEntry<Int>?, any Error>] = []
    for (index, key) in ["q1", "q2", "q3"].enumerated() {
      queued.append(Task { try await capped.entry(for: key) })
      await capped.waitForWaitingRequests(index + 1)
    }
    // One slot: each release lets exactly the next waiter reach the layer, and it is held there.
    for (index, key) in ["q1", "q2", "q3"].enumerated() {
      fake.releaseOne(.lookup)
      await fake.waitForHeld(1, .lookup)
      #expect(recorded.calls.last == .entry(key), "waiter \(index + 1) entered next")
    }
    fake.release(.lookup)
    _ = try await holder.value
    for task in queued { _ = try await task.value }
  }

  @Test("a cancelled waiter leaves the queue at once, without reaching the layer, while the slot stays held")
  func cancelledWaiterLeavesAtOnce() async throws {
    let fake = FakeLayer<String, Int>(entries: ["held": CacheEntry(1), "next": CacheEntry(3)])
    let capped = try fake.cappingRequests(at: 1)
    fake.hold(.lookup)
    let holder = Task { try await capped.entry(for: "held") }
    await fake.waitForHeld(1, .lookup)

    let leaving = Task { try await capped.insert(CacheEntry(2), for: "leaving") }
    await capped.waitForWaitingRequests(1)
    let next = Task { try await capped.entry(for: "next") }
    await capped.waitForWaitingRequests(2)

    leaving.cancel()
    await #expect(throws: CancellationError.self) { try await leaving.value }
    #expect(capped.requestsWaiting == 1 && capped.requestsInFlight == 1, "the holder still runs")
    #expect(fake.callCount(.insert) == 0 && fake.storedEntries["leaving"] == nil, "the write never happened")

    fake.release(.lookup)
    #expect(try await holder.value?.value == 1)
    #expect(try await next.value?.value == 3, "the next waiter got the slot")
    #expect(capped.requestsWaiting == 0 && capped.requestsInFlight == 0)
  }

  @Test("a request already cancelled when the queue is full throws CancellationError without queueing")
  func alreadyCancelled() async throws {
    let fake = FakeLayer<String, Int>()
    let capped = try fake.cappingRequests(at: 1)
    fake.hold(.lookup)
    let holder = Task { try await capped.entry(for: "held") }
    await fake.waitForHeld(1, .lookup)

    let late = Task {
      withUnsafeCurrentTask { $0?.cancel() }
      return try await capped.entry(for: "late")
    }
    await #expect(throws: CancellationError.self) { try await late.value }
    #expect(capped.requestsWaiting == 0)
    fake.release(.lookup)
    _ = try await holder.value
  }

  @Test("a request that holds a slot sees its cancellation in the layer, and frees its slot")
  func cancelledHolderFreesItsSlot() async throws {
    let fake = FakeLayer<String, Int>(entries: ["next": CacheEntry(5)])
    let capped = try fake.cappingRequests(at: 1)
    fake.hold(.lookup)
    let holder = Task { try await capped.entry(for: "held") }
    await fake.waitForHeld(1, .lookup)
    let next = Task { try await capped.entry(for: "next") }
    await capped.waitForWaitingRequests(1)

    holder.cancel()
    await #expect(throws: CancellationError.self) { try await holder.value }
    #expect(fake.cancellationCount(.lookup) == 1)
    await fake.waitForHeld(1, .lookup)  // `next` got the slot and reached the layer
    fake.release(.lookup)
    #expect(try await next.value?.value == 5)
    #expect(capped.requestsInFlight == 0)
  }

  @Test("a failing layer gives its slot back; errors pass through unwrapped")
  func errorsFreeTheSlot() async throws {
    let fake = FakeLayer<String, Int>()
    let capped = try fake.cappingRequests(at: 1)
    fake.fail(.lookup, with: TestError("broken"), times: 1)
    await #expect(throws: TestError.self) { try await capped.entry(for: "a") }
    #expect(capped.requestsInFlight == 0)
    try await capped.insert(CacheEntry(1), for: "a")
    #expect(try await capped.entry(for: "a")?.value == 1)
    try await capped.removeValue(for: "a")
    try await capped.removeAll()
    #expect(fake.callCount(.remove) == 1 && fake.callCount(.removeAll) == 1)
  }

  @Test("memory pressure does not wait for a slot")
  func pressureSkipsTheQueue() async throws {
    let fake = FakeLayer<String, Int>()
    let capped = try fake.cappingRequests(at: 1)
    fake.hold(.lookup)
    let holder = Task { try await capped.entry(for: "held") }
    await fake.waitForHeld(1, .lookup)
    await capped.handleMemoryPressure(.critical)
    #expect(fake.memoryPressureLevels == [.critical])
    fake.release(.lookup)
    _ = try await holder.value
  }

  @Test("a cap under 1 is a typed error naming the value", arguments: [0, -3])
  func invalidCap(cap: Int) throws {
    let error = #expect(throws: AsyncCacheError.self) { try FakeLayer<String, Int>().cappingRequests(at: cap) }
    #expect(error?.code == .invalidConfiguration && error?.message.contains("\(cap)") == true)
  }

}

// Its 200 tasks yield 600 times in all, each behind every other test's jobs: on a loaded 2-core
// machine (the whole suite beside a release build) it once took over a minute. A suite of its
// own, whose limit catches a hang, not a slow run (a suite's shorter limit would apply).
@Suite("RequestCappedLayer under stress", .timeLimit(.minutes(5)))
struct RequestCappedLayerStressTests {
  @Test(
    "many tasks through a cap of 3: never more than 3 inside, nothing left behind",
    arguments: [1, 2, 3])
  func stress(seed: UInt64) async throws {
    let inside = Locked((now: 0, most: 0))
    let counted = ProbeLayer(inside: inside)
    let capped = try counted.cappingRequests(at: 3)
    await withTaskGroup(of: Void.self) { group in
      var random = SeededGenerator(seed: seed)
      var tasks: [Task<Void, Never>] = []
      for index in 0..<200 {
        let task = Task { _ = try? await capped.entry(for: index % 7) }
        tasks.append(task)
        if Int.random(in: 0..<4, using: &random) == 0 { tasks.randomElement(using: &random)?.cancel() }
      }
      for task in tasks { group.addTask { await task.value } }
    }
    #expect(inside.withLock { $0.most } <= 3)
    #expect(inside.withLock { $0.now } == 0)
    #expect(capped.requestsInFlight == 0 && capped.requestsWaiting == 0)
  }
}

/// A layer that counts the requests inside it and yields while inside, so that they overlap.
private final actor ProbeLayer: AsyncCacheLayer {
  let inside: Locked<(now: Int, most: Int)>

  init(inside: Locked<(now: Int, most: Int)>) { self.inside = inside }

  nonisolated func entry(for key: Int) async throws -> CacheEntry<Int>? {
    inside.withLock { state in
      state.now += 1
      state.most = max(state.most, state.now)
    }
    defer { inside.withLock { $0.now -= 1 } }
    for _ in 0..<3 { await Task.yield() }
    return nil
  }

  nonisolated func insert(_ entry: CacheEntry<Int>, for key: Int) async throws {}
  nonisolated func removeValue(for key: Int) async throws {}
  nonisolated func removeAll() async throws {}
}
