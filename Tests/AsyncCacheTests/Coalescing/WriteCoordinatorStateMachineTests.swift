import Testing

@testable import AsyncCache

/// The coordinator's rules, driven synchronously with integers standing in for continuations.
@Suite struct WriteCoordinatorStateMachineTests {
  typealias Machine = WriteCoordinatorStateMachine<String, Int>

  @Test func aWriteOvertakesReadsInProgressButNotItsExemptOne() {
    var machine = Machine()
    let a = machine.beginRead("k")
    let b = machine.beginRead("k")
    let other = machine.beginRead("other")
    let result1 = machine.requestCommit("k", id: b)
    #expect(result1 == .acquired)
    #expect(machine.isOvertaken("k", id: a))
    #expect(!machine.isOvertaken("k", id: b))
    #expect(!machine.isOvertaken("other", id: other))
    _ = machine.releaseWrite("k")
    machine.endRead("k", id: a)
    machine.endRead("k", id: b)
    machine.endRead("other", id: other)
    #expect(machine.isIdle)
  }

  @Test func aReadStartedWhileAWriteIsPendingIsOvertakenFromTheStart() {
    var machine = Machine()
    let result2 = machine.requestWrite("k")
    #expect(result2)
    let read = machine.beginRead("k")
    #expect(machine.isOvertaken("k", id: read))
    _ = machine.releaseWrite("k")
    let later = machine.beginRead("k")
    #expect(!machine.isOvertaken("k", id: later))
  }

  @Test func writersOfOneKeyAreServedFirstComeFirstServed() {
    var machine = Machine()
    let result3 = machine.requestWrite("k")
    #expect(result3)
    let result4 = machine.requestWrite("k")
    #expect(!result4)
    let result5 = machine.enqueue("k", id: 1, continuation: 1)
    #expect(result5 == nil)
    let result6 = machine.requestWrite("k")
    #expect(!result6)
    let result7 = machine.enqueue("k", id: 2, continuation: 2)
    #expect(result7 == nil)
    #expect(machine.queuedWriterCount(for: "k") == 2)
    let result8 = machine.requestWrite("other")
    #expect(result8, "other keys are independent")
    let result9 = machine.releaseWrite("k")
    #expect(result9 == [1])
    let result10 = machine.releaseWrite("k")
    #expect(result10 == [2])
    let result11 = machine.releaseWrite("k")
    #expect(result11 == [])
    _ = machine.releaseWrite("other")
    #expect(machine.isIdle)
  }

  @Test func aCancelledWaitingWriterLeavesTheQueue() {
    var machine = Machine()
    let result12 = machine.requestWrite("k")
    #expect(result12)
    _ = machine.requestWrite("k")
    _ = machine.enqueue("k", id: 1, continuation: 1)
    _ = machine.requestWrite("k")
    _ = machine.enqueue("k", id: 2, continuation: 2)
    let result13 = machine.cancelWaiting("k", id: 1)
    #expect(result13 == 1)
    let result14 = machine.cancelWaiting("k", id: 1)
    #expect(result14 == nil, "cancelling twice finds nothing")
    let result15 = machine.releaseWrite("k")
    #expect(result15 == [2])
    _ = machine.releaseWrite("k")
    #expect(machine.isIdle)
  }

  @Test func aKeyFreedBeforeQueueingIsGrantedAtOnce() {
    var machine = Machine()
    let result16 = machine.requestWrite("k")
    #expect(result16)
    let result17 = machine.requestWrite("k")
    #expect(!result17)
    _ = machine.releaseWrite("k")
    let result18 = machine.enqueue("k", id: 1, continuation: 1)
    #expect(result18 == 1)
    _ = machine.releaseWrite("k")
    #expect(machine.isIdle)
  }

  @Test func aGlobalWriteWaitsForKeyWritersAndHoldsBackNewOnes() {
    var machine = Machine()
    let read = machine.beginRead("x")
    let result19 = machine.requestWrite("a")
    #expect(result19)
    let result20 = machine.requestGlobalWrite()
    #expect(!result20)
    #expect(machine.isOvertaken("x", id: read), "a global write overtakes every read")
    let result21 = machine.enqueueGlobal(id: 10, continuation: 10)
    #expect(result21 == nil)
    // A writer arriving now waits behind the global writer.
    let result22 = machine.requestWrite("b")
    #expect(!result22)
    let result23 = machine.enqueue("b", id: 11, continuation: 11)
    #expect(result23 == nil)
    let result24 = machine.releaseWrite("a")
    #expect(result24 == [10], "the last key writer hands over to the global writer")
    let result25 = machine.releaseGlobalWrite()
    #expect(result25 == [11], "the global writer hands over to the held-back writers")
    _ = machine.releaseWrite("b")
    machine.endRead("x", id: read)
    #expect(machine.isIdle)
  }

