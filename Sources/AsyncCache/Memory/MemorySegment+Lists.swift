// The eviction lists of a `MemorySegment`: linking, unlinking and moving nodes between the
// window, probation and protected, with the regions' counts and costs.

extension MemorySegment {
  /// The most recently used node of `region`.
  @inlinable
  @inline(__always)
  func mru(_ region: SegmentRegion) -> UInt32 {
    switch region {
    case .window: windowMRU
    case .probation: probationMRU
    case .protected: protectedMRU
    }
  }

  /// The least recently used node of `region`.
  @inlinable
  @inline(__always)
  func lru(_ region: SegmentRegion) -> UInt32 {
    switch region {
    case .window: windowLRU
    case .probation: probationLRU
    case .protected: protectedLRU
    }
  }

  @inlinable
  @inline(__always)
  mutating func setMRU(_ region: SegmentRegion, _ slot: UInt32) {
    switch region {
    case .window: windowMRU = slot
    case .probation: probationMRU = slot
    case .protected: protectedMRU = slot
    }
  }

  @inlinable
  @inline(__always)
  mutating func setLRU(_ region: SegmentRegion, _ slot: UInt32) {
    switch region {
    case .window: windowLRU = slot
    case .probation: probationLRU = slot
    case .protected: protectedLRU = slot
    }
  }

  /// Takes `slot` out of its list; its region and the regions' sizes stay.
  @inlinable
  @inline(__always)
  mutating func unlink(_ slot: Int) {
    let newer = nodes[slot].newer
    let older = nodes[slot].older
    if newer != Self.none { nodes[Int(newer)].older = older } else { setMRU(nodes[slot].region, older) }
    if older != Self.none { nodes[Int(older)].newer = newer } else { setLRU(nodes[slot].region, newer) }
  }

  /// Puts an unlinked `slot` at the most recently used end of `region`.
  @inlinable
  @inline(__always)
  mutating func link(_ slot: Int, atMRUOf region: SegmentRegion) {
    let slot32 = UInt32(truncatingIfNeeded: slot)
    let head = mru(region)
    nodes[slot].region = region
    nodes[slot].newer = Self.none
    nodes[slot].older = head
    if head != Self.none { nodes[Int(head)].newer = slot32 } else { setLRU(region, slot32) }
    setMRU(region, slot32)
  }

  /// Puts an unlinked `slot` at the least recently used end of `region`.
  @inlinable
  mutating func link(_ slot: Int, atLRUOf region: SegmentRegion) {
    let slot32 = UInt32(truncatingIfNeeded: slot)
    let tail = lru(region)
    nodes[slot].region = region
    nodes[slot].older = Self.none
    nodes[slot].newer = tail
    if tail != Self.none { nodes[Int(tail)].older = slot32 } else { setMRU(region, slot32) }
    setLRU(region, slot32)
  }

  /// Marks `slot` as the most recently used node of its list.
  @inlinable
  @inline(__always)
  mutating func touch(_ slot: Int) {
    guard mru(nodes[slot].region) != UInt32(truncatingIfNeeded: slot) else { return }
    unlink(slot)
    link(slot, atMRUOf: nodes[slot].region)
  }

  /// Makes `slot`, a node of the list whose ends are `mru` and `lru`, its most recently used:
  /// the touch of a hit, which reads and writes no region.
  @inlinable
  @inline(__always)
  static func moveToFront(_ slot: Int, in nodes: UnsafeMutablePointer<Node>, mru: inout UInt32, lru: inout UInt32) {
    let slot32 = UInt32(truncatingIfNeeded: slot)
    let head = mru
    guard head != slot32 else { return }
    // Not the most recently used, so it has a newer neighbour.
    let newer = nodes[slot].newer
    let older = nodes[slot].older
    nodes[Int(newer)].older = older
    if older != Self.none { nodes[Int(older)].newer = newer } else { lru = newer }
    nodes[slot].newer = Self.none
    nodes[slot].older = head
    nodes[Int(head)].newer = slot32
    mru = slot32
  }

  /// Adds one node of `cost` to `region`'s size (`sign` -1 takes it away). Probation's size is
  /// what the other two leave of the totals.
  @inlinable
  @inline(__always)
  mutating func account(_ region: SegmentRegion, cost: Int64, sign: Int) {
    switch region {
    case .window:
      admission.windowCount &+= sign
      admission.windowCost &+= Int64(sign) &* cost
    case .probation:
      break
    case .protected:
      admission.protectedCount &+= sign
      admission.protectedCost &+= Int64(sign) &* cost
    }
  }

  /// Moves `slot` to the most recently used end of `region`, carrying its size over.
  @inlinable
  mutating func move(_ slot: Int, toMRUOf region: SegmentRegion) {
    let cost = nodes[slot].cost
    account(nodes[slot].region, cost: cost, sign: -1)
    unlink(slot)
    link(slot, atMRUOf: region)
    account(region, cost: cost, sign: 1)
  }
}
