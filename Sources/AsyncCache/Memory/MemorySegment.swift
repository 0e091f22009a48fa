/// A hash map whose entries are ordered for eviction: the storage of one segment of a memory
/// layer, under ``EvictionPolicy/leastRecentlyUsed``, ``EvictionPolicy/windowTinyLFU`` or
/// ``EvictionPolicy/adaptive``.
///
/// Layout, chosen for a small footprint and one cache miss per hit:
/// - nodes live in the hash table itself, at most 4/5 full: a node's slot is on the probe path
///   of its key's hash, so a hit reads a control byte (in a small array that stays in cache)
///   and then its node, instead of an index entry and then a node elsewhere;
/// - the table is a Swiss table of groups of 16 slots: one control byte per slot (empty, or 7
///   bits of the hash of the live node's key), probed a group at a time, group after group from
///   the key's home group. Each group counts the nodes whose probe went past it (as folly's
///   F14 does), and a probe stops at a group whose count is 0. So a removal just empties its
///   slot (and takes its node off the counts it added to): no deleted slots, which under churn
///   would fill the table until a pass over all of it, under the lock, cleared them. Nodes
///   never move but when the table is rebuilt (it grows or shrinks), which relinks the lists;
/// - the lists link nodes through 32-bit slot numbers: one recency list under LRU; W-TinyLFU's
///   window, probation and protected lists otherwise (the tests hold a plain reference model,
///   `WTinyLFUPolicy`, that this implementation must match step for step);
/// - a hit moves nothing at once: it queues its slot, and the queue's moves are made in order
///   when it is full or before any other operation reads or changes the lists
///   (``recordHit(_:hash:)``), so the lists read as if each had been made at once.
///
/// Not thread-safe: ``MemoryStore`` keeps each segment behind its own lock.
@usableFromInline
struct MemorySegment<Key: Hashable, Value>: ~Copyable {
  @usableFromInline typealias Node = MemoryNode<Key, Value>

  /// The absent link.
  @usableFromInline static var none: UInt32 { .max }

  // Field order is layout order: a hit writes `hits` (and `requestHits`) and reads `nodes` and
  // `controls`, which share the cache line of the lock (and its index hint); then come
  // `slotCount`, `pendingHitCount` and the queue of hits it writes one slot of (on the next
  // two lines), then the policy's state, whose first fields a W-TinyLFU hit writes (on the
  // line after). (`windowMRU` and `windowLRU` come first for no reason of speed: a hit no longer
  // writes them.)
  /// The window's (LRU's only list's) most recently used node.
  @usableFromInline var windowMRU: UInt32
  /// The window's least recently used node.
  @usableFromInline var windowLRU: UInt32
  @usableFromInline var hits: Int
  /// The hits of a loading cache's requests (a subset of `hits`).
  @usableFromInline var requestHits: Int
  /// The nodes, each at a slot of the table: `slotCount` of them, initialized where
  /// `controls` says a node lives.
  @usableFromInline var nodes: UnsafeMutablePointer<Node>
  /// One control byte per slot: ``empty`` or a live node's ``control(of:)``; then one byte per
  /// group, its overflow count (``overflowCount(of:)``).
  @usableFromInline var controls: UnsafeMutablePointer<UInt8>
  /// The table's length: whole groups of ``groupLength``, any number of them, so that a segment
  /// bounded to `n` entries has about `5n / 4` slots (``slotCount(forCapacity:)``).
  @usableFromInline var slotCount: Int
  /// How many hits ``pendingHits`` holds.
  @usableFromInline var pendingHitCount: Int
  /// Lookups until the ``sampler`` watches one; `Int.max` while it is off. Beside
  /// ``pendingHitCount``: a hit writes both, on one cache line.
  @usableFromInline var sampleCountdown = Int.max
  /// ``KeySample/threshold`` when the layer keeps a ``KeySample``, else 0: a hit on a key whose
  /// mixed hash is below it is an access to a sampled key.
  @usableFromInline var keySampleThreshold: UInt64 = 0
  /// The slots of the hits whose moves up their lists are not made yet, oldest first (see
  /// ``recordHit(_:hash:)``); ``pendingHitCapacity`` of them.
  @usableFromInline var pendingHits:
    (
      UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32, UInt32,
      UInt32, UInt32
    )
  @usableFromInline var admission: SegmentAdmission
  /// The nodes the table holds before it grows (``capacity(forSlots:)``).
  @usableFromInline var capacity: Int
  @usableFromInline var count: Int
  /// How many times the table was rebuilt (for tests and diagnostics: each holds the lock for a
  /// pass over the whole table); only growing and shrinking rebuild it.
  @usableFromInline var rebuilds = 0
  @usableFromInline var totalCost: Int64
  @usableFromInline var misses: Int
  @usableFromInline var evictions: EvictionCounts
  @usableFromInline var probationMRU: UInt32
  @usableFromInline var probationLRU: UInt32
  @usableFromInline var protectedMRU: UInt32
  @usableFromInline var protectedLRU: UInt32
  /// Hits on window entries since the store last collected them (W-TinyLFU only; see
  /// ``WindowTarget/relax()``). 64 bits on every platform, as the span's sums they go into.
  @usableFromInline var windowHits: Int64 = 0
  /// Hits on main-region entries (probation and protected) since the store last collected them.
  @usableFromInline var mainHits: Int64 = 0
  /// The metadata of the nodes that have any (``MemoryNode/hasMetadata``), by key. Empty, and
  /// never read, in a layer whose entries carry none.
  @usableFromInline var metadata: [Key: EntryMetadata] = [:]
  /// The generation of the nodes' ``MemoryNode/aliveStamp``s: a node stamped with it had its tags
  /// found alive when ``tagsCheckedAt`` invalidations were recorded. 1 to 65,535, cycling (see
  /// ``advanceTagGeneration(to:)``).
  @usableFromInline var tagGeneration: UInt16 = 1
  /// How many tag invalidations were recorded when ``tagGeneration`` began.
  @usableFromInline var tagsCheckedAt: UInt64 = 0
  /// The next slot ``advanceTagGeneration(to:)`` sweeps.
  @usableFromInline var stampSweepSlot = 0
  /// The lookups watched for the hit-ratio curve, and their reuse times (off until the store
  /// starts it).
  @usableFromInline var sampler = ReuseSampler()

