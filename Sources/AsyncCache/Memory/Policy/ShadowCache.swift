/// A W-TinyLFU of keys only, running one ``PolicyExpert`` beside a small adaptive layer: it is fed
/// every access of the layer and says whether that configuration would have hit, so that
/// ``PolicyReferee`` can compare configurations on the workload itself.
///
/// It holds the keys' 32-bit hash tags and nothing else, in the layer's capacity, and follows
/// ``MemorySegment``'s policy step for step (window, probation and protected lists; window
/// overflow becomes a candidate that duels probation's least recently used entry; victims from
/// probation, then protected, then the window), with the expert's sizes and admission rule.
/// Duels read the layer's own frequency sketch, which counts the same accesses. Two keys whose
/// tags collide count as one, rarely (one pair in 2^32).
///
/// 16 to 20 bytes per entry (a tag, two 16-bit links and a region in a 12-byte node, and two to
/// four 16-bit slots of the index); at most 65,534 entries. Its storage is unmanaged and its own:
/// noncopyable, a shadow releases it when it ends, and no copy can hold list heads that disagree
/// with the nodes. It lives in a ``ShadowSet`` and is reached through the set's pointer, so that
/// an access neither counts references nor checks exclusivity. Not thread-safe: owned by a
/// segment's referee, under the segment's lock.
struct ShadowCache: ~Copyable {
  /// The absent link.
  static var none: UInt16 { .max }

  /// One entry: its tag, its neighbours in its list, and the list.
  struct Node {
    var tag: UInt32
    var newer: UInt16
    var older: UInt16
    var region: SegmentRegion
  }

  let capacity: Int
  let expert: PolicyExpert
  let windowMaximum: Int
  let protectedMaximum: Int
  private(set) var count = 0
  /// The nodes: one more than the capacity (an insert comes before the eviction it causes).
  private let nodes: UnsafeMutablePointer<Node>
  /// Open addressing over the tags, linear probing: node + 1, or 0 for an empty slot; a power of
  /// two of slots, at least twice the capacity.
  private let index: UnsafeMutablePointer<UInt16>
  private let indexMask: Int
  private let indexShift: UInt32
  /// Nodes never used yet start at ``unused``; freed ones are chained through `newer` from
  /// ``freeList``.
  private var unused: UInt16 = 0
  private var freeList = ShadowCache.none
  private var windowMRU = ShadowCache.none
  private var windowLRU = ShadowCache.none
  private var probationMRU = ShadowCache.none
  private var probationLRU = ShadowCache.none
  private var protectedMRU = ShadowCache.none
  private var protectedLRU = ShadowCache.none
  private var windowSize = 0
  private var probationSize = 0
  private var protectedSize = 0
  private var random: SplitMix64

  /// An empty shadow of `capacity` entries (1 to 65,534) running `expert`; `seed` draws its rare
  /// random admissions.
  init(capacity: Int, expert: PolicyExpert, seed: UInt64) {
    precondition((1...65_534).contains(capacity), "a shadow holds 1 to 65,534 entries")
    self.capacity = capacity
    self.expert = expert
    (windowMaximum, protectedMaximum) = expert.maximums(of: capacity)
    let nodeCount = capacity + 1
    nodes = .allocate(capacity: nodeCount)
    nodes.initialize(repeating: Node(tag: 0, newer: Self.none, older: Self.none, region: .window), count: nodeCount)
    var bits: UInt32 = 4
    while 1 << bits < 2 * capacity { bits += 1 }
    index = .allocate(capacity: 1 << bits)
    index.initialize(repeating: 0, count: 1 << bits)
    indexMask = (1 << bits) - 1
    indexShift = 32 - bits
    random = SplitMix64(seed: seed)
  }

  deinit {
    nodes.deallocate()
    index.deallocate()
  }

  /// The entries in `region`, for tests.
  func count(in region: SegmentRegion) -> Int {
    switch region {
    case .window: windowSize
    case .probation: probationSize
    case .protected: protectedSize
    }
  }

  /// Whether the shadow holds the key with `tag`, for tests.
  func contains(_ tag: UInt32) -> Bool { find(tag) != Self.none }

