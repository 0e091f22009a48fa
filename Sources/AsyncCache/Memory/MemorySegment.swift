// Public because the prefetch of a hit is called from inlinable code.
public import CAsyncCacheShims

/// A hash map whose entries are ordered for eviction: the storage of one segment of a memory
/// layer, under ``EvictionPolicy/leastRecentlyUsed``, ``EvictionPolicy/windowTinyLFU`` or
/// ``EvictionPolicy/adaptive``.
///
/// Layout, chosen for a small footprint and few cache misses per hit:
/// - nodes live densely in one slab (`0..<count`); removal moves the last node into the hole
///   (swap-remove), so there is no free list and enumeration is a linear scan;
/// - the index is an open-addressing table of 64-bit buckets with linear probing and
///   backward-shift deletion (no tombstones). A bucket holds the low 32 bits of the key's hash
///   (the *tag*, which also gives its home position) and `slot + 1` (0 marks an empty bucket),
///   so a probe that meets another key rarely touches its node, and the table grows without
///   rehashing keys;
/// - the lists link nodes through 32-bit slot numbers: one recency list under LRU; W-TinyLFU's
///   window, probation and protected lists otherwise (the tests hold a plain reference model,
///   `WTinyLFUPolicy`, that this implementation must match step for step);
/// - a hit moves nothing at once: it prefetches its neighbours' lines and queues its slot, and
///   the queue's moves are made in order when it is full or before any other operation reads or
///   changes the lists (``recordHit(_:hash:)``), so the lists read as if each had been made at
///   once.
///
/// Not thread-safe: ``MemoryStore`` keeps each segment behind its own lock.
@usableFromInline
struct MemorySegment<Key: Hashable, Value>: ~Copyable {
  @usableFromInline typealias Node = MemoryNode<Key, Value>

  /// The absent link.
  @usableFromInline static var none: UInt32 { .max }

  // Field order is layout order: a hit writes `hits` (and `requestHits`) and reads `nodes` and
  // `buckets`, which share the cache line of the lock (and its index hint); then come
  // `bucketCount`, `pendingHitCount` and the queue of hits it writes one slot of (on the next
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
  @usableFromInline var nodes: UnsafeMutablePointer<Node>
  @usableFromInline var buckets: UnsafeMutablePointer<UInt64>
  /// The index's length: any count (not only a power of two), so that a segment bounded to
  /// `n` entries has about `4n / 3` buckets, not up to `8n / 3` (``bucketCount(forCapacity:)``).
  @usableFromInline var bucketCount: Int
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
  @usableFromInline var capacity: Int
  @usableFromInline var count: Int
  @usableFromInline var totalCost: Int64
  @usableFromInline var misses: Int
  @usableFromInline var evictions: EvictionCounts
  @usableFromInline var probationMRU: UInt32
  @usableFromInline var probationLRU: UInt32
  @usableFromInline var protectedMRU: UInt32
  @usableFromInline var protectedLRU: UInt32
  /// Hits on window entries since the store last collected them (W-TinyLFU only; see
  /// ``WindowTarget/relax()``).
  @usableFromInline var windowHits = 0
  /// Hits on main-region entries (probation and protected) since the store last collected them.
  @usableFromInline var mainHits = 0

  @usableFromInline static var initialCapacity: Int { 4 }
  /// How many hits wait in ``pendingHits`` before their moves are made together.
  @usableFromInline static var pendingHitCapacity: Int { 16 }

  init(admission: SegmentAdmission = SegmentAdmission()) {
    capacity = Self.initialCapacity
    nodes = .allocate(capacity: capacity)
    let bucketCount = Self.bucketCount(forCapacity: Self.initialCapacity)
    buckets = .allocate(capacity: bucketCount)
    buckets.initialize(repeating: 0, count: bucketCount)
    self.bucketCount = bucketCount
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
    nodes.deinitialize(count: count)
    nodes.deallocate()
    buckets.deallocate()
  }

  // MARK: Index

  @inlinable
  static func tag(of hash: Int) -> UInt32 { UInt32(truncatingIfNeeded: hash) }

  @inlinable
  static func bucket(tag: UInt32, slot: Int) -> UInt64 {
    UInt64(tag) << 32 | UInt64(UInt32(truncatingIfNeeded: slot &+ 1))
  }

  @inlinable
  static func slot(of bucket: UInt64) -> Int { Int(UInt32(truncatingIfNeeded: bucket)) &- 1 }

  @inlinable
  static func home(of bucket: UInt64, count: Int) -> Int {
    position(of: UInt32(truncatingIfNeeded: bucket >> 32), count: count)
  }