  @usableFromInline static var initialCapacity: Int { 4 }
  /// How many hits wait in ``pendingHits`` before their moves are made together.
  @usableFromInline static var pendingHitCapacity: Int { 16 }

  init(admission: SegmentAdmission = SegmentAdmission()) {
    let slotCount = Self.slotCount(forCapacity: Self.initialCapacity)
    self.slotCount = slotCount
    capacity = Self.capacity(forSlots: slotCount)
    nodes = .allocate(capacity: slotCount)
    controls = Self.allocateControls(slots: slotCount)
    count = 0
    windowMRU = Self.none
    windowLRU = Self.none
    probationMRU = Self.none
    probationLRU = Self.none
    protectedMRU = Self.none
    protectedLRU = Self.none
    totalCost = 0
    hits = 0
    requestHits = 0
    pendingHitCount = 0
    pendingHits = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
    misses = 0
    evictions = EvictionCounts()
    self.admission = admission
  }

  deinit {
    Self.release(nodes: nodes, controls: controls, slotCount: slotCount)
  }

  /// Deinitializes the live nodes of a table of `slotCount` slots (those whose control byte has
  /// its high bit set) and deallocates its storage: a segment's own, or one it handed out
  /// (``DetachedNodes``).
  static func release(nodes: UnsafeMutablePointer<Node>, controls: UnsafeMutablePointer<UInt8>, slotCount: Int) {
    for slot in 0..<slotCount where controls[slot] >= 0x80 { (nodes + slot).deinitialize(count: 1) }
    nodes.deallocate()
    controls.deallocate()
  }

  // MARK: Index

  /// The slots of one group, whose control bytes a probe reads together (two 64-bit words).
  @inlinable
  static var groupLength: Int { 16 }

  /// The control byte of a slot without a node.
  @inlinable
  static var empty: UInt8 { 0 }

  /// The largest overflow count: a group that reaches it keeps it until the table is rebuilt
  /// (probes then always go on past it).
  @inlinable
  static var saturatedOverflow: UInt8 { .max }

  /// Storage for the control bytes of `slots` slots (whole groups), all empty, followed by the
  /// groups' overflow counts, all 0.
  @inlinable
  static func allocateControls(slots: Int) -> UnsafeMutablePointer<UInt8> {
    let bytes = slots &+ slots / groupLength
    let controls = UnsafeMutablePointer<UInt8>.allocate(capacity: bytes)
    controls.initialize(repeating: empty, count: bytes)
    return controls
  }

  @inlinable
  static func tag(of hash: Int) -> UInt32 { UInt32(truncatingIfNeeded: hash) }

  /// The control byte of a node whose key's hash has the tag `tag`: the high bit set, and 7 bits
  /// of the tag, so that a probe compares few keys that are not the one it looks for.
  @inlinable
  @inline(__always)
  static func control(of tag: UInt32) -> UInt8 {
    0x80 | UInt8(truncatingIfNeeded: (tag ^ tag &>> 15) & 0x7F)
  }

