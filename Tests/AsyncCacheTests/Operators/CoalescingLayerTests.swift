import AsyncCacheTesting
import TestSupport
import Testing

@testable import AsyncCache

@Suite("CoalescingLayer", .timeLimit(.minutes(3)))
struct CoalescingLayerTests {

  @Test("concurrent lookups of a key share one lookup of the layer; other keys have their own")
  func sharesLookups() async throws {
    let fake = FakeLayer<String, Int>(entries: ["a": CacheEntry(1), "b": CacheEntry(2)])
    let shared = fake.coalescingLookups()
    fake.hold(.lookup)
    let a = (0..<5).map { _ in Task { try await shared.entry(for: "a") } }
    let b = Task { try await shared.entry(for: "b") }
    await shared.waitForLookups(5, for: "a")
    await shared.waitForLookups(1, for: "b")
    await fake.waitForHeld(2, .lookup)
    #expect(fake.callCount(.lookup) == 2 && shared.lookupsInFlight == 2)

    fake.release(.lookup)
    for task in a { #expect(try await task.value?.value == 1) }
    #expect(try await b.value?.value == 2)
    #expect(shared.lookupsInFlight == 0)
    #expect(try await shared.entry(for: "a")?.value == 1)
    #expect(fake.callCount(.lookup) == 3, "a lookup after the shared one asks again")
  }

  @Test("an error is shared by the waiters and not kept: the next request asks again")
  func errorsAreSharedNotKept() async throws {
    let fake = FakeLayer<String, Int>(entries: ["a": CacheEntry(1)])
    let shared = fake.coalescingLookups()
    fake.hold(.lookup)
    fake.fail(.lookup, with: TestError("broken"), times: 1)
    let first = Task { try await shared.entry(for: "a") }
    let second = Task { try await shared.entry(for: "a") }
    await shared.waitForLookups(2, for: "a")
    fake.release(.lookup)
    await #expect(throws: TestError.self) { try await first.value }
    await #expect(throws: TestError.self) { try await second.value }
    #expect(try await shared.entry(for: "a")?.value == 1)
    #expect(fake.callCount(.lookup) == 2)
  }

  @Test("a cancelled request leaves at once; the lookup goes on for the others")
  func cancelledWaiterLeaves() async throws {
    let fake = FakeLayer<String, Int>(entries: ["a": CacheEntry(1)])
    let shared = fake.coalescingLookups()
    fake.hold(.lookup)
    let leaving = Task { try await shared.entry(for: "a") }
    let staying = Task { try await shared.entry(for: "a") }
    await shared.waitForLookups(2, for: "a")
    await fake.waitForHeld(1, .lookup)

    leaving.cancel()
    await #expect(throws: CancellationError.self) { try await leaving.value }
    #expect(fake.cancellationCount(.lookup) == 0, "the lookup was not cancelled")
    fake.release(.lookup)
    #expect(try await staying.value?.value == 1)
  }

  @Test("when the last request leaves, the shared lookup is cancelled, and the next request starts anew")
  func lastWaiterCancelsTheLookup() async throws {
    let fake = FakeLayer<String, Int>(entries: ["a": CacheEntry(1)])
    let shared = fake.coalescingLookups()
    fake.hold(.lookup)
    let first = Task { try await shared.entry(for: "a") }
    let second = Task { try await shared.entry(for: "a") }
    await shared.waitForLookups(2, for: "a")
    await fake.waitForHeld(1, .lookup)

    first.cancel()
    second.cancel()
    await #expect(throws: CancellationError.self) { try await first.value }
    await #expect(throws: CancellationError.self) { try await second.value }
    #expect(fake.cancellationCount(.lookup) == 1, "the layer saw the lookup cancelled")
    #expect(shared.lookupsInFlight == 0)

    fake.release(.lookup)
    #expect(try await shared.entry(for: "a")?.value == 1)
  }

  @Test("a request whose task is already cancelled throws CancellationError without asking the layer")
  func alreadyCancelled() async throws {
    let fake = FakeLayer<String, Int>(entries: ["a": CacheEntry(1)])
    let shared = fake.coalescingLookups()
    let cancelled = Task {
      withUnsafeCurrentTask { $0?.cancel() }
      return try await shared.entry(for: "a")
    }
    await #expect(throws: CancellationError.self) { try await cancelled.value }
    #expect(fake.callCount(.lookup) == 0)
  }

  @Test(
    "requests after a write do not join a lookup that began before it, and see the write", arguments: [false, true])
  func writesDetachTheLookup(removes: Bool) async throws {
    let fake = FakeLayer<String, Int>(entries: ["a": CacheEntry(1)])
    let shared = fake.coalescingLookups()
    fake.hold(.lookup, phase: .afterApplying)
    let before = Task { try await shared.entry(for: "a") }
    await fake.waitForHeld(1, .lookup)  // it read 1 and is held before returning

    if removes {
      try await shared.removeValue(for: "a")
    } else {
      try await shared.insert(CacheEntry(2), for: "a")
    }
    let after = Task { try await shared.entry(for: "a") }
    await fake.waitForHeld(2, .lookup)  // a lookup of its own
    fake.release(.lookup)
    #expect(try await before.value?.value == 1, "it began before the write")
    #expect(try await after.value?.value == (removes ? nil : 2))
  }

  @Test("removeAll detaches every lookup; writes and memory pressure reach the layer")
  func removeAllAndPressure() async throws {
    let fake = FakeLayer<String, Int>(entries: ["a": CacheEntry(1), "b": CacheEntry(2)])
    let shared = fake.coalescingLookups()
    fake.hold(.lookup, phase: .afterApplying)
    let before = Task { try await shared.entry(for: "b") }
    await fake.waitForHeld(1, .lookup)
    try await shared.removeAll()
    let after = Task { try await shared.entry(for: "b") }
    await fake.waitForHeld(2, .lookup)
    fake.release(.lookup)
    #expect(try await before.value?.value == 2)
    #expect(try await after.value == nil)

    await shared.handleMemoryPressure(.warning)
    #expect(fake.memoryPressureLevels == [.warning])
  }

  @Test("the shared lookup runs at the highest priority of the requests waiting for it")
  func escalatesToTheHighestWaiter() async throws {
    let gate = PriorityGateLayer()
    let shared = gate.coalescingLookups()
    let low = Task(priority: .low) { try await shared.entry(for: 1) }
    await gate.waitUntilEntered()
    let high = Task(priority: .high) { try await shared.entry(for: 1) }
    await shared.waitForLookups(2, for: 1)
    gate.open()
    let seen = try #require(try await low.value?.value)
    #expect(TaskPriority(rawValue: UInt8(seen)) >= .high, "the lookup was escalated")
    #expect(try await high.value?.value == seen)
  }

  @Test("many tasks, keys and cancellations: every request ends, nothing is left behind", arguments: [1, 2, 3])
  func stress(seed: UInt64) async throws {
    let memory = try MemoryLayer<Int, Int>()
    for key in 0..<5 { try memory.insert(key * 10, for: key) }
    let shared = YieldingLayer(base: memory).coalescingLookups()
    var random = SeededGenerator(seed: seed)
    var tasks: [(key: Int, task: Task<CacheEntry<Int>?, any Error>)] = []
    for index in 0..<300 {
      let key = index % 7
      tasks.append((key, Task { try await shared.entry(for: key) }))
      if Int.random(in: 0..<3, using: &random) == 0 { tasks.randomElement(using: &random)?.task.cancel() }
    }
    for (key, task) in tasks {
      switch await task.result {
      case .success(let entry): #expect(entry?.value == (key < 5 ? key * 10 : nil))
      case .failure(let error):
        #expect(error is CancellationError && task.isCancelled, "only a cancelled request fails")
      }
    }
    #expect(shared.lookupsInFlight == 0)
  }
}

/// A layer that yields before it asks its base, so that concurrent lookups overlap.
private final actor YieldingLayer: AsyncCacheLayer {
  let base: MemoryLayer<Int, Int>

  init(base: MemoryLayer<Int, Int>) { self.base = base }

  nonisolated func entry(for key: Int) async throws -> CacheEntry<Int>? {
    for _ in 0..<3 { await Task.yield() }
    try Task.checkCancellation()
    return base.entry(for: key)
  }

  nonisolated func insert(_ entry: CacheEntry<Int>, for key: Int) async throws { try base.insert(entry, for: key) }
  nonisolated func removeValue(for key: Int) async throws { base.removeValue(for: key) }
  nonisolated func removeAll() async throws { base.removeAll() }
}

/// A layer whose one lookup waits until the test opens it, then returns the priority it runs at.
private final actor PriorityGateLayer: AsyncCacheLayer {
  private let state = Locked<
    (
      entered: [CheckedContinuation<Void, Never>], gate: CheckedContinuation<Void, Never>?, isOpen: Bool,
      hasEntered: Bool
    )
  >(([], nil, false, false))

  nonisolated func entry(for key: Int) async throws -> CacheEntry<Int>? {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
      let (watchers, resumeNow) = state.withLock { state -> ([CheckedContinuation<Void, Never>], Bool) in
        state.hasEntered = true
        defer { state.entered = [] }
        if state.isOpen { return (state.entered, true) }
        state.gate = continuation
        return (state.entered, false)
      }
      for watcher in watchers { watcher.resume() }
      if resumeNow { continuation.resume() }
    }
    return CacheEntry(Int(Task.currentPriority.rawValue))
  }

  nonisolated func waitUntilEntered() async {
    await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
      let now = state.withLock { state -> Bool in
        if state.hasEntered { return true }
        state.entered.append(continuation)
        return false
      }
      if now { continuation.resume() }
    }
  }

  nonisolated func open() {
    let gate = state.withLock { state -> CheckedContinuation<Void, Never>? in
      state.isOpen = true
      defer { state.gate = nil }
      return state.gate
    }
    gate?.resume()
  }

  nonisolated func insert(_ entry: CacheEntry<Int>, for key: Int) async throws {}
  nonisolated func removeValue(for key: Int) async throws {}
  nonisolated func removeAll() async throws {}
}
