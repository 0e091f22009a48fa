/// The requests and prefetches waiting for one load, in arrival order.
///
/// An array sorted by waiter identifier (identifiers grow), so joining appends, a cancellation is
/// a binary search that leaves a tombstone, and the answers go out in arrival order: no hashing,
/// which matters when thousands of requests join one load.
@usableFromInline
struct Waiters<Continuation> {
  /// A waiter; a tombstone once it left (`continuation` is `nil`).
  @usableFromInline typealias Entry = (id: UInt64, continuation: Continuation?, isUrgent: Bool, isRequest: Bool)

  @usableFromInline var entries: [Entry] = []
  /// The number of waiters still waiting (entries that are not tombstones).
  @usableFromInline var count = 0
  /// The number of those that are urgent.
  @usableFromInline var urgentCount = 0
  /// The number of those that are requests, not prefetches: counted as they come and go, so that
  /// a load's end counts its hits without a pass over its waiters.
  @usableFromInline var requestCount = 0

  @inlinable
  init() {}

  @inlinable
  var isEmpty: Bool { count == 0 }

  /// Adds a waiter: a request (`isRequest`) or a prefetch. Identifiers are taken before the
  /// lock, so one may arrive slightly out of order: it is moved back into place (a step or two,
  /// at most one per concurrent joiner).
  @inlinable
  mutating func append(_ id: UInt64, _ continuation: Continuation, isUrgent: Bool = true, isRequest: Bool = true) {
    var index = entries.endIndex
    while index > entries.startIndex, entries[index - 1].id > id { index -= 1 }
    entries.insert((id, continuation, isUrgent, isRequest), at: index)
    count += 1
    if isUrgent { urgentCount += 1 }
    if isRequest { requestCount += 1 }
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
  func isWaiting(_ id: UInt64) -> Bool { index(of: id) != nil }

  /// Removes a waiter and returns its continuation, if it was waiting.
  @inlinable
  mutating func remove(_ id: UInt64) -> Continuation? {
    guard let index = index(of: id) else { return nil }
    let continuation = entries[index].continuation
    entries[index].continuation = nil
    count -= 1
    if entries[index].isUrgent { urgentCount -= 1 }
    if entries[index].isRequest { requestCount -= 1 }
    // Drop tombstones once they are the majority, keeping removals amortized O(log n).
    if entries.count > 16, count * 2 < entries.count { entries.removeAll { $0.continuation == nil } }
    return continuation
  }
}

/// The continuations of the waiters, in arrival order: a finished load's are iterated in
/// place, not copied into an array first (which cost a pass in generic code per load).
extension Waiters: Sequence {
  @usableFromInline
  struct Iterator: IteratorProtocol {
    @usableFromInline var entries: IndexingIterator<[Entry]>

    @inlinable
    init(_ entries: [Entry]) {
      self.entries = entries.makeIterator()
    }

    @inlinable
    mutating func next() -> Continuation? {
      while let entry = entries.next() {
        if let continuation = entry.continuation { return continuation }
      }
      return nil
    }
  }

  @inlinable
  func makeIterator() -> Iterator { Iterator(entries) }

  @inlinable
  var underestimatedCount: Int { count }
}

extension Waiters: Sendable where Continuation: Sendable {}