  /// The home position of a tag in a table of `count` buckets (at most 2^32): the tag,
  /// scrambled by a multiplication (so that tags that differ only in their high bits, as weak
  /// hashes' do, still spread), then scaled onto `0..<count` by the high half of a product
  /// (Lemire's fast range), which needs no power of two. 64-bit arithmetic on every platform.
  @inlinable
  @inline(__always)
  static func position(of tag: UInt32, count: Int) -> Int {
    let scrambled = UInt64(tag &* 0x9E37_79B1)
    return Int(truncatingIfNeeded: (scrambled &* UInt64(truncatingIfNeeded: count)) >> 32)
  }

  /// The position after `position` in a table of `count` buckets, wrapping to 0.
  @inlinable
  @inline(__always)
  static func next(after position: Int, count: Int) -> Int {
    let next = position &+ 1
    return next == count ? 0 : next
  }

  /// The buckets for a slab of `capacity` nodes: at most 3/4 full when every slot is used.
  @inlinable
  static func bucketCount(forCapacity capacity: Int) -> Int {
    capacity &+ capacity / 3 &+ 1
  }

  /// The bucket position and slot of `key`, or `nil`.
  @inlinable
  @inline(__always)
  func find(_ key: Key, hash: Int) -> (bucket: Int, slot: Int)? {
    let tag = Self.tag(of: hash)
    var position = Self.position(of: tag, count: bucketCount)
    while true {
      let bucket = buckets[position]
      if bucket == 0 { return nil }
      if UInt32(truncatingIfNeeded: bucket >> 32) == tag {
        let slot = Self.slot(of: bucket)
        if nodes[slot].key == key { return (position, slot) }
      }
      position = Self.next(after: position, count: bucketCount)
    }
  }

  /// The bucket position that refers to `slot`, whose key's hash has the tag `tag`.
  @inlinable
  func bucketPosition(ofSlot slot: Int, tag: UInt32) -> Int {
    let wanted = UInt32(truncatingIfNeeded: slot &+ 1)
    var position = Self.position(of: tag, count: bucketCount)
    while UInt32(truncatingIfNeeded: buckets[position]) != wanted {
      position = Self.next(after: position, count: bucketCount)
    }
    return position
  }

  @inlinable
  mutating func insertBucket(_ bucket: UInt64) {
    var position = Self.home(of: bucket, count: bucketCount)
    while buckets[position] != 0 { position = Self.next(after: position, count: bucketCount) }
    buckets[position] = bucket
  }

  /// Empties the bucket at `position`, shifting later buckets of the same run back so that
  /// every key stays reachable from its home position.
  @inlinable
  mutating func deleteBucket(at position: Int) {
    var hole = position
    var probe = position
    while true {
      probe = Self.next(after: probe, count: bucketCount)
      let bucket = buckets[probe]
      if bucket == 0 { break }
      let home = Self.home(of: bucket, count: bucketCount)
      // The bucket may move into the hole when the hole lies cyclically in [home, probe).
      if cyclicDistance(from: home, to: probe) >= cyclicDistance(from: hole, to: probe) {
        buckets[hole] = bucket
        hole = probe
      }
    }
    buckets[hole] = 0
  }

  /// How many steps forward from `start` reach `end`, wrapping around the table.
  @inlinable
  @inline(__always)
  func cyclicDistance(from start: Int, to end: Int) -> Int {
    let distance = end &- start
    return distance < 0 ? distance &+ bucketCount : distance
  }

  @inlinable
  mutating func resizeBuckets(to newCount: Int) {
    let old = buckets
    let oldCount = bucketCount
    buckets = .allocate(capacity: newCount)
    buckets.initialize(repeating: 0, count: newCount)
    bucketCount = newCount
    for position in 0..<oldCount where old[position] != 0 {
      insertBucket(old[position])
    }
    old.deallocate()
  }

  @inlinable
  mutating func resizeNodes(to newCapacity: Int) {
    let old = nodes
    nodes = .allocate(capacity: newCapacity)
    nodes.moveInitialize(from: old, count: count)
    old.deallocate()
    capacity = newCapacity
  }

  /// Makes room for one more node, keeping the index at most 3/4 full.
  ///
  /// The slab doubles up to the segment's share of the count limit, then grows by 1/32 at a
  /// time (an uneven spread of keys may give a segment a little more than its share), so that a
  /// full bounded segment wastes almost nothing; the index follows the slab.
  @inlinable
  mutating func reserveOneMore() {
    guard count == capacity else { return }
    let share = admission.countShare
    let grown =
      capacity < share
      ? Swift.max(capacity &+ 1, Swift.min(capacity &* 2, share))
      : capacity &+ Swift.max(capacity / 32, Self.initialCapacity)
    resizeNodes(to: grown)
    resizeBuckets(to: Self.bucketCount(forCapacity: grown))
  }

