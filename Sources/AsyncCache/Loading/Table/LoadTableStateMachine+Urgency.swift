// The machine's urgent and background loads: which loads wait at the gate, and when it opens.
extension LoadTableStateMachine {
  // MARK: Urgent and background loads

  /// Updates the count of urgent loads after the waiters of load `id` changed.
  @usableFromInline
  mutating func urgencyChanged(of id: UInt64, wasUrgent: Bool) {
    guard let load = loads[id], load.isUrgent != wasUrgent else { return }
    if load.isUrgent {
      urgentLoads += 1
      if urgentLoads == 1 { effects.urgencyChanged = true }
      // Promoted: it (and its batch) no longer waits for other urgent work.
      if let gate = load.gate { openGate(gate) }
    } else {
      urgentLoadsDecreased()
    }
  }

  @usableFromInline
  mutating func urgentLoadsDecreased() {
    urgentLoads -= 1
    guard urgentLoads == 0 else { return }
    effects.urgencyChanged = true
    for gate in Array(gates.keys) { openGate(gate) }
  }

  /// Lets the task held at `gate` go on.
  @usableFromInline
  mutating func openGate(_ gate: UInt64) {
    guard let held = gates.removeValue(forKey: gate) else { return }
    for id in held.loads { loads[id]?.gate = nil }
    effects.openedGates.append((held.continuation, cancelled: false))
  }

  /// Makes the waiters of every load of `key` background: the loads no longer count as urgent,
  /// wait at the gate before they next ask the origin, and are promoted again by the next
  /// request. Returns whether a load of `key` was urgent.
  mutating func demote(_ key: Key) -> Bool {
    let ids = (joinable[key].map { [$0] } ?? []) + (detached[key] ?? [])
    var demoted = false
    for id in ids where loads[id]?.isUrgent == true {
      loads[id]!.waiters.demoteAll()
      urgencyChanged(of: id, wasUrgent: true)
      demoted = true
    }
    return demoted
  }

  /// What a load task about to ask the origin must do.
  enum GateDecision {
    /// Go on: no urgent load is in flight, or one of its loads is urgent.
    case proceed
    /// Wait: the continuation is held at this gate until urgent work ends or a load is promoted.
    case held(UInt64)
    /// Stop: none of its loads is wanted any more (its task is being cancelled).
    case abandoned
  }

  /// The task running loads `ids` is about to ask the origin; decides whether it waits at a
  /// gate, holding `continuation` then.
  mutating func enterGate(_ ids: [UInt64], continuation: Gate) -> GateDecision {
    let live = ids.filter { loads[$0] != nil }
    guard !live.isEmpty else { return .abandoned }
    // A refresh does not wait, nor a load kept after a soft timeout: a busy service always has
    // urgent loads in flight, and its stale entries would never be refreshed.
    guard urgentLoads > 0, !live.contains(where: { loads[$0]!.isUrgent || loads[$0]!.outlivesWaiters }) else {
      return .proceed
    }
    nextGateID &+= 1
    gates[nextGateID] = (continuation, live)
    for id in live { loads[id]!.gate = nextGateID }
    return .held(nextGateID)
  }

  /// Takes back the continuation held at `gate` (its task was cancelled), if still held.
  mutating func leaveGate(_ gate: UInt64) -> Gate? {
    guard let held = gates.removeValue(forKey: gate) else { return nil }
    for id in held.loads { loads[id]?.gate = nil }
    return held.continuation
  }

  /// The number of loads waiting at the gate.
  var loadsAtGate: Int { gates.values.reduce(0) { $0 + $1.loads.count } }
}
