import Testing

@testable import AsyncCache

/// The coalescing layer's rules, driven synchronously: strings stand in for the waiters (the
/// continuations of requests) and for the work (the task of a lookup).
@Suite("SharedLookupsStateMachine", .timeLimit(.minutes(3)))
struct SharedLookupsStateMachineTests {
  typealias Machine = SharedLookupsStateMachine<String, String, String>

  /// Joins request `id` (waiter "w<id>") for `key` at `.medium`, not cancelled, then resumes
  /// the watchers it satisfied, as the layer does.
  @discardableResult
  func join(
    _ machine: inout Machine, _ key: String, _ id: UInt64, priority: TaskPriority = .medium
  ) -> Machine.JoinAction {
    defer { machine.resumeSatisfiedWatchers() }
    return machine.join(key, waiter: id, "w\(id)", priority: priority, isCancelled: false)
  }

  @Test("the first request for a key starts a lookup; later ones join it; another key starts its own")
  func joinAndStart() {
    var machine = Machine()
    #expect(join(&machine, "a", 1) == .start(lookupID: 1))
    #expect(join(&machine, "a", 2) == .joined)
    #expect(join(&machine, "a", 3) == .joined)
    #expect(join(&machine, "b", 4) == .start(lookupID: 2))
    #expect(machine.lookupCount == 2)
    #expect(machine.waiterCount == 4)
    #expect(machine.waiterCount(for: "a") == 3)
    #expect(machine.waiterCount(for: "b") == 1)
    #expect(machine.waiterCount(for: "c") == 0)
  }

  @Test("a request whose task is cancelled leaves at once and joins nothing")
  func cancelledJoin() {
    var machine = Machine()
    #expect(machine.join("a", waiter: 1, "w1", priority: .medium, isCancelled: true) == .cancelled)
    #expect(machine.lookupCount == 0 && machine.waiterCount == 0)
    join(&machine, "a", 2)
    #expect(machine.join("a", waiter: 3, "w3", priority: .medium, isCancelled: true) == .cancelled)
    #expect(machine.waiterCount(for: "a") == 1, "a cancelled request does not join a lookup in flight")
  }

  @Test("a finished lookup returns every waiter once and forgets the key; the next request starts afresh")
  func finish() {
    var machine = Machine()
    guard case .start(let first) = join(&machine, "a", 1) else {
      Issue.record("the first request did not start a lookup")
      return
    }
    join(&machine, "a", 2)
    #expect(Set(machine.finish(first)) == ["w1", "w2"])
    #expect(machine.lookupCount == 0 && machine.waiterCount == 0)
    #expect(machine.finish(first).isEmpty, "a lookup finishes once")
    #expect(machine.leave(waiter: 1) == (nil, nil), "a waiter of a finished lookup has nothing to leave")
    #expect(join(&machine, "a", 3) == .start(lookupID: first + 1))
  }

  @Test("one waiter of several leaves: it is returned to be resumed, and the lookup goes on for the others")
  func oneWaiterLeaves() {
    var machine = Machine()
    join(&machine, "a", 1)
    machine.started(1, work: "task a")
    join(&machine, "a", 2)
    join(&machine, "a", 3)
    let left = machine.leave(waiter: 1)
    #expect(left.waiter == "w1")
    #expect(left.abandoned == nil, "the lookup is not cancelled while others wait")
    #expect(machine.waiterCount(for: "a") == 2)
    #expect(machine.leave(waiter: 1) == (nil, nil), "a waiter leaves once")
    #expect(join(&machine, "a", 4) == .joined, "new requests still join the lookup")
    #expect(Set(machine.finish(1)) == ["w2", "w3", "w4"], "the one that left is not resumed again")
  }

