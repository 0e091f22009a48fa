import Testing

@testable import AsyncCache

@Suite struct WaitersTests {
  @Test func outOfOrderArrivalsAreAnsweredInIdentifierOrder() {
    var waiters = Waiters<Int>()
    for id in [1, 2, 4, 3, 5, 7, 6] as [UInt64] { waiters.append(id, Int(id)) }
    #expect(Array(waiters) == [1, 2, 3, 4, 5, 6, 7])
    #expect(waiters.count == 7)
  }

  @Test func removalsLeaveTheOthersInOrderAndCompact() {
    var waiters = Waiters<Int>()
    for id in 1...100 { waiters.append(UInt64(id), id) }
    for id in stride(from: 1, through: 100, by: 2) { #expect(waiters.remove(UInt64(id)) == id) }
    #expect(waiters.remove(1) == nil, "removing twice finds nothing")
    #expect(!waiters.isWaiting(3) && waiters.isWaiting(4))
    for id in stride(from: 2, through: 60, by: 2) { _ = waiters.remove(UInt64(id)) }
    #expect(Array(waiters) == Array(stride(from: 62, through: 100, by: 2)))
    #expect(waiters.count == 20)
  }

  @Test func requestsAreCountedAsTheyJoinAndLeave() {
    var waiters = Waiters<Int>()
    // Even identifiers are requests, odd ones prefetches.
    for id in 1...40 { waiters.append(UInt64(id), id, isUrgent: id % 2 == 0, isRequest: id % 2 == 0) }
    #expect(waiters.count == 40 && waiters.requestCount == 20 && waiters.urgentCount == 20)
    _ = waiters.remove(2)
    _ = waiters.remove(3)
    #expect(waiters.requestCount == 19 && waiters.count == 38)
    waiters.demoteAll()
    #expect(waiters.requestCount == 19 && waiters.urgentCount == 0, "a demoted request is still a request")
    #expect(waiters.remove(2) == nil)
    #expect(waiters.requestCount == 19)
    // Enough removals to compact the tombstones (more than half of the entries): the counts hold.
    for id in 4...30 { _ = waiters.remove(UInt64(id)) }
    #expect(waiters.entries.count < 40, "compacted")
    #expect(Array(waiters) == [1] + Array(31...40) && waiters.requestCount == 5)
  }
}

@Suite struct LoadTableStateMachineTests {
  typealias Machine = LoadTableStateMachine<String, Int, Int, Int>

  @Test func requestsForAKeyShareOneLoad() {
    var machine = Machine()
    guard case .started(let id) = machine.join("k", waiter: 1, continuation: 1, priority: .medium) else {
      Issue.record("the first request starts a load")
      return
    }
    guard case .joined(_, nil) = machine.join("k", waiter: 2, continuation: 2, priority: .low) else {
      Issue.record("the second request joins without escalation")
      return
    }
    #expect(machine.waiterCount(for: "k") == 2)
    let result29 = machine.finish(id).map { Array($0.waiters) } ?? []
    #expect(Set(result29) == [1, 2])
    #expect(machine.isEmpty)
    #expect(machine.takeEffects().startedLoads.map(\.id) == [id], "one load for both")
  }

  @Test func waitersAreAnsweredInArrivalOrder() {
    var machine = Machine()
    guard case .started(let id) = machine.join("k", waiter: 1, continuation: 1, priority: .medium) else { return }
    for waiter in 2...200 { _ = machine.join("k", waiter: UInt64(waiter), continuation: waiter, priority: .medium) }
    _ = machine.leave(waiter: 50, key: "k")
    #expect(machine.finish(id).map { Array($0.waiters) } ?? [] == Array(1...200).filter { $0 != 50 })
  }