  /// Records an access to the key with hash tag `tag`, with the layer's `sketch` already counting
  /// it: a hit moves the key up its lists, a miss inserts it and evicts what the expert would.
  /// - Returns: Whether the access hit.
  mutating func access(_ tag: UInt32, sketch: borrowing FrequencySketch) -> Bool {
    let node = find(tag)
    if node != Self.none {
      switch nodes[Int(node)].region {
      case .window:
        moveToMRU(node, of: .window)
      case .protected:
        moveToMRU(node, of: .protected)
      case .probation:
        if protectedMaximum < 1 {
          moveToMRU(node, of: .probation)
        } else {
          moveToMRU(node, of: .protected)
          while protectedSize > protectedMaximum, protectedLRU != Self.none { moveToMRU(protectedLRU, of: .probation) }
        }
      }
      return true
    }
    let inserted = allocateNode()
    nodes[Int(inserted)].tag = tag
    insertIntoIndex(inserted, tag: tag)
    link(inserted, atMRUOf: .window)
    count &+= 1
    while windowSize > windowMaximum, windowLRU != Self.none { moveToMRU(windowLRU, of: .probation) }
    if count > capacity { evict(sparing: inserted, sketch: sketch) }
    return false
  }

  // MARK: Eviction, as MemorySegment.evict without costs

  @inline(__always)
  private mutating func evict(sparing spared: UInt16, sketch: borrowing FrequencySketch) {
    var victimRegion = SegmentRegion.probation
    var candidateRegion = SegmentRegion.probation
    var victim = probationLRU
    var candidate = probationMRU
    while count > capacity {
      if candidate == Self.none && candidateRegion == .probation {
        candidate = windowLRU
        candidateRegion = .window
      }
      if candidate == Self.none && victim == Self.none {
        switch victimRegion {
        case .probation:
          victim = protectedLRU
          victimRegion = .protected
          continue
        case .protected:
          victim = windowLRU
          victimRegion = .window
          continue
        case .window:
          return
        }
      }
      if victim != Self.none && victim == spared {
        victim = nodes[Int(victim)].newer
        continue
      }
      if candidate != Self.none && candidate == spared {
        candidate = next(after: candidate, in: candidateRegion)
        continue
      }
      let leaving: UInt16
      var advanceCandidate = false
      if victim == Self.none {
        leaving = candidate
        candidate = next(after: candidate, in: candidateRegion)
      } else if candidate == Self.none {
        leaving = victim
        victim = nodes[Int(victim)].newer
      } else if candidate == victim {
        leaving = victim
        victim = nodes[Int(victim)].newer
        candidate = Self.none
      } else if PolicyExpert.admits(
        candidateFrequency: sketch.frequency(Int(truncatingIfNeeded: nodes[Int(candidate)].tag)),
        victimFrequency: sketch.frequency(Int(truncatingIfNeeded: nodes[Int(victim)].tag)),
        by: expert.admission, random: &random)
      {
        leaving = victim
        victim = nodes[Int(victim)].newer
        advanceCandidate = true
      } else {
        leaving = candidate
        candidate = next(after: candidate, in: candidateRegion)
      }
      remove(leaving)
      if advanceCandidate { candidate = next(after: candidate, in: candidateRegion) }
    }
  }

  /// The next candidate after `candidate`: older in probation, newer in the window.
  @inline(__always)
  private func next(after candidate: UInt16, in region: SegmentRegion) -> UInt16 {
    region == .window ? nodes[Int(candidate)].newer : nodes[Int(candidate)].older
  }

  // MARK: Lists

  @inline(__always)
  private func mru(_ region: SegmentRegion) -> UInt16 {
    switch region {
    case .window: windowMRU
    case .probation: probationMRU
    case .protected: protectedMRU
    }
  }

  @inline(__always)
  private mutating func setMRU(_ region: SegmentRegion, _ node: UInt16) {
    switch region {
    case .window: windowMRU = node
    case .probation: probationMRU = node
    case .protected: protectedMRU = node
    }
  }

  @inline(__always)
  private mutating func setLRU(_ region: SegmentRegion, _ node: UInt16) {
    switch region {
    case .window: windowLRU = node
    case .probation: probationLRU = node
    case .protected: protectedLRU = node
    }
  }

  @inline(__always)
  private mutating func addSize(_ delta: Int, to region: SegmentRegion) {
    switch region {
    case .window: windowSize &+= delta
    case .probation: probationSize &+= delta
    case .protected: protectedSize &+= delta
    }
  }

