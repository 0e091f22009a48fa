// How a segment remembers that a node's tags were found alive, so that a hit on an entry with
// tags, once tags were invalidated, checks no more than the node's stamp, in bits of the word
// the hit reads for the node's region, and two words of the segment (one more cache line of
// it than a hit on an entry without tags reads, +0 to 3 ns in `tags.invalidate`), instead of
// looking its key up again in the segment's table of metadata.
//
// A node stamped with the segment's current ``MemorySegment/tagGeneration`` had its tags found
// alive when ``MemorySegment/tagsCheckedAt`` invalidations were recorded. Any invalidation
// recorded since changes the count, which starts a new generation: every stamp is then old, and
// each node is checked again (once) on its next hit.
//
// A stamp has 16 bits, so generations cycle, and a node that no hit reached for 65,535 of them
// would read as checked in the current one. The sweep rules that out: each new generation clears
// the stamps of the next `slotCount / 32,768` slots (rounded up), so a stamp is cleared within
// 32,768 generations of being set, half a cycle. It costs two slots per generation in a segment
// of 50,000 entries; rebuilding the table (which moves nodes to other slots) clears every stamp.

extension MemorySegment {
  /// How many generations may pass before the sweep has cleared every stamp: half the 65,535
  /// the stamps cycle through.
  @inlinable
  static var stampSweepGenerations: Int { 32_768 }

  /// Whether the tags of the node at `slot` are known alive with `recorded` invalidations on
  /// record: it was stamped in this generation, and none was recorded since it began.
  @inlinable
  @inline(__always)
  func tagsAreKnownAlive(at slot: Int, recorded: UInt64) -> Bool {
    tagsCheckedAt == recorded && nodes[slot].aliveStamp == tagGeneration
  }

  /// Starts a new generation if invalidations were recorded since the current one began
  /// (`recorded` is their count now), so that every node is checked again.
  @inlinable
  mutating func advanceTagGeneration(to recorded: UInt64) {
    guard recorded != tagsCheckedAt else { return }
    tagsCheckedAt = recorded
    tagGeneration = tagGeneration == .max ? 1 : tagGeneration &+ 1
    // Clear the stamps of the next slots: every slot once per `stampSweepGenerations`.
    let sweep = (slotCount &+ Self.stampSweepGenerations &- 1) / Self.stampSweepGenerations
    var slot = stampSweepSlot < slotCount ? stampSweepSlot : 0
    for _ in 0..<sweep {
      // Only stamps that are set: a write dirties the node's cache line.
      if controls[slot] >= 0x80, nodes[slot].aliveStamp != 0 { nodes[slot].aliveStamp = 0 }
      slot = slot &+ 1 == slotCount ? 0 : slot &+ 1
    }
    stampSweepSlot = slot
  }

  /// Records that the tags of the node at `slot` were found alive in the current generation.
  @inlinable
  mutating func markTagsAlive(at slot: Int) {
    nodes[slot].aliveStamp = tagGeneration
  }
}
