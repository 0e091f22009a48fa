/// One entry of an ``LRUSegment``.
@usableFromInline
struct LRUNode<Key, Value> {
  @usableFromInline var key: Key
  @usableFromInline var value: Value
  /// Expiry in nanoseconds since 1970; `Int64.max` for never.
  @usableFromInline var expiry: Int64
  @usableFromInline var cost: Int
  /// The neighbour closer to the most recently used end, or ``LRUSegment/none``.
  @usableFromInline var newer: UInt32
  /// The neighbour closer to the least recently used end, or ``LRUSegment/none``.
  @usableFromInline var older: UInt32

  @inlinable
  init(key: Key, value: Value, expiry: Int64, cost: Int) {
    self.key = key
    self.value = value
    self.expiry = expiry
    self.cost = cost
    self.newer = .max
    self.older = .max
  }
}

/// A hash map with least-recently-used order: the storage of one segment of a memory layer.
///
/// Layout, chosen for a small footprint and few cache misses per hit:
/// - nodes live densely in one slab (`0..<count`); removal moves the last node into the hole
///   (swap-remove), so there is no free list and enumeration is a linear scan;
/// - the index is an open-addressing table of 64-bit buckets with linear probing and
///   backward-shift deletion (no tombstones). A bucket holds the low 32 bits of the key's hash
///   (the *tag*, which also gives its home position) and `slot + 1` (0 marks an empty bucket),
///   so a probe that meets another key rarely touches its node, and the table grows without
///   rehashing keys;
/// - the recency list links nodes through 32-bit slot numbers.
///
/// Not thread-safe: ``MemoryStore`` keeps each segment behind its own lock.
@usableFromInline
struct LRUSegment<Key: Hashable, Value>: ~Copyable {
  @usableFromInline typealias Node = LRUNode<Key, Value>

  /// The absent link.
  @usableFromInline static var none: UInt32 { .max }

  // Field order is layout order: a hit writes `head` and `hits` and reads `nodes`, `buckets`
  // and `bucketMask`, so these come first, on the cache line of the segment's lock.
  /// The most recently used node.
  @usableFromInline var head: UInt32
  /// The least recently used node.
  @usableFromInline var tail: UInt32
  @usableFromInline var hits: Int
  @usableFromInline var nodes: UnsafeMutablePointer<Node>
  @usableFromInline var buckets: UnsafeMutablePointer<UInt64>
  @usableFromInline var bucketMask: Int
  @usableFromInline var capacity: Int
  @usableFromInline var count: Int
  @usableFromInline var totalCost: Int
  @usableFromInline var misses: Int
  @usableFromInline var evictions: EvictionCounts

  @usableFromInline static var initialCapacity: Int { 4 }