  @inline(__always)
  private mutating func unlink(_ node: UInt16) {
    let region = nodes[Int(node)].region
    let newer = nodes[Int(node)].newer
    let older = nodes[Int(node)].older
    if newer != Self.none { nodes[Int(newer)].older = older } else { setMRU(region, older) }
    if older != Self.none { nodes[Int(older)].newer = newer } else { setLRU(region, newer) }
    addSize(-1, to: region)
  }

  @inline(__always)
  private mutating func link(_ node: UInt16, atMRUOf region: SegmentRegion) {
    let head = mru(region)
    nodes[Int(node)].region = region
    nodes[Int(node)].newer = Self.none
    nodes[Int(node)].older = head
    if head != Self.none { nodes[Int(head)].newer = node } else { setLRU(region, node) }
    setMRU(region, node)
    addSize(1, to: region)
  }

  @inline(__always)
  private mutating func moveToMRU(_ node: UInt16, of region: SegmentRegion) {
    guard nodes[Int(node)].region != region || mru(region) != node else { return }
    unlink(node)
    link(node, atMRUOf: region)
  }

  @inline(__always)
  private mutating func allocateNode() -> UInt16 {
    if freeList != Self.none {
      let node = freeList
      freeList = nodes[Int(node)].newer
      return node
    }
    let node = unused
    unused &+= 1
    return node
  }

  @inline(__always)
  private mutating func remove(_ node: UInt16) {
    unlink(node)
    removeFromIndex(node)
    nodes[Int(node)].newer = freeList
    freeList = node
    count &-= 1
  }

  // MARK: Index

  /// The home slot of `tag` in the index.
  @inline(__always)
  private func home(of tag: UInt32) -> Int {
    Int(truncatingIfNeeded: (tag &* 0x9E37_79B1) >> indexShift)
  }

  /// The node holding `tag`, or ``none``.
  @inline(__always)
  private func find(_ tag: UInt32) -> UInt16 {
    let mask = indexMask
    var slot = home(of: tag)
    while true {
      let entry = index[slot]
      if entry == 0 { return Self.none }
      if nodes[Int(entry &- 1)].tag == tag { return entry &- 1 }
      slot = (slot &+ 1) & mask
    }
  }

  @inline(__always)
  private func insertIntoIndex(_ node: UInt16, tag: UInt32) {
    let mask = indexMask
    var slot = home(of: tag)
    while index[slot] != 0 { slot = (slot &+ 1) & mask }
    index[slot] = node &+ 1
  }

  /// Removes `node` from the index, moving back the entries after it that its slot let past
  /// their home (backward-shift deletion: no tombstones).
  @inline(__always)
  private func removeFromIndex(_ node: UInt16) {
    let mask = indexMask
    var hole = home(of: nodes[Int(node)].tag)
    while index[hole] != node &+ 1 { hole = (hole &+ 1) & mask }
    var slot = hole
    while true {
      slot = (slot &+ 1) & mask
      let entry = index[slot]
      if entry == 0 { break }
      let wanted = home(of: nodes[Int(entry &- 1)].tag)
      // The entry may move into the hole unless its home lies after the hole, up to the slot
      // (cyclically): then it was never displaced past the hole.
      let homeAfterHole = hole <= slot ? (wanted > hole && wanted <= slot) : (wanted > hole || wanted <= slot)
      if !homeAfterHole {
        index[hole] = entry
        hole = slot
      }
    }
    index[hole] = 0
  }
}

/// The shadows of a referee, one per expert, side by side in one allocation that the set owns
/// and ends (each shadow then releases its storage): copies of the referee share it, never a
/// part of it.
final class ShadowSet {
  /// The shadows, ``count`` of them.
  let shadows: UnsafeMutablePointer<ShadowCache>
  let count: Int

  /// Empty shadows of `capacity` entries, one per expert; `seed` draws their rare random
  /// admissions.
  init(capacity: Int, experts: [PolicyExpert], seed: UInt64) {
    count = experts.count
    shadows = .allocate(capacity: experts.count)
    for (index, expert) in experts.enumerated() {
      (shadows + index).initialize(
        to: ShadowCache(capacity: capacity, expert: expert, seed: seed &+ UInt64(index) &+ 1))
    }
  }

  deinit {
    shadows.deinitialize(count: count)
    shadows.deallocate()
  }
}