  /// The home group of a tag among `count` groups (at most 2^28): the tag, scrambled by a
  /// multiplication (so that tags that differ only in their high bits, as weak hashes' do,
  /// still spread), then scaled onto `0..<count` by the high half of a product (Lemire's fast
  /// range), which needs no power of two. 64-bit arithmetic on every platform.
  @inlinable
  @inline(__always)
  static func position(of tag: UInt32, count: Int) -> Int {
    let scrambled = UInt64(tag &* 0x9E37_79B1)
    return Int(truncatingIfNeeded: (scrambled &* UInt64(truncatingIfNeeded: count)) >> 32)
  }

  /// The position after `position` in a table of `count` positions, wrapping to 0.
  @inlinable
  @inline(__always)
  static func next(after position: Int, count: Int) -> Int {
    let next = position &+ 1
    return next == count ? 0 : next
  }

  /// The slots for `capacity` nodes: at most 4/5 of them live, in whole groups.
  @inlinable
  static func slotCount(forCapacity capacity: Int) -> Int {
    let slots = capacity &+ capacity / 4 &+ 1
    return (slots &+ (groupLength &- 1)) & ~(groupLength &- 1)
  }

  /// The nodes a table of `slots` slots holds before it grows: 4/5 of them.
  @inlinable
  static func capacity(forSlots slots: Int) -> Int {
    slots / 5 &* 4 &+ (slots % 5) &* 4 / 5
  }

  /// The number of groups.
  @inlinable
  var groupCount: Int { slotCount / Self.groupLength }

  /// Eight control bytes from `offset`, the first in the lowest byte.
  @inlinable
  @inline(__always)
  func controlWord(at offset: Int) -> UInt64 {
    UInt64(littleEndian: UnsafeRawPointer(controls + offset).loadUnaligned(as: UInt64.self))
  }

  /// The high bit of each byte of `word` that is 0, and possibly of bytes above one that is
  /// (the borrow of the subtraction); 0 exactly when no byte is 0.
  @inlinable
  @inline(__always)
  static func zeroBytes(_ word: UInt64) -> UInt64 {
    (word &- 0x0101_0101_0101_0101) & ~word & 0x8080_8080_8080_8080
  }

  /// How many nodes live past group `group` on their probe path (they found it full), at most
  /// ``saturatedOverflow``: a probe for a key goes on past the group only when it is not 0.
  @inlinable
  @inline(__always)
  func overflowCount(of group: Int) -> UInt8 {
    controls[slotCount &+ group]
  }

  /// Adds `delta` (1 or -1) to the overflow count of `group`, unless it is saturated.
  @inlinable
  @inline(__always)
  func addOverflow(_ delta: Int8, to group: Int) {
    let count = controls[slotCount &+ group]
    if count != Self.saturatedOverflow { controls[slotCount &+ group] = count &+ UInt8(bitPattern: delta) }
  }

  /// The slot of `key`, or `nil`.
  @inlinable
  @inline(__always)
  func find(_ key: Key, hash: Int) -> Int? {
    let tag = Self.tag(of: hash)
    let control = Self.control(of: tag)
    let pattern = UInt64(control) &* 0x0101_0101_0101_0101
    let groups = groupCount
    var group = Self.position(of: tag, count: groups)
    var probed = 1
    while true {
      let base = group &* Self.groupLength
      var half = 0
      while half < Self.groupLength {
        let word = controlWord(at: base &+ half)
        var candidates = Self.zeroBytes(word ^ pattern)
        while candidates != 0 {
          let slot = base &+ half &+ candidates.trailingZeroBitCount / 8
          if controls[slot] == control && nodes[slot].key == key { return slot }
          candidates &= candidates &- 1
        }
        half &+= 8
      }
      // Every group probed: the key is absent. (Nodes displaced past every group would
      // otherwise let a probe circle the table for ever.)
      if overflowCount(of: group) == 0 || probed == groups { return nil }
      probed &+= 1
      group = Self.next(after: group, count: groups)
    }
  }

  /// Takes the first slot without a node on the probe path of `tag` (the key is not present),
  /// and marks it with the tag's control byte; counts the node in the overflow count of each
  /// full group it passes.
  @inlinable
  mutating func claimSlot(tag: UInt32) -> Int {
    let groups = groupCount
    var group = Self.position(of: tag, count: groups)
    while true {
      let base = group &* Self.groupLength
      var half = 0
      while half < Self.groupLength {
        // Empty slots have the high bit clear.
        let free = ~controlWord(at: base &+ half) & 0x8080_8080_8080_8080
        if free != 0 {
          let slot = base &+ half &+ free.trailingZeroBitCount / 8
          controls[slot] = Self.control(of: tag)
          return slot
        }
        half &+= 8
      }
      addOverflow(1, to: group)
      group = Self.next(after: group, count: groups)
    }
  }

