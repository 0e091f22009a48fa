// What tests read of a `MemorySegment`: the keys of each region and the structural invariants.

extension MemorySegment {
  /// The keys in `region`, from its least to its most recently used. O(n); for tests.
  func keys(in region: SegmentRegion) -> [Key] {
    var keys: [Key] = []
    var cursor = lru(region)
    while cursor != Self.none {
      keys.append(nodes[Int(cursor)].key)
      cursor = nodes[Int(cursor)].newer
    }
    return keys
  }

  /// Checks every structural invariant and returns the violations (empty when sound). O(n).
  /// For tests.
  func invariantViolations() -> [String] {
    var problems: [String] = []
    if pendingHitCount != 0 { problems.append("\(pendingHitCount) hits are not settled") }
    // Every live slot's control byte matches its key, and probing from its home finds it; the
    // count of live slots is the segment's; each group's overflow count is the number of nodes
    // whose probe passed it, unless it saturated (then it stays, whatever passes).
    var live = 0
    var overflows = [Int](repeating: 0, count: groupCount)
    for slot in 0..<slotCount {
      switch controls[slot] {
      case Self.empty:
        break
      case let control where control >= 0x80:
        live += 1
        let hash = nodes[slot].key.hashValue
        if control != Self.control(of: Self.tag(of: hash)) {
          problems.append("slot \(slot) has a control byte that does not match its key")
        }
        if find(nodes[slot].key, hash: hash) != slot {
          problems.append("slot \(slot) is not reachable from its home group")
        }
        var passed = Self.position(of: Self.tag(of: hash), count: groupCount)
        while passed != slot / Self.groupLength {
          overflows[passed] += 1
          passed = Self.next(after: passed, count: groupCount)
        }
      case let control:
        problems.append("slot \(slot) has the control byte \(control)")
      }
    }
    for group in 0..<groupCount where overflowCount(of: group) != Self.saturatedOverflow {
      if Int(overflowCount(of: group)) != overflows[group] {
        problems.append("group \(group) counts \(overflowCount(of: group)) nodes past it, \(overflows[group]) passed")
      }
    }
    if live != count { problems.append("\(live) live slots for \(count) nodes") }
    if count > capacity { problems.append("\(count) nodes over the capacity \(capacity)") }
    // Each list visits its nodes once, in both directions; together they hold every node.
    var seen = Set<Int>()
    var sizes: [SegmentRegion: (count: Int, cost: Int64)] = [:]
    for region in SegmentRegion.allCases {
      var cursor = lru(region)
      var previous = Self.none
      var size = (count: 0, cost: Int64(0))
      while cursor != Self.none, seen.count <= count {
        let node = nodes[Int(cursor)]
        if !seen.insert(Int(cursor)).inserted { problems.append("node \(cursor) is linked twice") }
        if node.region != region { problems.append("node \(cursor) in \(region) says \(node.region)") }
        if node.older != previous { problems.append("node \(cursor) has a wrong older link") }
        size.count += 1
        size.cost += node.cost
        previous = cursor
        cursor = node.newer
      }
      if previous != mru(region) { problems.append("\(region) ends at \(previous), its MRU is \(mru(region))") }
      sizes[region] = size
    }
    if seen.count != count { problems.append("the lists hold \(seen.count) nodes, the segment \(count)") }
    for slot in liveSlots where (nodes[slot].costAndRegion >> Node.regionShift) & 3 > 2 {
      problems.append("node \(slot) has cost and region bits \(nodes[slot].costAndRegion)")
    }
    let window = sizes[.window] ?? (0, Int64(0))
    let protected = sizes[.protected] ?? (0, Int64(0))
    if window.count != admission.windowCount || window.cost != admission.windowCost {
      problems.append("the window holds \(window), its size says \((admission.windowCount, admission.windowCost))")
    }
    if protected.count != admission.protectedCount || protected.cost != admission.protectedCost {
      problems.append(
        "protected holds \(protected), its size says \((admission.protectedCount, admission.protectedCost))"
      )
    }
    if admission.isEnabled {
      if windowOverflows { problems.append("the window \(window) is over its size") }
      if protectedOverflows { problems.append("protected \(protected) is over its size") }
    } else if window.count != count {
      problems.append("LRU keeps \(count - window.count) nodes outside its list")
    }
    var cost: Int64 = 0
    for slot in liveSlots { cost += nodes[slot].cost }
    if cost != totalCost { problems.append("totalCost \(totalCost) but nodes sum to \(cost)") }
    let flagged = liveSlots.filter { nodes[$0].hasMetadata }
    if flagged.count != metadata.count {
      problems.append("\(flagged.count) nodes have metadata, the metadata table holds \(metadata.count)")
    }
    for slot in flagged where metadata[nodes[slot].key]?.isEmpty != false {
      problems.append("node \(slot) has metadata, the table none")
    }
    for slot in liveSlots where !nodes[slot].hasMetadata && nodes[slot].aliveStamp != 0 {
      problems.append("node \(slot) has no tags, yet a stamp that says they are alive")
    }
    if tagGeneration == 0 { problems.append("the tag generation is 0, the stamp of a node never checked") }
    return problems
  }
}
