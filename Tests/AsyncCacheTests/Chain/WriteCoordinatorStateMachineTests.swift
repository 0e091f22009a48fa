import Testing

@testable import AsyncCache

/// The coordinator's rules, driven synchronously with integers standing in for continuations.
@Suite struct WriteCoordinatorStateMachineTests {
  typealias Machine = WriteCoordinatorStateMachine<String, Int>

  /// The writer of an `.acquired` or `.queued` request.
  func writer(_ request: Machine.Request) -> UInt64 {
    switch request {
    case .acquired(let writer), .queued(let writer): return writer
    case .overtaken:
      Issue.record("unexpected .overtaken")
      return 0
    }
  }

  func isAcquired(_ request: Machine.Request) -> Bool {
    if case .acquired = request { return true }
    return false
  }

  @Test func aWriteOvertakesReadsInProgressButNotTheCommittingOne() {
    var machine = Machine()
    let a = machine.beginRead("k")
    let b = machine.beginRead("k")
    let other = machine.beginRead("other")
    let commit = machine.requestCommit("k", reader: b)
    #expect(isAcquired(commit))
    #expect(machine.isOvertaken("k", id: a))
    #expect(!machine.isOvertaken("k", id: b))
    #expect(!machine.isOvertaken("other", id: other))
    _ = machine.releaseWrite("k", writer: writer(commit))
    machine.endRead("k", id: a)
    machine.endRead("k", id: b)
    machine.endRead("other", id: other)
    #expect(machine.isIdle)
  }

  @Test func aReadStartedWhileAWriteIsPendingIsOvertakenFromTheStart() {
    var machine = Machine()
    let write = machine.requestWrite("k")
    let read = machine.beginRead("k")
    #expect(machine.isOvertaken("k", id: read))
    _ = machine.releaseWrite("k", writer: writer(write))
    let later = machine.beginRead("k")
    #expect(!machine.isOvertaken("k", id: later))
  }

  @Test func aCopyOvertakesNoReadAndReadsStartedDuringItStoreTheirValueAfterIt() {
    var machine = Machine()
    let older = machine.beginRead("k")
    let copying = machine.beginRead("k")
    let copy = machine.requestCommit("k", reader: copying, kind: .copy)
    #expect(isAcquired(copy))
    #expect(!machine.isOvertaken("k", id: older), "a copy makes no read's value older")
    // A load that starts while the copy is written still commits what it loads, after the copy.
    let load = machine.beginRead("k")
    #expect(!machine.isOvertaken("k", id: load))
    let fill = machine.requestCommit("k", reader: load)
    #expect(fill == .queued(writer: writer(fill)))
    #expect(machine.isOvertaken("k", id: older), "a fill overtakes every other read")
    #expect(machine.isOvertaken("k", id: copying))
    // A read that starts while a fill waits is overtaken from the start, as with any write.
    let during = machine.beginRead("k")
    #expect(machine.isOvertaken("k", id: during))
    #expect(machine.releaseWrite("k", writer: writer(copy)).isEmpty, "the queued fill has not attached yet")
    #expect(machine.attach("k", writer: writer(fill), continuation: 1) == .proceed)
    _ = machine.releaseWrite("k", writer: writer(fill))
    // Once the fill is done, reads start clean again.
    let after = machine.beginRead("k")
    #expect(!machine.isOvertaken("k", id: after))
    for read in [older, copying, load, during, after] { machine.endRead("k", id: read) }
    #expect(machine.isIdle)
  }

  @Test func aReadStartedWhileACopyWaitsBehindAWriteIsOvertakenByTheWrite() {
    var machine = Machine()
    let write = machine.requestWrite("k")
    let copying = machine.beginRead("k")
    #expect(machine.isOvertaken("k", id: copying))
    #expect(machine.requestCommit("k", reader: copying, kind: .copy) == .overtaken)
    _ = machine.releaseWrite("k", writer: writer(write))
    // A copy handed the key after a write keeps new reads clean.
    let copier = machine.beginRead("k")
    let copy = machine.requestCommit("k", reader: copier, kind: .copy)
    let blocker = machine.requestWrite("k")
    #expect(machine.isOvertaken("k", id: copier), "a write overtakes the copy's own read")
    _ = machine.releaseWrite("k", writer: writer(copy))
    #expect(machine.attach("k", writer: writer(blocker), continuation: 1) == .proceed)
    let read = machine.beginRead("k")
    #expect(machine.isOvertaken("k", id: read), "the write now holds the key")
    _ = machine.releaseWrite("k", writer: writer(blocker))
    for id in [copying, copier, read] { machine.endRead("k", id: id) }
    #expect(machine.isIdle)
  }

