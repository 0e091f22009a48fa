/// Adaptive Replacement Cache, as Megiddo and Modha give it in "ARC: A Self-Tuning, Low Overhead
/// Replacement Cache" (FAST 2003, figure 4): a reference policy of the hit-ratio benchmark.
///
/// The cache holds `c` keys in two LRU lists, T1 (seen once recently) and T2 (seen at least
/// twice), and remembers as many evicted keys in two ghost lists, B1 (evicted from T1) and B2
/// (evicted from T2). A hit in B1 means T1 was too small, so the target size `p` of T1 grows; a
/// hit in B2 shrinks it. `p` adapts on every ghost hit, with no parameter to tune.
///
/// O(1) per access without hashing: every key of `0..<keySpace` has a list tag and a place in a
/// doubly linked list threaded through two arrays; each list has a sentinel after the keys.
struct ARCSimulator: PolicySimulator {
  /// The lists a key can be in; `none` for a key ARC does not remember.
  private enum List: UInt8 {
    case t1 = 0
    case t2 = 1
    case b1 = 2
    case b2 = 3
    case none = 4
  }

  private let capacity: Int
  /// The target size of T1, a real number in `0...capacity` as in the paper.
  private var target = 0.0
  /// The list of each key.
  private var listOfKey: [List]
  /// The key before (`older`) and after (`newer`) each key in its list. The sentinel of list `l`
  /// is `keySpace + l`: its `newer` is the list's least recent key, its `older` the most recent.
  private var older: [Int32]
  private var newer: [Int32]
  /// The length of each list, by its raw value.
  private var lengths = [0, 0, 0, 0]
  private let keySpace: Int32

  /// An empty cache of at most `capacity` keys, all in `0..<keySpace`.
  init(capacity: Int, keySpace: Int) {
    precondition(capacity >= 0 && keySpace + 4 <= Int(Int32.max))
    self.capacity = capacity
    self.keySpace = Int32(keySpace)
    listOfKey = Array(repeating: .none, count: keySpace)
    let sentinels = (0..<4).map { Int32(keySpace + $0) }
    older = Array(repeating: -1, count: keySpace) + sentinels
    newer = Array(repeating: -1, count: keySpace) + sentinels
  }

  private var t1Length: Int { lengths[Int(List.t1.rawValue)] }
  private var t2Length: Int { lengths[Int(List.t2.rawValue)] }
  private var b1Length: Int { lengths[Int(List.b1.rawValue)] }
  private var b2Length: Int { lengths[Int(List.b2.rawValue)] }

  mutating func access(_ key: Int32) -> Bool {
    guard capacity > 0 else { return false }
    let c = Double(capacity)
    switch listOfKey[Int(key)] {
    case .t1, .t2:
      // Case I: a hit; the key has now been seen twice.
      move(key, to: .t2)
      return true
    case .b1:
      // Case II: T1 was too small for this key.
      let delta = b1Length >= b2Length ? 1 : Double(b2Length) / Double(b1Length)
      target = min(c, target + delta)
      replace(missed: .b1)
      move(key, to: .t2)
      return false
    case .b2:
      // Case III: T2 was too small for this key.
      let delta = b2Length >= b1Length ? 1 : Double(b1Length) / Double(b2Length)
      target = max(0, target - delta)
      replace(missed: .b2)
      move(key, to: .t2)
      return false
    case .none:
      // Case IV: a key ARC does not remember.
      let l1 = t1Length + b1Length
      if l1 == capacity {
        if t1Length < capacity {
          forget(leastRecentOf: .b1)
          replace(missed: .none)
        } else {
          forget(leastRecentOf: .t1)
        }
      } else {
        let total = l1 + t2Length + b2Length
        if total >= capacity {
          if total == 2 * capacity { forget(leastRecentOf: .b2) }
          replace(missed: .none)
        }
      }
      move(key, to: .t1)
      return false
    }
  }

  /// The paper's REPLACE: evicts T1's least recent key into B1 when T1 is over its target (or at
  /// it, for a key found in B2), otherwise T2's into B2.
  private mutating func replace(missed list: List) {
    let t1 = t1Length
    if t1 > 0, Double(t1) > target || (list == .b2 && Double(t1) == target) {
      move(leastRecent(of: .t1), to: .b1)
    } else {
      move(leastRecent(of: .t2), to: .b2)
    }
  }

  private func sentinel(_ list: List) -> Int32 { keySpace + Int32(list.rawValue) }

  private func leastRecent(of list: List) -> Int32 {
    let key = newer[Int(sentinel(list))]
    precondition(key < keySpace, "ARC took a key from its empty list \(list)")
    return key
  }

  /// Drops the least recent key of `list` from every list.
  private mutating func forget(leastRecentOf list: List) {
    let key = leastRecent(of: list)
    unlink(key)
    listOfKey[Int(key)] = .none
  }

  /// Moves `key` (wherever it is) to the most recent end of `list`.
  private mutating func move(_ key: Int32, to list: List) {
    if listOfKey[Int(key)] != .none { unlink(key) }
    let head = sentinel(list)
    let previousMostRecent = older[Int(head)]
    older[Int(key)] = previousMostRecent
    newer[Int(key)] = head
    newer[Int(previousMostRecent)] = key
    older[Int(head)] = key
    listOfKey[Int(key)] = list
    lengths[Int(list.rawValue)] += 1
  }

  private mutating func unlink(_ key: Int32) {
    let before = older[Int(key)]
    let after = newer[Int(key)]
    newer[Int(before)] = after
    older[Int(after)] = before
    lengths[Int(listOfKey[Int(key)].rawValue)] -= 1
  }
}