  @Test("the last waiter to leave abandons the lookup: its work is returned, to be cancelled, and the key is free")
  func lastWaiterLeaves() {
    var machine = Machine()
    join(&machine, "a", 1)
    machine.started(1, work: "task a")
    join(&machine, "a", 2)
    #expect(machine.leave(waiter: 1) == ("w1", nil))
    #expect(machine.leave(waiter: 2) == ("w2", "task a"))
    #expect(machine.lookupCount == 0 && machine.waiterCount == 0)
    #expect(machine.finish(1).isEmpty, "the abandoned lookup's end resumes nobody")
    #expect(join(&machine, "a", 3) == .start(lookupID: 2), "the next request starts a new lookup")
  }

  @Test("a waiter that leaves a lookup with no work yet returns no work to cancel")
  func leaveBeforeStarted() {
    var machine = Machine()
    join(&machine, "a", 1)
    #expect(machine.leave(waiter: 1) == ("w1", nil))
    #expect(machine.lookupCount == 0)
    machine.started(1, work: "late")
    #expect(machine.lookupCount == 0, "work recorded for a lookup that is gone does not bring it back")
  }

  @Test("a detached lookup keeps its waiters, but new requests for the key start a new one")
  func detach() {
    var machine = Machine()
    join(&machine, "a", 1)
    join(&machine, "b", 2)
    machine.detach("a")
    #expect(machine.waiterCount(for: "a") == 0, "counts only the lookup new requests would join")
    #expect(machine.waiterCount == 2)
    #expect(join(&machine, "a", 3) == .start(lookupID: 3))
    #expect(join(&machine, "b", 4) == .joined, "other keys are not detached")
    #expect(machine.lookupCount == 3)
    #expect(machine.finish(1) == ["w1"], "the detached lookup still answers its own waiters")
    #expect(machine.waiterCount(for: "a") == 1, "and its end does not touch the newer lookup")
    #expect(join(&machine, "a", 5) == .joined)
    #expect(Set(machine.finish(3)) == ["w3", "w5"])
  }

  @Test("the last waiter leaving a detached lookup does not free the key of the newer one")
  func leaveDetached() {
    var machine = Machine()
    join(&machine, "a", 1)
    machine.started(1, work: "old")
    machine.detach("a")
    join(&machine, "a", 2)
    #expect(machine.leave(waiter: 1) == ("w1", "old"))
    #expect(join(&machine, "a", 3) == .joined, "new requests still join the newer lookup")
    #expect(machine.waiterCount(for: "a") == 2)
  }

  @Test("detaching every key sends every later request to a new lookup")
  func detachAll() {
    var machine = Machine()
    join(&machine, "a", 1)
    join(&machine, "b", 2)
    machine.detachAll()
    #expect(join(&machine, "a", 3) == .start(lookupID: 3))
    #expect(join(&machine, "b", 4) == .start(lookupID: 4))
    #expect(machine.lookupCount == 4 && machine.waiterCount == 4)
  }

  @Test("a lookup runs at the highest priority of its waiters: only a higher one returns its work")
  func priority() {
    var machine = Machine()
    join(&machine, "a", 1, priority: .low)
    #expect(machine.raise(waiter: 1, to: .medium) == nil, "no work yet: nothing to escalate")
    machine.started(1, work: "task a")
    join(&machine, "a", 2, priority: .low)
    #expect(machine.raise(waiter: 2, to: .medium) == nil, "already raised to .medium")
    #expect(machine.raise(waiter: 2, to: .low) == nil, "lower than the lookup's")
    #expect(machine.raise(waiter: 2, to: .high) == "task a")
    #expect(machine.raise(waiter: 1, to: .high) == nil, "the lookup runs at .high already")
    #expect(machine.raise(waiter: 99, to: .high) == nil, "an unknown waiter")
    _ = machine.finish(1)
    #expect(machine.raise(waiter: 1, to: .high) == nil, "a finished lookup")
  }

  @Test("the first request's priority is the lookup's: a joiner at or below it escalates nothing")
  func startingPriority() {
    var machine = Machine()
    join(&machine, "a", 1, priority: .medium)
    machine.started(1, work: "task a")
    join(&machine, "a", 2, priority: .low)
    #expect(machine.raise(waiter: 2, to: .medium) == nil)
    #expect(machine.raise(waiter: 2, to: .high) == "task a")
  }

