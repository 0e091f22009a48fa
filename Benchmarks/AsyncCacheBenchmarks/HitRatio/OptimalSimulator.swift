/// Belady's optimal policy with bypass: the most hits any policy holding at most `capacity` keys
/// can score on the trace, computed offline because it needs to know the future.
///
/// On a miss with a full cache it evicts the resident key whose next access is farthest away,
/// or, when the missed key's own next access is farther still (or never comes), does not insert
/// it at all. Keeping the key needed soonest is optimal (Belady 1966; with bypass allowed, the
/// missed key is simply one more candidate for eviction).
///
/// O(N log C) for N accesses and a capacity of C: one backward pass finds every access's next use,
/// then a max-heap of resident keys keyed by next use yields the victim. A hit pushes the key's
/// new next use and leaves the old entry behind; such stale entries are skipped when they reach
/// the top, and the heap is rebuilt from the live entries when it grows past twice the capacity,
/// so it never holds more than 2C + 1 entries.
struct OptimalSimulator: PolicySimulator {
  private let capacity: Int
  private let keys: [Int32]
  /// For each position of the trace, the position of the next access to the same key, or
  /// ``never``.
  private let nextUse: [Int32]
  /// The position of the next access to `access(_:)`.
  private var position = 0
  /// For each resident key, its next use; -1 when the key is not resident.
  private var residentNextUse: [Int32]
  private var count = 0
  /// A max-heap of `nextUse << 32 | key`: ordered by next use. An entry is live while its key is
  /// resident with that next use.
  private var heap: [UInt64] = []

  /// The next use of a key never accessed again: after every position.
  private let never: Int32

  /// An empty cache of at most `capacity` keys that will be given the accesses of `trace`, in order.
  init(trace: Trace, capacity: Int) {
    precondition(trace.keys.count < Int(Int32.max) && trace.keySpace <= Int(Int32.max))
    self.capacity = capacity
    self.keys = trace.keys
    never = Int32(trace.keys.count)
    nextUse = Self.nextUses(of: trace.keys, keySpace: trace.keySpace, never: never)
    residentNextUse = Array(repeating: -1, count: trace.keySpace)
    heap.reserveCapacity(2 * capacity + 1)
  }

  /// For each position, the position of the next access to the same key (`never` when none): one
  /// backward pass.
  static func nextUses(of keys: [Int32], keySpace: Int, never: Int32) -> [Int32] {
    var upcoming = [Int32](repeating: never, count: keySpace)
    var nextUse = [Int32](repeating: never, count: keys.count)
    for position in keys.indices.reversed() {
      let key = Int(keys[position])
      nextUse[position] = upcoming[key]
      upcoming[key] = Int32(position)
    }
    return nextUse
  }

  mutating func access(_ key: Int32) -> Bool {
    precondition(keys[position] == key, "the optimal policy must be replayed over the trace it was built for")
    let upcoming = nextUse[position]
    position += 1
    if residentNextUse[Int(key)] >= 0 {
      residentNextUse[Int(key)] = upcoming
      push(upcoming, key)
      return true
    }
    guard capacity > 0 else { return false }
    if count == capacity {
      let (victimNextUse, victim) = farthestResident()
      // Bypass: every resident key is needed sooner than this one (or both are never needed).
      guard victimNextUse > upcoming else { return false }
      popTop()
      residentNextUse[Int(victim)] = -1
      count -= 1
    }
    residentNextUse[Int(key)] = upcoming
    push(upcoming, key)
    count += 1
    return false
  }

  // MARK: Heap

  /// The live entry at the top of the heap, after discarding the stale ones above it.
  private mutating func farthestResident() -> (nextUse: Int32, key: Int32) {
    while true {
      let (nextUse, key) = Self.unpack(heap[0])
      if residentNextUse[Int(key)] == nextUse { return (nextUse, key) }
      popTop()
    }
  }

  private mutating func push(_ nextUse: Int32, _ key: Int32) {
    if heap.count > 2 * capacity { rebuildFromLiveEntries() }
    heap.append(UInt64(UInt32(nextUse)) << 32 | UInt64(UInt32(key)))
    var child = heap.count - 1
    let entry = heap[child]
    while child > 0 {
      let parent = (child - 1) / 2
      guard heap[parent] < entry else { break }
      heap[child] = heap[parent]
      child = parent
    }
    heap[child] = entry
  }

  private mutating func popTop() {
    let last = heap.removeLast()
    guard !heap.isEmpty else { return }
    siftDown(last, from: 0)
  }

  /// Places `entry` at `index` or below, moving larger children up.
  private mutating func siftDown(_ entry: UInt64, from index: Int) {
    var parent = index
    let count = heap.count
    while true {
      var child = 2 * parent + 1
      guard child < count else { break }
      if child + 1 < count, heap[child + 1] > heap[child] { child += 1 }
      guard heap[child] > entry else { break }
      heap[parent] = heap[child]
      parent = child
    }
    heap[parent] = entry
  }

  /// Drops the stale entries and restores the heap order bottom-up: O(C), once per C pushes at most.
  private mutating func rebuildFromLiveEntries() {
    let residentNextUse = residentNextUse
    heap.removeAll { entry in
      let (nextUse, key) = Self.unpack(entry)
      return residentNextUse[Int(key)] != nextUse
    }
    for index in stride(from: heap.count / 2 - 1, through: 0, by: -1) {
      siftDown(heap[index], from: index)
    }
  }

  private static func unpack(_ entry: UInt64) -> (nextUse: Int32, key: Int32) {
    (Int32(truncatingIfNeeded: entry >> 32), Int32(truncatingIfNeeded: entry))
  }
}