  /// Gives memory back when the segment holds far fewer nodes than it has room for.
  @inlinable
  mutating func shrinkIfSparse() {
    guard capacity > Self.initialCapacity, count &* 4 <= capacity else { return }
    let newCapacity = Swift.max(Self.initialCapacity, count &* 2)
    resizeNodes(to: newCapacity)
    let newCount = Self.bucketCount(forCapacity: newCapacity)
    if newCount < bucketCount { resizeBuckets(to: newCount) }
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
  /// 100 ns hit over 100k keys). Here the hit only prefetches the neighbours' lines and lets
  /// the lock go; when the queue is settled, the lines are in cache. Every list reads as if
  /// each move had been made at once, so every decision is the same.
  @inlinable
  @inline(__always)
  mutating func recordHit(_ slot: Int, hash: Int) {
    hits &+= 1
    if admission.isEnabled { admission.recordUse(Self.tag(of: hash)) }
    let newer = nodes[slot].newer
    let older = nodes[slot].older
    if newer != Self.none { async_cache_prefetch_for_write(&nodes[Int(newer)].older) }
    if older != Self.none { async_cache_prefetch_for_write(&nodes[Int(older)].newer) }
    let index = pendingHitCount
    withUnsafeMutableBytes(of: &pendingHits) {
      $0.storeBytes(of: UInt32(truncatingIfNeeded: slot), toByteOffset: index &* 4, as: UInt32.self)
    }
    pendingHitCount = index &+ 1
    if pendingHitCount == Self.pendingHitCapacity { settleHits() }
  }

  /// Makes the moves of the hits in ``pendingHits``, in the order of the hits. Call before
  /// reading or changing the lists, the regions' sizes or the slab.
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

  /// Whether `candidate` should enter main in place of `victim`: it must be strictly more
  /// popular, or warm and lucky (1/128), so that an attacker cannot pin a victim by flooding
  /// its counters.
  @inlinable
  mutating func admits(candidate: UInt32, victim: UInt32) -> Bool {
    let victimFrequency = admission.sketch.frequency(SegmentAdmission.sketchKey(of: nodes[Int(victim)].key))
    let candidateFrequency = admission.sketch.frequency(SegmentAdmission.sketchKey(of: nodes[Int(candidate)].key))
    if candidateFrequency > victimFrequency { return true }
    guard candidateFrequency >= SegmentAdmission.warmFrequency else { return false }
    return admission.random.next() & 127 == 0
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
    var spared = spared
    guard admission.isEnabled else {
      while windowLRU != Self.none, windowLRU != spared, let reason = overLimit() {
        let last = UInt32(truncatingIfNeeded: count &- 1)
        let leaving = windowLRU
        evicted(remove(slot: Int(leaving)), reason)
        if spared == last { spared = leaving }
      }
      return
    }
    drainWindowOverflow()
    admission.countPendingUses()
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
      // neighbour, whose slot the removal frees or gives to another node.
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
      // One hash of the leaving key serves its ghost (``WindowGhosts``: a candidate turned
      // away, or an entry evicted from the main region) and its bucket.
      let tag = Self.tag(of: nodes[Int(leaving)].key.hashValue)
      admission.ghosts?.recordExit(tag: tag, fromWindow: turnedAway)
      // The removal moves the last node into the freed slot.
      let last = UInt32(truncatingIfNeeded: count &- 1)
      evicted(remove(slot: Int(leaving), bucket: bucketPosition(ofSlot: Int(leaving), tag: tag)), reason)
      if leaving != last {
        if victim == last { victim = leaving }
        if candidate == last { candidate = leaving }
        if spared == last { spared = leaving }
      }
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
  /// rounds it, an adaptive one's from ``SegmentAdmission/appliedShare``), the window raised to
  /// the floor, protected 80% of what the window leaves.
  @inlinable
  mutating func sizeWindow() {
    let fixed = admission.ghosts == nil
    let floor = admission.appliedFloor
    if admission.countShare != .max {
      let limit = admission.countShare
      var sizes =
        fixed
        ? SegmentAdmission.maximums(share: limit) : Self.maximums(windowShare: admission.appliedShare, of: limit)
      let room = Swift.min(floor, limit / 2)
      if room > sizes.window {
        sizes = (room, Int(Double(limit &- room) * SegmentAdmission.protectedShare))
      }
      (admission.windowCountMaximum, admission.protectedCountMaximum) = sizes
    }
    if admission.costShare != .max {
      let limit = admission.costShare
      var sizes =
        fixed
        ? SegmentAdmission.maximums(share: limit) : Self.maximums(windowShare: admission.appliedShare, of: limit)
      let meanCost = count > 0 ? totalCost / Int64(count) : 0
      // Checked by division: a 128-bit product is a runtime call where `Int` has 32 bits.
      let floorCost = meanCost > 0 && Int64(floor) > Int64.max / meanCost ? Int64.max : Int64(floor) &* meanCost
      let room = Swift.min(floorCost, limit / 2)
      if room > sizes.window {
        sizes = (room, Int64(Double(limit &- room) * SegmentAdmission.protectedShare))
      }
      (admission.windowCostMaximum, admission.protectedCostMaximum) = sizes
    }
    demoteProtectedOverflow()
    drainWindowOverflow()
  }

  /// The window's and protected's sizes when the window takes `windowShare` of a segment's
  /// `limit`: at least 1 for the window, 80% of the rest for protected.
  @inlinable
  static func maximums<Size: FixedWidthInteger & SignedInteger>(
    windowShare: Double, of limit: Size
  ) -> (window: Size, protected: Size) {
    let window = Swift.min(Swift.max(1, Size(windowShare * Double(limit))), limit)
    return (window, Size(Double(limit &- window) * SegmentAdmission.protectedShare))
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
  mutating func append(_ node: consuming Node, hash: Int) {
    reserveOneMore()
    let slot = count
    let tag = Self.tag(of: hash)
    node.region = .window
    totalCost &+= node.cost
    account(.window, cost: node.cost, sign: 1)
    (nodes + slot).initialize(to: node)
    count &+= 1
    insertBucket(Self.bucket(tag: tag, slot: slot))
    link(slot, atMRUOf: .window)
    if admission.isEnabled {
      admission.growSketchIfNeeded(count: count)
      admission.recordUse(tag)
    }
  }

  /// Removes the node at `slot`, whose bucket is at `position`, and returns it.
  @inlinable
  @discardableResult
  mutating func remove(slot: Int, bucket position: Int) -> Node {
    unlink(slot)
    deleteBucket(at: position)
    let removed = (nodes + slot).move()
    totalCost &-= removed.cost
    account(removed.region, cost: removed.cost, sign: -1)
    let last = count &- 1
    if slot != last {
      (nodes + slot).moveInitialize(from: nodes + last, count: 1)
      let slot32 = UInt32(truncatingIfNeeded: slot)
      let newer = nodes[slot].newer
      let older = nodes[slot].older
      if newer != Self.none { nodes[Int(newer)].older = slot32 } else { setMRU(nodes[slot].region, slot32) }
      if older != Self.none { nodes[Int(older)].newer = slot32 } else { setLRU(nodes[slot].region, slot32) }
      let tag = Self.tag(of: nodes[slot].key.hashValue)
      let moved = bucketPosition(ofSlot: last, tag: tag)
      buckets[moved] = Self.bucket(tag: tag, slot: slot)
    }
    count = last
    return removed
  }

  /// Removes the node at `slot`, looking up its bucket.
  @inlinable
  @discardableResult
  mutating func remove(slot: Int) -> Node {
    remove(slot: slot, bucket: bucketPosition(ofSlot: slot, tag: Self.tag(of: nodes[slot].key.hashValue)))
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
  /// it learnt.
  @inlinable
  mutating func detachAllNodes() -> DetachedNodes<Key, Value> {
    let detached = DetachedNodes<Key, Value>(nodes: nodes, count: count, buckets: buckets)
    capacity = Self.initialCapacity
    nodes = .allocate(capacity: capacity)
    let bucketCount = Self.bucketCount(forCapacity: Self.initialCapacity)
    buckets = .allocate(capacity: bucketCount)
    buckets.initialize(repeating: 0, count: bucketCount)
    self.bucketCount = bucketCount
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
    // Every occupied bucket points at a node whose key hashes to the bucket's tag, and the
    // node is reachable by probing from its home.
    var referenced = Set<Int>()
    for position in 0..<bucketCount where buckets[position] != 0 {
      let bucket = buckets[position]
      let slot = Self.slot(of: bucket)
      guard slot >= 0, slot < count else {
        problems.append("bucket \(position) points at slot \(slot) outside 0..<\(count)")
        continue
      }
      if !referenced.insert(slot).inserted { problems.append("slot \(slot) is referenced twice") }
      let hash = nodes[slot].key.hashValue
      if UInt32(truncatingIfNeeded: bucket >> 32) != Self.tag(of: hash) {
        problems.append("bucket \(position) has a tag that does not match its key")
      }
      if find(nodes[slot].key, hash: hash)?.slot != slot {
        problems.append("slot \(slot) is not reachable from its home position")
      }
    }
    if referenced.count != count { problems.append("\(referenced.count) buckets for \(count) nodes") }
    if count * 4 > bucketCount * 3 { problems.append("index is more than 3/4 full") }
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
    for slot in 0..<count where nodes[slot].costAndRegion >> Node.regionShift > 2 {
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
    for slot in 0..<count { cost += nodes[slot].cost }
    if cost != totalCost { problems.append("totalCost \(totalCost) but nodes sum to \(cost)") }
    return problems
  }
}
