import Testing

@testable import AsyncCache

/// The load table's state machine driven by random steps (joins of every kind, cancellations,
/// soft and hard timeouts and stale answers offered, writes, gates, attachments of single and batch tasks, finishes with and without a refresh
/// afterwards, refreshes, demotions and escalations), checked against a model of who waits for
/// what after every step. Continuations are join numbers and gates are gate numbers, so the
/// test sees every waiter and every gate answered, and answered once.
@Suite struct LoadTableModelTests {
  typealias Machine = LoadTableStateMachine<String, Int, Int, Int>

  /// What the test knows, kept beside the machine.
  struct Model {
    /// Joins still waiting: join number → (waiter, key, whether it joined as a request).
    var waiting: [Int: (waiter: UInt64, key: String, isRequest: Bool)] = [:]
    /// Joins answered (by a finish, or returned by their cancellation).
    var answered: Set<Int> = []
    /// Gates held: gate number → the gate identifier the machine gave.
    var heldGates: [Int: UInt64] = [:]
    /// Gates resumed.
    var resumedGates: Set<Int> = []
    /// Loads registered whose task is not attached yet.
    var unattached: [Machine.StartedLoad] = []
    var nextJoin = 0
    var nextWaiter: UInt64 = 0
    var nextGate = 0
    var failures: [String] = []

    mutating func answer(_ join: Int, _ how: String) {
      if answered.contains(join) { failures.append("join \(join) answered twice (\(how))") }
      if waiting.removeValue(forKey: join) == nil, !answered.contains(join) {
        failures.append("join \(join) answered (\(how)) but never waited")
      }
      answered.insert(join)
    }

    mutating func take(_ effects: Machine.Effects) {
      for (gate, _) in effects.openedGates { resume(gate, "opened") }
      unattached += effects.startedLoads
    }

    mutating func resume(_ gate: Int, _ how: String) {
      if resumedGates.contains(gate) { failures.append("gate \(gate) resumed twice (\(how))") }
      if heldGates.removeValue(forKey: gate) == nil, !resumedGates.contains(gate) {
        failures.append("gate \(gate) resumed (\(how)) but never held")
      }
      resumedGates.insert(gate)
    }
  }

  static let keys = ["a", "b", "c", "d"]

  /// The invariants of the machine, and its agreement with the model.
  static func violations(_ machine: Machine, _ model: Model) -> [String] {
    var found = model.failures
    let urgent = machine.loads.values.count { $0.isUrgent }
    if machine.urgentLoads != urgent { found.append("urgentLoads \(machine.urgentLoads), urgent loads \(urgent)") }
    for (id, load) in machine.loads {
      let joinable = machine.joinable[load.key] == id
      let detached = machine.detached[load.key]?.contains(id) == true
      if joinable == detached { found.append("load \(id) of \(load.key): joinable \(joinable), detached \(detached)") }
      if let gate = load.gate, machine.gates[gate]?.loads.contains(id) != true {
        found.append("load \(id) marks gate \(gate), which does not hold it")
      }
      if let batch = load.batch, machine.batches[batch] == nil { found.append("load \(id) in unknown batch \(batch)") }
    }
    for (key, id) in machine.joinable where machine.loads[id]?.key != key { found.append("joinable \(key) → \(id)") }
    for (key, ids) in machine.detached {
      if ids.isEmpty { found.append("empty detached list for \(key)") }
      for id in ids where machine.loads[id]?.key != key { found.append("detached \(key) → \(id)") }
    }
    for (gate, held) in machine.gates {
      if held.loads.isEmpty { found.append("gate \(gate) holds no load") }
      for id in held.loads where machine.loads[id]?.gate != gate { found.append("gate \(gate) holds load \(id)") }
    }
    for (batch, record) in machine.batches {
      let live = machine.loads.values.count { $0.batch == batch }
      if record.live != live { found.append("batch \(batch) counts \(record.live) live loads, has \(live)") }
    }
    for id in machine.loads.keys where !machine.running.contains(id) { found.append("load \(id) has no running task") }
    for (id, load) in machine.loads {
      for (waiter, _) in load.pastSoftTimeout where !load.waiters.isWaiting(waiter) {
        found.append("load \(id) keeps waiter \(waiter) past its soft timeout, but it does not wait")
      }
      // The requests a load's end counts as hits or misses: those of its joins still waiting.
      let requests = load.waiters.count { model.waiting[$0]?.isRequest == true }
      if load.waiters.requestCount != requests {
        found.append("load \(id) counts \(load.waiters.requestCount) requests, has \(requests)")
      }
    }
    let waiting = machine.loads.values.reduce(0) { $0 + $1.waiters.count }
    if waiting != model.waiting.count {
      found.append("\(waiting) waiters in the table, \(model.waiting.count) in the model")
    }
    if machine.waiterCount != waiting { found.append("waiterCount \(machine.waiterCount), counted \(waiting)") }
    let heldInMachine = Set(machine.gates.values.map(\.continuation))
    if heldInMachine != Set(model.heldGates.keys) {
      found.append("gates held \(heldInMachine.sorted()), model \(model.heldGates.keys.sorted())")
    }
    return found
  }