  @Test func aWaiterOfADetachedLoadCanStillLeave() {
    var machine = Machine()
    guard case .started(let old) = machine.join("k", waiter: 1, continuation: 1, priority: .medium) else { return }
    _ = machine.join("k", waiter: 2, continuation: 2, priority: .medium)
    machine.detach("k")
    guard case .started(let new) = machine.join("k", waiter: 3, continuation: 3, priority: .medium) else { return }
    let cancelled = machine.leave(waiter: 1, key: "k")
    #expect(cancelled.continuation == 1 && cancelled.abandoned == nil)
    #expect(machine.waiterCount(for: "k") == 2)
    #expect(machine.finish(old).map { Array($0.waiters) } ?? [] == [2])
    #expect(machine.finish(new).map { Array($0.waiters) } ?? [] == [3])
    #expect(machine.isEmpty)
  }

  @Test func aCancelledWaiterLeavesAloneAndTheLastOneAbandonsTheLoad() {
    var machine = Machine()
    guard case .started(let id) = machine.join("k", waiter: 1, continuation: 1, priority: .medium) else { return }
    _ = machine.join("k", waiter: 2, continuation: 2, priority: .medium)
    let first = machine.leave(waiter: 1, key: "k")
    #expect(first.continuation == 1 && first.abandoned == nil)
    let result30 = machine.leave(waiter: 1, key: "k")
    #expect(result30.continuation == nil, "cancelling twice finds nothing")
    let last = machine.leave(waiter: 2, key: "k")
    #expect(last.continuation == 2 && last.abandoned != nil)
    #expect(machine.isEmpty, "the next request starts afresh")
    let result31 = machine.finish(id).map { Array($0.waiters) } ?? []
    #expect(result31 == [], "a finished abandoned load answers no one")
  }

  @Test func aDetachedLoadKeepsItsWaitersButTakesNoNewOnes() {
    var machine = Machine()
    guard case .started(let old) = machine.join("k", waiter: 1, continuation: 1, priority: .medium) else { return }
    machine.detach("k")
    guard case .started(let new) = machine.join("k", waiter: 2, continuation: 2, priority: .medium) else {
      Issue.record("a request after a write starts a fresh load")
      return
    }
    let result32 = machine.finish(old).map { Array($0.waiters) } ?? []
    #expect(result32 == [1])
    #expect(machine.joinable["k"] == new, "the old load removed only its own record")
    let result33 = machine.finish(new).map { Array($0.waiters) } ?? []
    #expect(result33 == [2])
    #expect(machine.isEmpty)
  }

  @Test func aLoadWhoseRequestsLeftBeforeItsTaskWasAttachedIsReportedGone() {
    var machine = Machine()
    guard case .started(let id) = machine.join("k", waiter: 1, continuation: 1, priority: .low) else { return }
    // The owner begins the load's read in the same critical section.
    machine.setToken(ReadToken(key: "k", id: 9), for: id)
    let (continuation, abandoned) = machine.leave(waiter: 1, key: "k")
    #expect(continuation == 1)
    #expect(abandoned?.id == id)
    #expect(abandoned?.token?.id == 9, "the abandonment overtakes the read, task or not")
    #expect(abandoned != nil && abandoned?.task == nil, "no task to cancel yet")
    #expect(machine.attach(Task {}, to: id) == nil, "the owner cancels it")
    #expect(machine.isEmpty)
    // Its task may run for a while yet: a prefetch that abandoned it waits until it ends.
    #expect(machine.running == [id])
    machine.taskEnded([id])
    #expect(machine.running.isEmpty)
  }

  @Test func aBatchAttachesItsLiveLoadsAndIsCancelledWithItsLastOne() {
    var machine = Machine()
    var ids: [UInt64] = []
    for (waiter, key) in zip([1, 2, 3] as [UInt64], ["a", "b", "c"]) {
      guard
        case .started(let id) = machine.join(
          key, waiter: waiter, continuation: Int(waiter), priority: .low, kind: .bulk)
      else { return }
      ids.append(id)
    }
    #expect(machine.takeEffects().startedLoads.map(\.batchable) == [true, true, true])
    _ = machine.leave(waiter: 2, key: "b")
    _ = machine.join("c", waiter: 4, continuation: 4, priority: .high)
    let task = Task<Void, Never> {}
    let (gone, priority) = machine.attachBatch(ids, task: task)
    #expect(gone == [1], "b left before the batch's task was attached")
    #expect(priority == .high, "c was joined at a higher priority meanwhile")
    #expect(machine.leave(waiter: 1, key: "a").abandoned?.task == nil, "c still wants the batch's task")
    _ = machine.leave(waiter: 3, key: "c")
    #expect(machine.leave(waiter: 4, key: "c").abandoned?.task == task, "the last load of the batch cancels it")
    #expect(machine.isEmpty && machine.batches.isEmpty)
  }