  @Test("a watcher is resumed once a join brings the key's waiters to its count, not before")
  func watcherResumedByJoin() async {
    var machine = Machine()
    join(&machine, "a", 1)
    let id = machine.watchers.makeID()
    var countsSeen: [Int] = []
    var stillWatching = false
    await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
      let kept = machine.watch(id: id, key: "a", count: 3, continuation: continuation)
      #expect(kept)
      join(&machine, "b", 2)
      join(&machine, "a", 3)
      countsSeen.append(machine.waiterCount(for: "a"))
      // Not satisfied yet: still there to remove. Put it back.
      if let early = machine.watchers.unwatch(id) {
        countsSeen.append(-1)
        let keptAgain = machine.watch(id: id, key: "a", count: 3, continuation: early)
        #expect(keptAgain)
      }
      join(&machine, "a", 4)
      // Resumed by that join: nothing left to remove.
      if let late = machine.watchers.unwatch(id) {
        stillWatching = true
        late.resume()
      }
    }
    #expect(countsSeen == [2, -1])
    #expect(!stillWatching, "the third waiter for a resumed the watcher")
  }

  @Test("a join leaves its watchers to the layer, which resumes them after it escalated the lookup")
  func joinLeavesWatchersToTheLayer() async {
    var machine = Machine()
    #expect(join(&machine, "a", 1, priority: .low) == .start(lookupID: 1))
    machine.started(1, work: "task a")
    let id = machine.watchers.makeID()
    var watchedAfterJoin = false
    await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
      let kept = machine.watch(id: id, key: "a", count: 2, continuation: continuation)
      #expect(kept)
      let joined = machine.join("a", waiter: 2, "w2", priority: .high, isCancelled: false)
      #expect(joined == .joined)
      // The join alone resumed nothing: the watcher is still there while the layer escalates…
      watchedAfterJoin = !machine.watchers.isEmpty
      let escalated = machine.raise(waiter: 2, to: .high)
      #expect(escalated == "task a")
      // …and then resumes it.
      machine.resumeSatisfiedWatchers()
    }
    #expect(watchedAfterJoin)
    #expect(machine.watchers.isEmpty)
  }

  @Test("a watcher whose count is reached already is not kept")
  func watcherSatisfiedAtOnce() async {
    var machine = Machine()
    join(&machine, "a", 1)
    join(&machine, "a", 2)
    let id = machine.watchers.makeID()
    var kept = true
    await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
      kept = machine.watch(id: id, key: "a", count: 2, continuation: continuation)
      if kept {
        machine.watchers.unwatch(id)?.resume()
      } else {
        continuation.resume()
      }
    }
    #expect(!kept)
    #expect(machine.watchers.unwatch(id) == nil)
  }

  @Test("watchers get distinct identifiers, and removing one leaves the others")
  func unwatch() async {
    var machine = Machine()
    let first = machine.watchers.makeID()
    let second = machine.watchers.makeID()
    #expect(first != second)
    var removed: [UInt64] = []
    await withUnsafeContinuation { (one: UnsafeContinuation<Void, Never>) in
      let kept = machine.watch(id: first, key: "a", count: 1, continuation: one)
      #expect(kept)
      if let watcher = machine.watchers.unwatch(first) {
        removed.append(first)
        watcher.resume()
      }
    }
    await withUnsafeContinuation { (two: UnsafeContinuation<Void, Never>) in
      let kept = machine.watch(id: second, key: "b", count: 1, continuation: two)
      #expect(kept)
      join(&machine, "a", 1)  // not b's key: b's watcher stays
      if let watcher = machine.watchers.unwatch(second) {
        removed.append(second)
        watcher.resume()
      }
    }
    #expect(removed == [first, second])
  }
}