  @Test(arguments: 1...20 as ClosedRange<UInt64>)
  func randomStepsKeepEveryInvariant(seed: UInt64) {
    var random = SplitMix64(seed: seed)
    var machine = Machine()
    var model = Model()
    // One task stands for every load's: the machine only stores and hands back tasks, and
    // thousands of tasks would crowd the pool the other tests run on.
    let task = Task<Void, Never> {}
    let priorities: [TaskPriority] = [.background, .low, .medium, .high]

    func step(_ name: String) -> Bool {
      model.take(machine.takeEffects())
      let found = Self.violations(machine, model)
      guard found.isEmpty else {
        Issue.record("seed \(seed), after \(name): \(found)")
        return false
      }
      return true
    }

    for _ in 0..<2_000 {
      let name: String
      switch Int.random(in: 0..<100, using: &random) {
      case 0..<30:
        let key = Self.keys.randomElement(using: &random)!
        let kind = [Machine.JoinKind.request, .bulk, .prefetch].randomElement(using: &random)!
        model.nextJoin += 1
        model.nextWaiter += 1
        model.waiting[model.nextJoin] = (model.nextWaiter, key, kind != .prefetch)
        let result = machine.join(
          key, waiter: model.nextWaiter, continuation: model.nextJoin,
          priority: priorities.randomElement(using: &random)!, kind: kind, skipsTopLayer: Bool.random(using: &random))
        name = "join \(key) as \(kind): \(result)"
      case 30..<39:
        guard let (join, waiter) = model.waiting.randomElement(using: &random) else { continue }
        let timedOut = Int.random(in: 0..<3, using: &random) == 0
        let left =
          timedOut
          ? machine.leave(waiter: waiter.waiter, key: waiter.key)
          : machine.leave(waiter: waiter.waiter, key: waiter.key)
        if let continuation = left.continuation {
          if continuation != join { model.failures.append("removing join \(join) returned \(continuation)") }
          model.answer(continuation, timedOut ? "timed out" : "cancelled")
        } else {
          model.failures.append("removing waiting join \(join) returned nothing")
        }
        name = "\(timedOut ? "time out" : "cancel") join \(join)"
      case 39..<42:
        guard let (join, waiter) = model.waiting.randomElement(using: &random) else { continue }
        let servable = Bool.random(using: &random)
        switch machine.softTimeOut(
          waiter: waiter.waiter, key: waiter.key, after: .seconds(1), isServable: { _ in servable })
        {
        case .served(let continuation, _):
          if continuation != join { model.failures.append("soft timeout of join \(join) served \(continuation)") }
          model.answer(continuation, "served stale")
        case .waiting: break
        case .gone: model.failures.append("soft timeout of waiting join \(join) found it gone")
        }
        name = "soft timeout of join \(join) (servable \(servable))"
      case 42..<45:
        guard let id = machine.loads.keys.randomElement(using: &random) else { continue }
        for (join, _) in machine.offerStale(Int(id), for: id) { model.answer(join, "served stale late") }
        name = "load \(id) offers a stale answer"
      case 45..<60:
        guard let id = machine.loads.keys.randomElement(using: &random) else { continue }
        let refresh = Bool.random(using: &random)
        let key = machine.loads[id]!.key
        let finished = machine.finish(id)
        if refresh, finished?.wasJoinable == true { machine.startRefresh(key, priority: .utility) }
        for join in finished.map({ Array($0.waiters) }) ?? [] { model.answer(join, "finished") }
        name = "finish \(id)\(refresh ? ", then refresh" : "")"
      case 60..<72:
        guard !model.unattached.isEmpty else { continue }
        let started = model.unattached
        model.unattached = []
        let batchable = started.filter(\.batchable)
        for load in started where !load.batchable {
          _ = machine.attach(task, to: load.id)
        }
        if !batchable.isEmpty {
          _ = machine.attachBatch(batchable.map(\.id), task: task)
        }
        name = "attach \(started.map(\.id))"
      case 72..<80:
        // A task waits at one gate at a time: only loads not held already enter one.
        let live = machine.loads.keys.filter { machine.loads[$0]!.gate == nil }
        guard !live.isEmpty else { continue }
        let ids = Array(live.shuffled(using: &random).prefix(Int.random(in: 1...2, using: &random)))
        model.nextGate += 1
        switch machine.enterGate(ids, continuation: model.nextGate) {
        case .held(let gate): model.heldGates[model.nextGate] = gate
        case .proceed, .abandoned: break
        }
        name = "enter gate \(model.nextGate) with \(ids)"
      case 80..<84:
        guard let (gate, id) = model.heldGates.randomElement(using: &random) else { continue }
        if let continuation = machine.leaveGate(of: machine.gates[id]?.loads ?? []) {
          if continuation != gate { model.failures.append("leaving gate \(id) returned \(continuation), not \(gate)") }
          model.resume(continuation, "left")
        } else {
          model.failures.append("held gate \(gate) could not be left")
        }
        name = "leave gate \(gate)"
      case 84..<90:
        let key = Self.keys.randomElement(using: &random)!
        if Int.random(in: 0..<4, using: &random) == 0 { machine.detachAll() } else { machine.detach(key) }
        name = "write \(key)"
      case 90..<94:
        let key = Self.keys.randomElement(using: &random)!
        machine.startRefresh(key, priority: .utility)
        name = "refresh \(key)"
      case 94..<95:
        // The tasks of loads that left the table end.
        let ended = machine.running.filter { machine.loads[$0] == nil }
        machine.taskEnded(Array(ended))
        name = "tasks of \(ended.sorted()) end"
      case 95..<97:
        let key = Self.keys.randomElement(using: &random)!
        _ = machine.demote(key)
        name = "demote \(key)"
      default:
        guard let (_, waiter) = model.waiting.randomElement(using: &random) else { continue }
        _ = machine.escalate(waiter: waiter.waiter, key: waiter.key, to: .high)
        name = "escalate \(waiter)"
      }
      guard step(name) else { return }
    }

    // At rest: every request leaves or every load ends; nothing is left behind.
    while let id = machine.loads.keys.first {
      if Bool.random(using: &random),
        let (_, waiter) = model.waiting.first(where: { machine.load(of: $0.value.waiter, key: $0.value.key) == id })
      {
        if let join = machine.leave(waiter: waiter.waiter, key: waiter.key).continuation {
          model.answer(join, "cancelled")
        }
      } else {
        for join in machine.finish(id).map({ Array($0.waiters) }) ?? [] { model.answer(join, "finished") }
      }
      guard step("draining load \(id)") else { return }
    }
    machine.taskEnded(Array(machine.running))
    #expect(machine.isEmpty && machine.gates.isEmpty && machine.batches.isEmpty && machine.urgentLoads == 0)
    #expect(machine.running.isEmpty)
    #expect(model.waiting.isEmpty, "every join answered")
    #expect(model.heldGates.isEmpty, "every gate resumed: \(model.heldGates)")
    #expect(model.answered.count == model.nextJoin)
  }
}
