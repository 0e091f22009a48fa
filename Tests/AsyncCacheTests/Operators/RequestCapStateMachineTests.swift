import Testing

@testable import AsyncCache

@Suite("RequestCapStateMachine")
struct RequestCapStateMachineTests {
  @Test("slots are taken up to the limit; later requests queue and get slots in arrival order")
  func fifo() {
    let machine = Driver<String>(limit: 2)
    #expect(machine.acquire(1, "a", isCancelled: false) == .proceed)
    #expect(machine.acquire(2, "b", isCancelled: false) == .proceed)
    #expect(machine.acquire(3, "c", isCancelled: false) == .wait)
    #expect(machine.acquire(4, "d", isCancelled: false) == .wait)
    #expect(machine.running == 2 && machine.waitingCount == 2)
    #expect(machine.release() == "c")
    #expect(machine.release() == "d")
    #expect(machine.running == 2, "each slot passed to a waiter")
    #expect(machine.release() == nil)
    #expect(machine.release() == nil)
    #expect(machine.running == 0)
  }

  @Test("a newcomer never overtakes the queue, even when a slot is free for an instant")
  func noBarging() {
    let machine = Driver<String>(limit: 1)
    #expect(machine.tryAcquire())
    #expect(machine.acquire(2, "queued", isCancelled: false) == .wait)
    #expect(!machine.tryAcquire(), "the queue is not empty")
    #expect(machine.release() == "queued")
    #expect(!machine.tryAcquire(), "the slot went to the waiter")
  }

  @Test("a cancelled waiter leaves at once and is skipped; a cancelled request that would wait does not queue")
  func cancellation() {
    let machine = Driver<String>(limit: 1)
    #expect(machine.tryAcquire())
    #expect(machine.acquire(2, "b", isCancelled: false) == .wait)
    #expect(machine.acquire(3, "c", isCancelled: false) == .wait)
    #expect(machine.cancel(2) == "b")
    #expect(machine.cancel(2) == nil, "it left already")
    #expect(machine.waitingCount == 1)
    #expect(machine.acquire(4, "d", isCancelled: true) == .cancelled)
    #expect(machine.release() == "c")
    #expect(machine.cancel(3) == nil, "it holds a slot: cancelling is its own business")
    #expect(machine.release() == nil)
    #expect(machine.acquire(5, "e", isCancelled: true) == .proceed, "a free slot is taken even when cancelled")
  }

  @Test("random acquires, cancels and releases match a simple queue model", arguments: [1, 7, 42, 1234])
  func model(seed: UInt64) {
    var random = SeededGenerator(seed: seed)
    let limit = Int.random(in: 1...4, using: &random)
    let machine = Driver<UInt64>(limit: limit)
    var modelRunning = 0
    var modelQueue: [UInt64] = []
    var nextID: UInt64 = 0
    for _ in 0..<5_000 {
      switch Int.random(in: 0..<10, using: &random) {
      case 0..<4:
        nextID += 1
        let action = machine.acquire(nextID, nextID, isCancelled: false)
        if modelRunning < limit, modelQueue.isEmpty {
          modelRunning += 1
          #expect(action == .proceed)
        } else {
          modelQueue.append(nextID)
          #expect(action == .wait)
        }
      case 4..<7 where !modelQueue.isEmpty:
        let victim = modelQueue.remove(at: Int.random(in: 0..<modelQueue.count, using: &random))
        #expect(machine.cancel(victim) == victim)
      default:
        guard modelRunning > 0 else { continue }
        let resumed = machine.release()
        if modelQueue.isEmpty {
          modelRunning -= 1
          #expect(resumed == nil)
        } else {
          #expect(resumed == modelQueue.removeFirst())
        }
      }
      #expect(machine.running == modelRunning && machine.waitingCount == modelQueue.count)
    }
  }
}

/// The state machine behind a reference, so that `#expect` can call its mutating methods.
private final class Driver<Waiter> {
  var machine: RequestCapStateMachine<Waiter>

  init(limit: Int) { machine = RequestCapStateMachine(limit: limit) }

  var running: Int { machine.running }
  var waitingCount: Int { machine.waitingCount }
  func tryAcquire() -> Bool { machine.tryAcquire() }
  func acquire(_ id: UInt64, _ waiter: Waiter, isCancelled: Bool) -> RequestCapStateMachine<Waiter>.AcquireAction {
    machine.acquire(id, waiter, isCancelled: isCancelled)
  }
  func cancel(_ id: UInt64) -> Waiter? { machine.cancel(id) }
  func release() -> Waiter? { machine.release() }
}
