/// Exact least-recently-used eviction: a miss inserts the key, evicting the least recently
/// accessed one when full. The baseline of the hit-ratio benchmark.
///
/// O(1) per access without hashing: a table indexed by key gives each resident key's slot, and
/// the slots form a circular doubly linked list in recency order, threaded through two arrays.
struct LRUSimulator: PolicySimulator {
  private let capacity: Int
  /// The slot of each key, or -1 when it is not resident.
  private var slotOfKey: [Int32]
  /// The key in each slot.
  private var keyOfSlot: [Int32]
  /// The slot accessed just before (`older`) and just after (`newer`) each slot. Slot `capacity` is
  /// the list's sentinel: its `newer` is the least recent slot, its `older` the most recent.
  private var older: [Int32]
  private var newer: [Int32]
  private var count = 0

  /// An empty cache of at most `capacity` keys, all in `0..<keySpace`.
  init(capacity: Int, keySpace: Int) {
    precondition(capacity >= 0 && capacity < Int(Int32.max) && keySpace <= Int(Int32.max))
    self.capacity = capacity
    slotOfKey = Array(repeating: -1, count: keySpace)
    keyOfSlot = Array(repeating: -1, count: capacity)
    older = Array(repeating: Int32(capacity), count: capacity + 1)
    newer = Array(repeating: Int32(capacity), count: capacity + 1)
  }

  private var sentinel: Int32 { Int32(capacity) }

  mutating func access(_ key: Int32) -> Bool {
    let slot = slotOfKey[Int(key)]
    if slot >= 0 {
      if older[Int(sentinel)] != slot {
        unlink(slot)
        linkAsMostRecent(slot)
      }
      return true
    }
    guard capacity > 0 else { return false }
    let free: Int32
    if count < capacity {
      free = Int32(count)
      count += 1
    } else {
      free = newer[Int(sentinel)]
      unlink(free)
      slotOfKey[Int(keyOfSlot[Int(free)])] = -1
    }
    keyOfSlot[Int(free)] = key
    slotOfKey[Int(key)] = free
    linkAsMostRecent(free)
    return false
  }

  private mutating func unlink(_ slot: Int32) {
    let before = older[Int(slot)]
    let after = newer[Int(slot)]
    newer[Int(before)] = after
    older[Int(after)] = before
  }

  private mutating func linkAsMostRecent(_ slot: Int32) {
    let previousMostRecent = older[Int(sentinel)]
    older[Int(slot)] = previousMostRecent
    newer[Int(slot)] = sentinel
    newer[Int(previousMostRecent)] = slot
    older[Int(sentinel)] = slot
  }
}
