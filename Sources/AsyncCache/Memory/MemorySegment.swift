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

  // MARK: Lists

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

  // MARK: W-TinyLFU

  /// Whether the window is over its size.
  ///
  /// An entry costing more than the window's share of the cost limit passes straight on to
  /// probation as a candidate (as in Caffeine); the insert that wrote it still spares it.
  @inlinable
  var windowOverflows: Bool {
    admission.windowCount > admission.windowCountMaximum || admission.windowCost > admission.windowCostMaximum
  }

  /// Whether protected is over its size.
  @inlinable
  var protectedOverflows: Bool {
    admission.protectedCount > admission.protectedCountMaximum
      || admission.protectedCost > admission.protectedCostMaximum
  }

  /// Records a hit on `slot`: under W-TinyLFU counts it in the sketch and moves it up its lists
  /// (window to the window's MRU end, probation to protected, protected to protected's MRU
  /// end); under LRU makes it the most recently used.
  ///
  /// The move waits in ``pendingHits``, and ``settleHits()`` makes the moves of the queue in
  /// order when it is full, or before anything else reads or changes the lists (the store's
  /// `withLock` settles first; only its lookups do not). A move writes the node's neighbours,
  /// which are rarely in cache: made at once, each hit waited for two misses (about 30 ns of a
  /// 100 ns hit over 100k keys). Queued, the hit touches only its own lines, and a settle's
  /// moves wait for their misses together: the neighbours of one move do not depend on the
  /// last. (Prefetching the neighbours at the hit, as this did before, cost every hit 2 to 3 ns
  /// more on `memory.hit.1task` and `memory.zipf.mixed`: the lines it fetched competed with the
  /// hit's own.) Every list reads as if each move had been made at once, so every decision is
  /// the same.
  @inlinable
  @inline(__always)
  mutating func recordHit(_ slot: Int, hash: Int) {
    hits &+= 1
    if admission.isEnabled { admission.recordUse(Self.tag(of: hash)) }
    let index = pendingHitCount
    withUnsafeMutableBytes(of: &pendingHits) {
      $0.storeBytes(of: UInt32(truncatingIfNeeded: slot), toByteOffset: index &* 4, as: UInt32.self)
    }
    pendingHitCount = index &+ 1
    if pendingHitCount == Self.pendingHitCapacity { settleHits() }
  }

  /// Makes the moves of the hits in ``pendingHits``, in the order of the hits. Call before
  /// reading or changing the lists, the regions' sizes or the table.
  @inlinable
  mutating func settleHits() {
    let count = pendingHitCount
    guard count > 0 else { return }
    pendingHitCount = 0
    let queued = pendingHits
    withUnsafeBytes(of: queued) { bytes in
      for index in 0..<count {
        applyHit(Int(bytes.load(fromByteOffset: index &* 4, as: UInt32.self)))
      }
    }
  }

  /// The move of a hit on `slot` (see ``recordHit(_:hash:)``).
  @inlinable
  @inline(__always)
  mutating func applyHit(_ slot: Int) {
    guard admission.isEnabled else {
      Self.moveToFront(slot, in: nodes, mru: &windowMRU, lru: &windowLRU)
      return
    }
    switch nodes[slot].region {
    case .protected:
      mainHits &+= 1
      Self.moveToFront(slot, in: nodes, mru: &protectedMRU, lru: &protectedLRU)
    case .window:
      windowHits &+= 1
      Self.moveToFront(slot, in: nodes, mru: &windowMRU, lru: &windowLRU)
    case .probation:
      mainHits &+= 1
      promote(slot)
    }
  }

  /// Moves `slot` up after a use; a probation entry goes to protected unless it alone is
  /// larger than protected.
  @inlinable
  mutating func promote(_ slot: Int) {
    switch nodes[slot].region {
    case .window, .protected:
      touch(slot)
    case .probation:
      if nodes[slot].cost > admission.protectedCostMaximum || admission.protectedCountMaximum < 1 {
        touch(slot)
      } else {
        move(slot, toMRUOf: .protected)
        demoteProtectedOverflow()
      }
    }
  }

  /// Demotes protected's least recently used entries to probation's MRU end while protected is
  /// over its size.
  @inlinable
  mutating func demoteProtectedOverflow() {
    while protectedOverflows, protectedLRU != Self.none {
      move(Int(protectedLRU), toMRUOf: .probation)
    }
  }

  /// Moves the window's least recently used entries to probation's MRU end, as candidates,
  /// while the window is over its size.
  @inlinable
  mutating func drainWindowOverflow() {
    while windowOverflows, windowLRU != Self.none {
      move(Int(windowLRU), toMRUOf: .probation)
    }
  }

  /// Records that the node at `slot`, already present, was written again with a cost that was
  /// `oldCost`: counts it as a use and updates its region's size. A window entry that grew
  /// past the window's size moves to the window's LRU end, to leave it first.
  @inlinable
  mutating func recordRewrite(_ slot: Int, hash: Int, oldCost: Int64) {
    let region = nodes[slot].region
    account(region, cost: oldCost, sign: -1)
    account(region, cost: nodes[slot].cost, sign: 1)
    guard admission.isEnabled else {
      Self.moveToFront(slot, in: nodes, mru: &windowMRU, lru: &windowLRU)
      return
    }
    admission.recordUse(Self.tag(of: hash))
    if region == .window && nodes[slot].cost > admission.windowCostMaximum {
      unlink(slot)
      link(slot, atLRUOf: .window)
    } else {
      promote(slot)
    }
    demoteProtectedOverflow()
  }

  /// Whether `candidate` should enter main in place of `victim`, by the segment's admission
  /// rule (W-TinyLFU's: strictly more popular; see ``PolicyExpert/admits(candidateFrequency:victimFrequency:by:random:)``),
  /// or warm and lucky (1/128), so that an attacker cannot pin a victim by flooding its counters.
  @inlinable
  mutating func admits(candidate: UInt32, victim: UInt32) -> Bool {
    PolicyExpert.admits(
      candidateFrequency: admission.sketch.frequency(SegmentAdmission.sketchKey(of: nodes[Int(candidate)].key)),
      victimFrequency: admission.sketch.frequency(SegmentAdmission.sketchKey(of: nodes[Int(victim)].key)),
      by: admission.admissionRule, random: &admission.random)
  }

  /// The next candidate after `candidate`: older in probation, newer in the window.
  @inlinable
  func nextCandidate(after candidate: UInt32, in region: SegmentRegion) -> UInt32 {
    region == .window ? nodes[Int(candidate)].newer : nodes[Int(candidate)].older
  }

  /// Evicts while `overLimit` names a limit the totals exceed, never the node at `spared` (the
  /// entry just written, or ``none``), handing each node that leaves to `evicted` with the
  /// limit.
  ///
  /// LRU evicts from the LRU end. W-TinyLFU first moves window overflow to probation, then
  /// runs Caffeine's `evictFromMain`: candidates are taken from probation's MRU end (where the
  /// window overflow just went), then from the window's LRU end; victims from probation's LRU
  /// end, then protected's, then the window's. A candidate and a victim duel by frequency;
  /// when only one of them exists, it leaves. Over the cost limit, entries of cost 0 are
  /// skipped: evicting them frees nothing. Stops when every list was walked (the rest of the
  /// excess is in other segments).
  @inlinable
  mutating func evict(
    sparing spared: UInt32,
    while overLimit: () -> EvictionReason?,
    _ evicted: (consuming Node, EvictionReason) -> Void
  ) {
    guard admission.isEnabled else {
      while windowLRU != Self.none, windowLRU != spared, let reason = overLimit() {
        evicted(remove(slot: Int(windowLRU)), reason)
      }
      return
    }
    admission.startRefereeIfDue()
    admission.countPendingUses()
    if admission.refereeSwitched { applyRefereeChoice() }
    drainWindowOverflow()
    var victimRegion = SegmentRegion.probation
    var candidateRegion = SegmentRegion.probation
    var victim = probationLRU
    var candidate = probationMRU
    while let reason = overLimit() {
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
        candidate = nextCandidate(after: candidate, in: candidateRegion)
        continue
      }
      if reason == .costLimit {
        if victim != Self.none && nodes[Int(victim)].cost == 0 {
          victim = nodes[Int(victim)].newer
          continue
        }
        if candidate != Self.none && nodes[Int(candidate)].cost == 0 {
          candidate = nextCandidate(after: candidate, in: candidateRegion)
          continue
        }
      }
      let leaving: UInt32
      // A candidate that wins moves on only after the victim left: the victim may be its
      // neighbour.
      var advanceCandidate = false
      // Whether the entry leaving is a candidate turned away (else it leaves the main region).
      var turnedAway = true
      if victim == Self.none {
        leaving = candidate
        candidate = nextCandidate(after: candidate, in: candidateRegion)
      } else if candidate == Self.none {
        leaving = victim
        victim = nodes[Int(victim)].newer
        turnedAway = false
      } else if candidate == victim {
        leaving = victim
        victim = nodes[Int(victim)].newer
        candidate = Self.none
      } else if admits(candidate: candidate, victim: victim) {
        leaving = victim
        victim = nodes[Int(victim)].newer
        advanceCandidate = true
        turnedAway = false
      } else {
        leaving = candidate
        candidate = nextCandidate(after: candidate, in: candidateRegion)
      }
      // Its ghost (``WindowGhosts``): a candidate turned away, or an entry evicted from the
      // main region. (Only the ghosts need the leaving key's hash.)
      admission.ghosts?.recordExit(tag: Self.tag(of: nodes[Int(leaving)].key.hashValue), fromWindow: turnedAway)
      evicted(remove(slot: Int(leaving)), reason)
      if advanceCandidate { candidate = nextCandidate(after: candidate, in: candidateRegion) }
    }
  }

  /// Sizes the window and protected for the layer's window share (``WindowTarget/share``): the
  /// window gets `share` of each of the segment's limits (at least 1), protected 80% of the
  /// rest, and the window keeps room for ``SegmentAdmission/appliedFloor`` entries. Entries that
  /// no longer fit move down (protected to probation, window to probation as candidates); the
  /// eviction that follows the insert duels them out.
  @inlinable
  mutating func applyWindowShare(_ share: Double) {
    admission.appliedShare = share
    sizeWindow()
  }

  /// Keeps room in the window for `entries` entries at least (the segment's part of the
  /// prefetchers' reservations, see ``MemoryStore/reserveWindow(entries:)``), 0 for none: at
  /// most half of each of the segment's limits, counted in cost by the segment's mean cost.
  @inlinable
  mutating func applyWindowFloor(_ entries: Int) {
    admission.appliedFloor = entries
    sizeWindow()
  }

  /// Sets the window's and protected's maximums: the policy's (a fixed window's as Caffeine
  /// rounds it, an adaptive one's from ``SegmentAdmission/appliedShare`` and
  /// ``SegmentAdmission/appliedProtectedShare``), the window raised to the floor, protected its
  /// share of what the window leaves.
  @inlinable
  mutating func sizeWindow() {
    let fixed = admission.hasFixedWindow
    let floor = admission.appliedFloor
    let share = admission.appliedShare
    let protectedShare = admission.appliedProtectedShare
    if admission.countShare != .max {
      let limit = admission.countShare
      var sizes =
        fixed
        ? SegmentAdmission.maximums(share: limit)
        : SegmentAdmission.maximums(windowShare: share, protectedShare: protectedShare, of: limit)
      let room = Swift.min(floor, limit / 2)
      if room > sizes.window {
        sizes = (room, Int(Double(limit &- room) * protectedShare))
      }
      (admission.windowCountMaximum, admission.protectedCountMaximum) = sizes
    }
    if admission.costShare != .max {
      let limit = admission.costShare
      var sizes =
        fixed
        ? SegmentAdmission.maximums(share: limit)
        : SegmentAdmission.maximums(windowShare: share, protectedShare: protectedShare, of: limit)
      let meanCost = count > 0 ? totalCost / Int64(count) : 0
      // Checked by division: a 128-bit product is a runtime call where `Int` has 32 bits.
      let floorCost = meanCost > 0 && Int64(floor) > Int64.max / meanCost ? Int64.max : Int64(floor) &* meanCost
      let room = Swift.min(floorCost, limit / 2)
      if room > sizes.window {
        sizes = (room, Int64(Double(limit &- room) * protectedShare))
      }
      (admission.windowCostMaximum, admission.protectedCostMaximum) = sizes
    }
    demoteProtectedOverflow()
    drainWindowOverflow()
  }

  /// Makes the lists follow the expert the referee chose (``SegmentAdmission/refereeSwitched``):
  /// its window and protected shares and its admission rule. Entries that no longer fit move
  /// down, as for a new window share.
  @usableFromInline
  mutating func applyRefereeChoice() {
    admission.refereeSwitched = false
    let expert = PolicyExpert.all[admission.refereeExpert]
    admission.appliedShare = expert.windowShare
    admission.appliedProtectedShare = expert.protectedShare
    admission.admissionRule = expert.admission
    sizeWindow()
  }

  /// The vote of a new key with hash tag `tag` for the layer's ``WindowTarget`` (+1, -1 or 0;
  /// see ``WindowGhosts/vote(tag:)``); 0 unless the policy is ``EvictionPolicy/adaptive``.
  @inlinable
  mutating func windowVote(tag: UInt32) -> Int {
    admission.ghosts?.vote(tag: tag) ?? 0
  }

  // MARK: Operations

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

  /// Removes the node at `slot` and returns it. No other node moves.
  @inlinable
  @discardableResult
  mutating func remove(slot: Int) -> Node {
    unlink(slot)
    releaseSlot(slot)
    let removed = (nodes + slot).move()
    totalCost &-= removed.cost
    account(removed.region, cost: removed.cost, sign: -1)
    count &-= 1
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
    let detached = DetachedNodes<Key, Value>(nodes: nodes, controls: controls, slotCount: slotCount)
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
    for slot in liveSlots where nodes[slot].costAndRegion >> Node.regionShift > 2 {
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
    return problems
  }
}