  @Test func writersOfOneKeyAreServedFirstComeFirstServed() {
    var machine = Machine()
    let first = machine.requestWrite("k")
    let second = machine.requestWrite("k")
    let third = machine.requestWrite("k")
    #expect(isAcquired(first) && !isAcquired(second) && !isAcquired(third))
    #expect(machine.attach("k", writer: writer(second), continuation: 2) == .wait)
    #expect(machine.attach("k", writer: writer(third), continuation: 3) == .wait)
    #expect(machine.queuedWriterCount(for: "k") == 2)
    let other = machine.requestWrite("other")
    #expect(isAcquired(other), "other keys are independent")
    #expect(machine.releaseWrite("k", writer: writer(first)) == [2])
    #expect(machine.releaseWrite("k", writer: writer(second)) == [3])
    #expect(machine.releaseWrite("k", writer: writer(third)) == [])
    _ = machine.releaseWrite("other", writer: writer(other))
    #expect(machine.isIdle)
  }

  /// Regression: a writer refused at once, queued only after it suspended, could be handed a key
  /// freed in between without overtaking a read that began in that gap; the read could then
  /// back-fill its older value over the completed write.
  @Test func aWriterIsQueuedWhenItAsksSoNoReadSlipsInUnnoticed() {
    var machine = Machine()
    let first = machine.requestWrite("k")
    let second = machine.requestWrite("k")  // queued now, before its task suspends
    #expect(machine.releaseWrite("k", writer: writer(first)) == [], "handed over, not yet attached")
    let read = machine.beginRead("k")
    #expect(machine.isOvertaken("k", id: read), "a read that starts while a writer holds the key is overtaken")
    #expect(machine.attach("k", writer: writer(second), continuation: 2) == .proceed)
    _ = machine.releaseWrite("k", writer: writer(second))
    machine.endRead("k", id: read)
    #expect(machine.isIdle)
  }

  @Test func aCancelledQueuedWriterLeavesTheQueue() {
    var machine = Machine()
    let first = machine.requestWrite("k")
    let second = machine.requestWrite("k")
    let third = machine.requestWrite("k")
    _ = machine.attach("k", writer: writer(second), continuation: 2)
    _ = machine.attach("k", writer: writer(third), continuation: 3)
    let cancelled = machine.cancel("k", writer: writer(second))
    #expect(cancelled.cancelled == 2 && cancelled.granted.isEmpty)
    let again = machine.cancel("k", writer: writer(second))
    #expect(again.cancelled == nil, "cancelling twice finds nothing")
    #expect(machine.releaseWrite("k", writer: writer(first)) == [3])
    _ = machine.releaseWrite("k", writer: writer(third))
    #expect(machine.isIdle)
  }

  @Test func aWriterCancelledAfterBeingHandedTheKeyGivesItBack() {
    var machine = Machine()
    let first = machine.requestWrite("k")
    let second = machine.requestWrite("k")
    let third = machine.requestWrite("k")
    _ = machine.attach("k", writer: writer(third), continuation: 3)
    _ = machine.releaseWrite("k", writer: writer(first))  // handed to `second`, not yet attached
    let cancelled = machine.cancel("k", writer: writer(second))
    #expect(cancelled.cancelled == nil && cancelled.granted == [3], "the key goes on to the next writer")
    #expect(machine.attach("k", writer: writer(second), continuation: 2) == .cancelled)
    _ = machine.releaseWrite("k", writer: writer(third))
    #expect(machine.isIdle)
  }

  @Test func cancellingARunningWriterChangesNothing() {
    var machine = Machine()
    let write = machine.requestWrite("k")
    let cancelled = machine.cancel("k", writer: writer(write))
    #expect(cancelled.cancelled == nil && cancelled.granted.isEmpty)
    _ = machine.releaseWrite("k", writer: writer(write))
    #expect(machine.isIdle)
  }