  /// Empties `slot`, whose node is still there: takes the node off the overflow counts of the
  /// groups its probe passed. Only a node outside its home group passed any, and then the group
  /// before its own has a count: only then is its key hashed again to find its home.
  @inlinable
  mutating func releaseSlot(_ slot: Int) {
    let group = slot / Self.groupLength
    let groups = groupCount
    let previous = group == 0 ? groups &- 1 : group &- 1
    if previous != group && overflowCount(of: previous) != 0 {
      var passed = Self.position(of: Self.tag(of: nodes[slot].key.hashValue), count: groups)
      while passed != group {
        addOverflow(-1, to: passed)
        passed = Self.next(after: passed, count: groups)
      }
    }
    controls[slot] = Self.empty
  }

  /// Moves every node into a table of `newSlotCount` slots, relinking the lists. Settles the
  /// pending hits first: they name slots.
  @inlinable
  mutating func rebuild(slots newSlotCount: Int) {
    settleHits()
    rebuilds &+= 1
    let oldControls = controls
    let oldNodes = nodes
    let oldSlotCount = slotCount
    controls = Self.allocateControls(slots: newSlotCount)
    nodes = .allocate(capacity: newSlotCount)
    slotCount = newSlotCount
    capacity = Self.capacity(forSlots: newSlotCount)
    // Where each old slot's node went; read only for the slots the lists link, which are live.
    let moved = UnsafeMutablePointer<UInt32>.allocate(capacity: oldSlotCount)
    defer { moved.deallocate() }
    for old in 0..<oldSlotCount where oldControls[old] >= 0x80 {
      let slot = claimSlot(tag: Self.tag(of: oldNodes[old].key.hashValue))
      (nodes + slot).moveInitialize(from: oldNodes + old, count: 1)
      // The sweep of stamps goes by slot, and nodes move: each is checked again (once).
      nodes[slot].aliveStamp = 0
      moved[old] = UInt32(truncatingIfNeeded: slot)
    }
    for slot in 0..<newSlotCount where controls[slot] >= 0x80 {
      let newer = nodes[slot].newer
      let older = nodes[slot].older
      if newer != Self.none { nodes[slot].newer = moved[Int(newer)] }
      if older != Self.none { nodes[slot].older = moved[Int(older)] }
    }
    for region in SegmentRegion.allCases {
      let head = mru(region)
      let tail = lru(region)
      if head != Self.none { setMRU(region, moved[Int(head)]) }
      if tail != Self.none { setLRU(region, moved[Int(tail)]) }
    }
    oldControls.deallocate()
    oldNodes.deallocate()
  }

  /// Makes room for one more node.
  ///
  /// The table doubles up to the segment's share of the count limit, then grows by 1/32 at a
  /// time (an uneven spread of keys may give a segment a little more than its share: one step
  /// is usually enough), so that a full bounded segment wastes almost nothing. A full segment
  /// under churn is never rebuilt: removals leave no deleted slots behind.
  @inlinable
  mutating func reserveOneMore() {
    guard count == capacity else { return }
    let share = admission.countShare
    let grown =
      capacity < share
      ? Swift.max(capacity &+ 1, Swift.min(capacity &* 2, share))
      : capacity &+ Swift.max(capacity / 32, Self.initialCapacity)
    rebuild(slots: Self.slotCount(forCapacity: grown))
  }

  /// Gives memory back when the segment holds far fewer nodes than it has room for.
  @inlinable
  mutating func shrinkIfSparse() {
    guard capacity > Self.initialCapacity, count &* 4 <= capacity else { return }
    let slots = Self.slotCount(forCapacity: Swift.max(Self.initialCapacity, count &* 2))
    if slots < slotCount { rebuild(slots: slots) }
  }

  /// Calls `body` with the slot of every node, in slot order. `body` may remove the node at the
  /// slot it is given (no other node moves).
  @inlinable
  mutating func forEachSlot(_ body: (inout Self, Int) -> Void) {
    for slot in 0..<slotCount where controls[slot] >= 0x80 { body(&self, slot) }
  }

  /// The slots that hold nodes, in slot order.
  @inlinable
  var liveSlots: [Int] {
    (0..<slotCount).filter { controls[$0] >= 0x80 }
  }
}
