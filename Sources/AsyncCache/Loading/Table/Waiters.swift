/// The requests waiting for one load, in arrival order.
///
/// An array sorted by waiter identifier (identifiers grow), so joining appends, a cancellation is
/// a binary search that leaves a tombstone, and the answers go out in arrival order: no hashing,
/// which matters when thousands of requests join one load.
@usableFromInline
struct Waiters<Continuation> {
  @usableFromInline var entries: [(id: UInt64, continuation: Continuation?, isUrgent: Bool)] = []
  /// The number of waiters still waiting (entries that are not tombstones).
  @usableFromInline var count = 0
  /// The number of those that are urgent.
  @usableFromInline var urgentCount = 0

  @inlinable
  init() {}

  @inlinable
  var isEmpty: Bool { count == 0 }

  /// Adds a waiter. Identifiers are taken before the lock, so one may arrive slightly out of
  /// order: it is moved back into place (a step or two, at most one per concurrent joiner).
  @inlinable
  mutating func append(_ id: UInt64, _ continuation: Continuation, isUrgent: Bool = true) {
    var index = entries.endIndex
    while index > entries.startIndex, entries[index - 1].id > id { index -= 1 }
    entries.insert((id, continuation, isUrgent), at: index)
    count += 1
    if isUrgent { urgentCount += 1 }
  }

  /// Makes every waiter background.
  @usableFromInline
  mutating func demoteAll() {
    for index in entries.indices { entries[index].isUrgent = false }
    urgentCount = 0
  }

  @inlinable
  func index(of id: UInt64) -> Int? {
    var low = entries.startIndex
    var high = entries.endIndex
    while low < high {
      let middle = (low + high) / 2
      if entries[middle].id < id { low = middle + 1 } else { high = middle }
    }
    guard low < entries.endIndex, entries[low].id == id, entries[low].continuation != nil else { return nil }
    return low
  }

  @inlinable
  func contains(_ id: UInt64) -> Bool { index(of: id) != nil }

  /// Removes a waiter and returns its continuation, if it was waiting.
  @inlinable
  mutating func remove(_ id: UInt64) -> Continuation? {
    guard let index = index(of: id) else { return nil }
    let continuation = entries[index].continuation
    entries[index].continuation = nil
    count -= 1
    if entries[index].isUrgent { urgentCount -= 1 }
    // Drop tombstones once they are the majority, keeping removals amortized O(log n).
    if entries.count > 16, count * 2 < entries.count { entries.removeAll { $0.continuation == nil } }
    return continuation
  }

  /// The continuations of the waiters, in arrival order.
  @inlinable
  var continuations: [Continuation] {
    // A loop, not `compactMap(\.continuation)`: a key path in generic code is looked up at run
    // time, once per waiter, as the load's answer goes out.
    var continuations: [Continuation] = []
    continuations.reserveCapacity(count)
    for entry in entries { if let continuation = entry.continuation { continuations.append(continuation) } }
    return continuations
  }
}

extension Waiters: Sendable where Continuation: Sendable {}