  @Test func aGlobalWriteWaitsForKeyWritersAndHoldsBackNewOnes() {
    var machine = Machine()
    let read = machine.beginRead("x")
    let a = machine.requestWrite("a")
    let global = machine.requestGlobalWrite()
    #expect(!isAcquired(global))
    #expect(machine.isOvertaken("x", id: read), "a global write overtakes every read")
    #expect(machine.attachGlobal(writer: writer(global), continuation: 10) == .wait)
    let b = machine.requestWrite("b")
    #expect(!isAcquired(b), "a writer arriving now waits behind the global writer")
    #expect(machine.attach("b", writer: writer(b), continuation: 11) == .wait)
    let lateRead = machine.beginRead("y")
    #expect(machine.isOvertaken("y", id: lateRead), "reads starting while a global write is pending are overtaken")
    #expect(machine.releaseWrite("a", writer: writer(a)) == [10], "the last key writer hands over to the global one")
    #expect(machine.releaseGlobalWrite(writer: writer(global)) == [11], "then the held-back writers go")
    _ = machine.releaseWrite("b", writer: writer(b))
    machine.endRead("x", id: read)
    machine.endRead("y", id: lateRead)
    #expect(machine.isIdle)
  }

  @Test func cancellingTheGlobalWaiterReleasesTheWritersItHeldBack() {
    var machine = Machine()
    let a = machine.requestWrite("a")
    let global = machine.requestGlobalWrite()
    _ = machine.attachGlobal(writer: writer(global), continuation: 1)
    let b = machine.requestWrite("b")
    _ = machine.attach("b", writer: writer(b), continuation: 2)
    let cancelled = machine.cancelGlobal(writer: writer(global))
    #expect(cancelled.cancelled == 1)
    #expect(cancelled.granted == [2])
    _ = machine.releaseWrite("a", writer: writer(a))
    _ = machine.releaseWrite("b", writer: writer(b))
    #expect(machine.isIdle)
  }

  /// Regression: a global writer handed the lock before it attached its continuation was taken
  /// for no global writer at all, so the key writers it held back ran alongside `removeAll`.
  @Test func aGlobalWriterHandedTheLockBeforeAttachingStillExcludesKeyWriters() {
    var machine = Machine()
    let a = machine.requestWrite("a")
    let first = machine.requestGlobalWrite()
    #expect(machine.attachGlobal(writer: writer(first), continuation: 1) == .wait)
    let second = machine.requestGlobalWrite()  // queued, not attached yet
    let b = machine.requestWrite("b")
    #expect(machine.attach("b", writer: writer(b), continuation: 2) == .wait)
    #expect(machine.releaseWrite("a", writer: writer(a)) == [1])
    let granted = machine.releaseGlobalWrite(writer: writer(first))
    #expect(granted == [], "the second global writer holds the lock")
    #expect(machine.activeKeyWriters == 0)
    #expect(machine.attachGlobal(writer: writer(second), continuation: 3) == .proceed)
    #expect(machine.releaseGlobalWrite(writer: writer(second)) == [2])
    _ = machine.releaseWrite("b", writer: writer(b))
    #expect(machine.isIdle)
  }

  @Test func cancellingAnUnattachedGlobalOwnerDoesNotLetKeyWritersIn() {
    var machine = Machine()
    let a = machine.requestWrite("a")
    let first = machine.requestGlobalWrite()
    let second = machine.requestGlobalWrite()
    let b = machine.requestWrite("b")
    #expect(machine.attach("b", writer: writer(b), continuation: 2) == .wait)
    #expect(machine.releaseWrite("a", writer: writer(a)) == [], "the first global writer holds it, unattached")
    let cancelled = machine.cancelGlobal(writer: writer(first))
    #expect(cancelled.granted == [], "the second global writer is next")
    #expect(machine.attachGlobal(writer: writer(second), continuation: 3) == .proceed)
    #expect(machine.releaseGlobalWrite(writer: writer(second)) == [2])
    _ = machine.releaseWrite("b", writer: writer(b))
    #expect(machine.isIdle)
  }

  /// Regression: a load overtaken by a removal, finishing after a fresh load of the same key
  /// started, overtook the fresh load's read, so the fresh value was never stored.
  @Test func anOvertakenReadsCommitIsRefusedWithoutOvertakingOthers() {
    var machine = Machine()
    let old = machine.beginRead("k")
    let removal = machine.requestWrite("k")
    _ = machine.releaseWrite("k", writer: writer(removal))
    let fresh = machine.beginRead("k")
    #expect(machine.requestCommit("k", reader: old) == .overtaken)
    #expect(!machine.isOvertaken("k", id: fresh))
    #expect(isAcquired(machine.requestCommit("k", reader: fresh)))
  }

  @Test func unknownReadsCountAsOvertaken() {
    var machine = Machine()
    #expect(machine.isOvertaken("k", id: 99))
    let read = machine.beginRead("k")
    machine.overtake("k", id: read)
    #expect(machine.isOvertaken("k", id: read))
  }
}