  @Test func aHigherPriorityRequestEscalatesTheLoad() {
    var machine = Machine()
    guard case .started(let id) = machine.join("k", waiter: 1, continuation: 1, priority: .low) else { return }
    #expect(machine.takeEffects().startedLoads.map(\.id) == [id], "the owner starts the load's task")
    // A request that joins before the task is attached raises the priority: the owner escalates
    // the task it started at the first request's.
    guard case .joined(_, nil) = machine.join("k", waiter: 3, continuation: 3, priority: .medium) else { return }
    let task = Task<Void, Never> {}
    #expect(machine.attach(task, to: id) == .medium)
    guard case .joined(_, let escalated?) = machine.join("k", waiter: 2, continuation: 2, priority: .high) else {
      Issue.record("a higher-priority request escalates")
      return
    }
    #expect(escalated == task)
    let notHigher = machine.escalate(waiter: 1, key: "k", to: .medium)
    #expect(notHigher == nil, "already running higher")
    let higher = machine.escalate(waiter: 1, key: "k", to: TaskPriority(rawValue: TaskPriority.high.rawValue + 1))
    #expect(higher == task, "a waiter escalated while waiting escalates its load")
  }

  @Test func aSoftTimeoutServesTheStaleAnswerAndKeepsTheLoad() {
    var machine = Machine()
    guard case .started(let id) = machine.join("k", waiter: 1, continuation: 1, priority: .medium) else { return }
    _ = machine.join("k", waiter: 2, continuation: 2, priority: .medium)
    _ = machine.offerStale(41, for: id)
    guard case .served(1, 41) = machine.softTimeOut(waiter: 1, key: "k", after: .seconds(1), isServable: { _ in true })
    else {
      Issue.record("the first waiter gets the stale answer")
      return
    }
    guard case .waiting = machine.softTimeOut(waiter: 2, key: "k", after: .seconds(2), isServable: { _ in false })
    else {
      Issue.record("a stale answer no longer servable is not served")
      return
    }
    // A fresher stale answer reaches the waiter past its soft timeout at once.
    let served = machine.offerStale(42, for: id)
    #expect(served.map(\.0) == [2] && served.map(\.timeout) == [.seconds(2)])
    #expect(machine.loads[id]?.waiters.isEmpty == true)
    #expect(machine.loads[id]?.isKept == true, "the load goes on without waiters, owned by the cache")
    guard case .gone = machine.softTimeOut(waiter: 2, key: "k", after: .seconds(2), isServable: { _ in true }) else {
      Issue.record("a waiter answered is gone")
      return
    }
    // A request that joins the kept load and leaves does not cancel it.
    _ = machine.join("k", waiter: 3, continuation: 3, priority: .medium)
    #expect(machine.leave(waiter: 3, key: "k").abandoned == nil)
    #expect(machine.finish(id)?.waiters.isEmpty == true)
    #expect(machine.isEmpty)
  }

  @Test func aHardTimeoutLeavesAsACancellationDoes() {
    var machine = Machine()
    guard case .started(let id) = machine.join("k", waiter: 1, continuation: 1, priority: .medium) else { return }
    _ = machine.join("k", waiter: 2, continuation: 2, priority: .medium)
    _ = machine.softTimeOut(waiter: 1, key: "k", after: .seconds(1), isServable: { _ in true })
    let first = machine.leave(waiter: 1, key: "k")
    #expect(first.continuation == 1 && first.abandoned == nil, "another waiter still wants the load")
    #expect(machine.loads[id]?.pastSoftTimeout.isEmpty == true, "a waiter that left is no longer past its timeout")
    let second = machine.leave(waiter: 2, key: "k")
    #expect(second.continuation == 2 && second.abandoned?.id == id, "the last waiter's timeout abandons the load")
    #expect(machine.isEmpty)
  }
}