  @Test func cancellingTheGlobalWaiterReleasesTheWritersItHeldBack() {
    var machine = Machine()
    let result26 = machine.requestWrite("a")
    #expect(result26)
    let result27 = machine.requestGlobalWrite()
    #expect(!result27)
    _ = machine.enqueueGlobal(id: 1, continuation: 1)
    let result28 = machine.requestWrite("b")
    #expect(!result28)
    _ = machine.enqueue("b", id: 2, continuation: 2)
    let (cancelled, granted) = machine.cancelGlobalWaiting(id: 1)
    #expect(cancelled == 1)
    #expect(granted == [2])
    _ = machine.releaseWrite("a")
    _ = machine.releaseWrite("b")
    #expect(machine.isIdle)
  }

  /// Regression: a load overtaken by a removal, finishing after a fresh load of the same key
  /// started, overtook the fresh load's read, so the fresh value was never stored.
  @Test func anOvertakenReadsCommitIsRefusedWithoutOvertakingOthers() {
    var machine = Machine()
    let old = machine.beginRead("k")
    let removal = machine.requestWrite("k")
    #expect(removal)
    _ = machine.releaseWrite("k")
    let fresh = machine.beginRead("k")
    let oldCommit = machine.requestCommit("k", id: old)
    #expect(oldCommit == .overtaken)
    #expect(!machine.isOvertaken("k", id: fresh))
    let freshCommit = machine.requestCommit("k", id: fresh)
    #expect(freshCommit == .acquired)
  }

  @Test func unknownReadsCountAsOvertaken() {
    var machine = Machine()
    #expect(machine.isOvertaken("k", id: 99))
    let read = machine.beginRead("k")
    machine.overtake("k", id: read)
    #expect(machine.isOvertaken("k", id: read))
  }
}

@Suite struct InFlightLoadsStateMachineTests {
  typealias Machine = InFlightLoadsStateMachine<String, Int>

  @Test func requestsForAKeyShareOneLoad() {
    var machine = Machine()
    guard case .started(let id) = machine.join("k", waiter: 1, continuation: 1, priority: .medium) else {
      Issue.record("the first request starts a load")
      return
    }
    guard case .joined(nil) = machine.join("k", waiter: 2, continuation: 2, priority: .low) else {
      Issue.record("the second request joins without escalation")
      return
    }
    #expect(machine.waiterCount(for: "k") == 2)
    let result29 = machine.finish(id, failed: false)
    #expect(Set(result29) == [1, 2])
    #expect(machine.isEmpty)
    #expect(machine.counters.loads == 1 && machine.counters.coalesced == 1)
  }

  @Test func aCancelledWaiterLeavesAloneAndTheLastOneAbandonsTheLoad() {
    var machine = Machine()
    guard case .started(let id) = machine.join("k", waiter: 1, continuation: 1, priority: .medium) else { return }
    _ = machine.join("k", waiter: 2, continuation: 2, priority: .medium)
    let first = machine.cancel(waiter: 1)
    #expect(first.continuation == 1 && first.abandoned == nil)
    let result30 = machine.cancel(waiter: 1)
    #expect(result30.continuation == nil, "cancelling twice finds nothing")
    let last = machine.cancel(waiter: 2)
    #expect(last.continuation == 2 && last.abandoned != nil)
    #expect(machine.isEmpty, "the next request starts afresh")
    let result31 = machine.finish(id, failed: true)
    #expect(result31 == [], "a finished abandoned load answers no one")
    #expect(machine.counters.cancelledLoads == 1 && machine.counters.failures == 0)
  }

  @Test func aDetachedLoadKeepsItsWaitersButTakesNoNewOnes() {
    var machine = Machine()
    guard case .started(let old) = machine.join("k", waiter: 1, continuation: 1, priority: .medium) else { return }
    machine.detach("k")
    guard case .started(let new) = machine.join("k", waiter: 2, continuation: 2, priority: .medium) else {
      Issue.record("a request after a write starts a fresh load")
      return
    }
    let result32 = machine.finish(old, failed: false)
    #expect(result32 == [1])
    #expect(machine.joinable["k"] == new, "the old load removed only its own record")
    let result33 = machine.finish(new, failed: false)
    #expect(result33 == [2])
    #expect(machine.isEmpty)
  }

  @Test func aHigherPriorityRequestEscalatesTheLoad() {
    var machine = Machine()
    guard case .started(let id) = machine.join("k", waiter: 1, continuation: 1, priority: .low) else { return }
    let task = Task<Void, Never> {}
    machine.attach(task, token: ReadToken(key: "k", id: 0), to: id)
    guard case .joined(let escalated?) = machine.join("k", waiter: 2, continuation: 2, priority: .medium) else {
      Issue.record("a higher-priority request escalates")
      return
    }
    #expect(escalated == task)
    let notHigher = machine.escalate(waiter: 1, to: .low)
    #expect(notHigher == nil, "already running higher")
    let higher = machine.escalate(waiter: 1, to: .high)
    #expect(higher == task, "a waiter escalated while waiting escalates its load")
  }

}
