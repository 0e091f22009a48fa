// The operations of a `MemorySegment`: append, remove, evict and clear.

extension MemorySegment {
  /// Adds a node for a key that is not present, at the window's (LRU's) MRU end; under
  /// W-TinyLFU, counts the key in the sketch.
  @inlinable
  @discardableResult
  mutating func append(_ node: consuming Node, hash: Int) -> Int {
    reserveOneMore()
    let tag = Self.tag(of: hash)
    let slot = claimSlot(tag: tag)
    node.region = .window
    totalCost &+= node.cost
    account(.window, cost: node.cost, sign: 1)
    (nodes + slot).initialize(to: node)
    count &+= 1
    link(slot, atMRUOf: .window)
    if admission.isEnabled {
      admission.growSketchIfNeeded(count: count)
      admission.recordUse(tag)
    }
    return slot
  }

  /// The metadata of the node for `key` at `slot`: empty when it has none (its flag is clear),
  /// without a lookup in ``metadata`` then.
  @inlinable
  func metadata(at slot: Int, key: Key) -> EntryMetadata {
    nodes[slot].hasMetadata ? metadata[key] ?? EntryMetadata() : EntryMetadata()
  }

  /// Gives the node for `key` at `slot` `entryMetadata`, its flag and the table together; empty
  /// metadata clears both. New tags are not known to be alive: the stamp is cleared.
  @inlinable
  mutating func setMetadata(_ entryMetadata: EntryMetadata, at slot: Int, key: Key) {
    nodes[slot].aliveStamp = 0
    if !entryMetadata.isEmpty {
      nodes[slot].hasMetadata = true
      metadata[key] = entryMetadata
    } else if nodes[slot].hasMetadata {
      nodes[slot].hasMetadata = false
      metadata.removeValue(forKey: key)
    }
  }

  /// Removes the node at `slot` and returns it. No other node moves.
  @inlinable
  @discardableResult
  mutating func remove(slot: Int) -> Node {
    unlink(slot)
    releaseSlot(slot)
    let removed = (nodes + slot).move()
    if removed.hasMetadata { metadata.removeValue(forKey: removed.key) }
    totalCost &-= removed.cost
    account(removed.region, cost: removed.cost, sign: -1)
    count &-= 1
    return removed
  }

  /// Removes the node at `slot`, which a lookup found expired or dead by tag, and returns it,
  /// counting the miss and the eviction for `reason`.
  @inlinable
  mutating func drop(_ slot: Int, because reason: EvictionReason) -> Node {
    settleHits()
    let removed = remove(slot: slot)
    misses &+= 1
    evictions[reason] &+= 1
    return removed
  }

  /// The node that would leave first without a duel: probation's LRU end, then the window's,
  /// then protected's (LRU: the least recently used), or ``none`` when empty.
  @inlinable
  var firstVictim: UInt32 {
    if probationLRU != Self.none { return probationLRU }
    if windowLRU != Self.none { return windowLRU }
    return protectedLRU
  }

  /// Removes and returns the node that would leave first (``firstVictim``), if any.
  @inlinable
  mutating func removeFirstVictim() -> Node? {
    let victim = firstVictim
    guard victim != Self.none else { return nil }
    return remove(slot: Int(victim))
  }

  /// Removes every node in O(1): the old storage is handed back, to be released by the caller
  /// after it unlocks, and the segment starts over at its initial size. The sketch keeps what
  /// it learnt, and so does a referee unless `releasingReferee` (memory pressure): its shadows
  /// go, and a new referee starts from the same expert at the segment's next insert.
  @inlinable
  mutating func detachAllNodes(releasingReferee: Bool = false) -> DetachedNodes<Key, Value> {
    if releasingReferee {
      // The queued uses go to the old shadows, not to the new ones: those start empty, as the
      // segment does.
      admission.countPendingUses()
      admission.releaseReferee()
    }
    let detached = DetachedNodes<Key, Value>(
      nodes: nodes, controls: controls, slotCount: slotCount, metadata: metadata)
    metadata = [:]
    slotCount = Self.slotCount(forCapacity: Self.initialCapacity)
    capacity = Self.capacity(forSlots: slotCount)
    nodes = .allocate(capacity: slotCount)
    controls = Self.allocateControls(slots: slotCount)
    count = 0
    totalCost = 0
    for region in SegmentRegion.allCases {
      setMRU(region, Self.none)
      setLRU(region, Self.none)
    }
    admission.windowCount = 0
    admission.windowCost = 0
    admission.protectedCount = 0
    admission.protectedCost = 0
    return detached
  }

  /// Calls `body` with every node in eviction order: probation, the window, then protected,
  /// each from its least to its most recently used (LRU: least to most recently used).
  @inlinable
  func forEachInEvictionOrder(_ body: (Node) -> Void) {
    for region in [SegmentRegion.probation, .window, .protected] {
      var cursor = lru(region)
      while cursor != Self.none {
        body(nodes[Int(cursor)])
        cursor = nodes[Int(cursor)].newer
      }
    }
  }
}