  @inlinable
  init() {
    capacity = Self.initialCapacity
    nodes = .allocate(capacity: capacity)
    let bucketCount = Self.initialCapacity * 2
    buckets = .allocate(capacity: bucketCount)
    buckets.initialize(repeating: 0, count: bucketCount)
    bucketMask = bucketCount - 1
    count = 0
    head = Self.none
    tail = Self.none
    totalCost = 0
    hits = 0
    misses = 0
    evictions = EvictionCounts()
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
  static func home(of bucket: UInt64, mask: Int) -> Int { Int(UInt32(truncatingIfNeeded: bucket >> 32)) & mask }

  /// The bucket position and slot of `key`, or `nil`.
  @inlinable
  @inline(__always)
  func find(_ key: Key, hash: Int) -> (bucket: Int, slot: Int)? {
    let tag = Self.tag(of: hash)
    var position = Int(tag) & bucketMask
    while true {
      let bucket = buckets[position]
      if bucket == 0 { return nil }
      if UInt32(truncatingIfNeeded: bucket >> 32) == tag {
        let slot = Self.slot(of: bucket)
        if nodes[slot].key == key { return (position, slot) }
      }
      position = (position &+ 1) & bucketMask
    }
  }

  /// The bucket position that refers to `slot`, whose key hashes to `hash`.
  @inlinable
  func bucketPosition(ofSlot slot: Int, hash: Int) -> Int {
    let wanted = UInt32(truncatingIfNeeded: slot &+ 1)
    var position = Int(Self.tag(of: hash)) & bucketMask
    while UInt32(truncatingIfNeeded: buckets[position]) != wanted {
      position = (position &+ 1) & bucketMask
    }
    return position
  }

  @inlinable
  mutating func insertBucket(_ bucket: UInt64) {
    var position = Self.home(of: bucket, mask: bucketMask)
    while buckets[position] != 0 { position = (position &+ 1) & bucketMask }
    buckets[position] = bucket
  }

  /// Empties the bucket at `position`, shifting later buckets of the same run back so that
  /// every key stays reachable from its home position.
  @inlinable
  mutating func deleteBucket(at position: Int) {
    var hole = position
    var probe = position
    while true {
      probe = (probe &+ 1) & bucketMask
      let bucket = buckets[probe]
      if bucket == 0 { break }
      let home = Self.home(of: bucket, mask: bucketMask)
      // The bucket may move into the hole when the hole lies cyclically in [home, probe).
      if (probe &- home) & bucketMask >= (probe &- hole) & bucketMask {
        buckets[hole] = bucket
        hole = probe
      }
    }
    buckets[hole] = 0
  }

  @inlinable
  mutating func resizeBuckets(to bucketCount: Int) {
    let old = buckets
    let oldCount = bucketMask &+ 1
    buckets = .allocate(capacity: bucketCount)
    buckets.initialize(repeating: 0, count: bucketCount)
    bucketMask = bucketCount &- 1
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
  @inlinable
  mutating func reserveOneMore() {
    if count == capacity { resizeNodes(to: capacity &* 2) }
    if (count &+ 1) &* 4 > (bucketMask &+ 1) &* 3 { resizeBuckets(to: (bucketMask &+ 1) &* 2) }
  }

  /// Gives memory back when the segment holds far fewer nodes than it has room for.
  @inlinable
  mutating func shrinkIfSparse() {
    guard capacity > Self.initialCapacity, count &* 4 <= capacity else { return }
    let newCapacity = Swift.max(Self.initialCapacity, count &* 2)
    resizeNodes(to: newCapacity)
    var bucketCount = Self.initialCapacity &* 2
    while newCapacity &* 3 > bucketCount &* 2 { bucketCount &*= 2 }
    if bucketCount < bucketMask &+ 1 { resizeBuckets(to: bucketCount) }
  }

  // MARK: Recency list

  @inlinable
  @inline(__always)
  mutating func unlink(_ slot: Int) {
    let newer = nodes[slot].newer
    let older = nodes[slot].older
    if newer != Self.none { nodes[Int(newer)].older = older } else { head = older }
    if older != Self.none { nodes[Int(older)].newer = newer } else { tail = newer }
  }

  @inlinable
  @inline(__always)
  mutating func linkAtHead(_ slot: Int) {
    let slot32 = UInt32(truncatingIfNeeded: slot)
    nodes[slot].newer = Self.none
    nodes[slot].older = head
    if head != Self.none { nodes[Int(head)].newer = slot32 } else { tail = slot32 }
    head = slot32
  }

  /// Marks `slot` as the most recently used node.
  @inlinable
  @inline(__always)
  mutating func touch(_ slot: Int) {
    guard head != UInt32(truncatingIfNeeded: slot) else { return }
    unlink(slot)
    linkAtHead(slot)
  }

  // MARK: Operations

  /// Adds a node for a key that is not present and makes it the most recently used.
  @inlinable
  mutating func append(_ node: consuming Node, hash: Int) {
    reserveOneMore()
    let slot = count
    totalCost &+= node.cost
    (nodes + slot).initialize(to: node)
    count &+= 1
    insertBucket(Self.bucket(tag: Self.tag(of: hash), slot: slot))
    linkAtHead(slot)
  }

  /// Removes the node at `slot`, whose bucket is at `position`, and returns it.
  @inlinable
  @discardableResult
  mutating func remove(slot: Int, bucket position: Int) -> Node {
    unlink(slot)
    deleteBucket(at: position)
    let removed = (nodes + slot).move()
    totalCost &-= removed.cost
    let last = count &- 1
    if slot != last {
      (nodes + slot).moveInitialize(from: nodes + last, count: 1)
      let slot32 = UInt32(truncatingIfNeeded: slot)
      let newer = nodes[slot].newer
      let older = nodes[slot].older
      if newer != Self.none { nodes[Int(newer)].older = slot32 } else { head = slot32 }
      if older != Self.none { nodes[Int(older)].newer = slot32 } else { tail = slot32 }
      let moved = bucketPosition(ofSlot: last, hash: nodes[slot].key.hashValue)
      buckets[moved] = Self.bucket(tag: UInt32(truncatingIfNeeded: buckets[moved] >> 32), slot: slot)
    }
    count = last
    return removed
  }

  /// Removes the node at `slot`, looking up its bucket.
  @inlinable
  @discardableResult
  mutating func remove(slot: Int) -> Node {
    let position = bucketPosition(ofSlot: slot, hash: nodes[slot].key.hashValue)
    return remove(slot: slot, bucket: position)
  }

  /// Removes and returns the least recently used node, if any.
  @inlinable
  mutating func removeLeastRecentlyUsed() -> Node? {
    guard tail != Self.none else { return nil }
    return remove(slot: Int(tail))
  }

  /// Removes every node in O(1): the old storage is handed back, to be released by the caller
  /// after it unlocks, and the segment starts over at its initial size.
  @inlinable
  mutating func detachAllNodes() -> DetachedNodes<Key, Value> {
    let detached = DetachedNodes<Key, Value>(nodes: nodes, count: count, buckets: buckets)
    capacity = Self.initialCapacity
    nodes = .allocate(capacity: capacity)
    let bucketCount = Self.initialCapacity * 2
    buckets = .allocate(capacity: bucketCount)
    buckets.initialize(repeating: 0, count: bucketCount)
    bucketMask = bucketCount - 1
    count = 0
    totalCost = 0
    head = Self.none
    tail = Self.none
    return detached
  }

  /// Calls `body` with every node, from the least to the most recently used.
  @inlinable
  func forEachFromLeastRecent(_ body: (Node) -> Void) {
    var cursor = tail
    while cursor != Self.none {
      body(nodes[Int(cursor)])
      cursor = nodes[Int(cursor)].newer
    }
  }
}

extension LRUNode: Sendable where Key: Sendable, Value: Sendable {}

extension LRUSegment {
  /// Checks every structural invariant and returns the violations (empty when sound). O(n).
  /// For tests.
  func invariantViolations() -> [String] {
    var problems: [String] = []
    // Every occupied bucket points at a node whose key hashes to the bucket's tag, and the
    // node is reachable by probing from its home.
    var referenced = Set<Int>()
    let bucketCount = bucketMask + 1
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
    // The recency list visits every node once, in both directions.
    var seen = 0
    var cursor = head
    var previous = Self.none
    while cursor != Self.none, seen <= count {
      if nodes[Int(cursor)].newer != previous { problems.append("node \(cursor) has a wrong newer link") }
      previous = cursor
      cursor = nodes[Int(cursor)].older
      seen += 1
    }
    if seen != count { problems.append("recency list has \(seen) nodes, segment has \(count)") }
    if previous != tail { problems.append("tail is \(tail), list ends at \(previous)") }
    var cost = 0
    for slot in 0..<count { cost += nodes[slot].cost }
    if cost != totalCost { problems.append("totalCost \(totalCost) but nodes sum to \(cost)") }
    return problems
  }
}

/// The storage of a segment that was emptied, released when the last reference goes away.
// SAFETY: sole owner of pointers a segment replaced under its lock; touched only in deinit.
@usableFromInline
final class DetachedNodes<Key, Value>: @unchecked Sendable {
  // Created under a segment's lock from the pointers the segment has just replaced, so this
  // object is their only owner; it never reads or writes them except to release them in deinit,
  // and the nodes hold only Sendable keys and values (a MemoryStore's).
  private let nodes: UnsafeMutablePointer<LRUNode<Key, Value>>
  private let count: Int
  private let buckets: UnsafeMutablePointer<UInt64>

  @usableFromInline
  init(nodes: UnsafeMutablePointer<LRUNode<Key, Value>>, count: Int, buckets: UnsafeMutablePointer<UInt64>) {
    self.nodes = nodes
    self.count = count
    self.buckets = buckets
  }

  deinit {
    nodes.deinitialize(count: count)
    nodes.deallocate()
    buckets.deallocate()
  }
}
