extension MemoryStore {
  /// Stores `entries`, given from the least to the most recently used, as the most recently used
  /// entries of the store: the most recent of them that fit the limits together, whatever the
  /// eviction policy. Returns how many were stored.
  ///
  /// Inserting them one by one would leave the choice to the policy: W-TinyLFU's admission
  /// keeps the first ones it sees over later ones of equal frequency, which is the reverse of a
  /// snapshot's promise. So the entries that fit are chosen here, as exact LRU would after
  /// inserting all of them: from the most recent down, until the next one would take the count
  /// or the cost over its limit (an entry that alone costs more than the cost limit is left out
  /// and counted as ``EvictionReason/oversized``, as an insert refuses it). Then the policy's
  /// first victims among the entries already held leave until the chosen ones fit beside what
  /// remains, and the chosen ones are inserted, least recent first, evicting nothing.
  ///
  /// Call when no other thread writes to the store (at launch): concurrent inserts may take the
  /// room made here, and then the policy chooses again.
  ///
  /// - Parameter entries: Each entry with its cost, already checked by ``cost(of:for:)``: the
  ///   inserts use it rather than call the cost function again, so a function that answers
  ///   differently the second time cannot fail a restore half-way.
  /// - Returns: The entries stored; those left out, too old to fit beside the more recent ones
  ///   or each over the cost limit by itself; and those that expired before their insert (the
  ///   caller dropped the expired ones it saw, but time goes on).
  func restore(
    _ entries: [(key: Key, entry: CacheEntry<Value>, cost: Int64)]
  ) -> (stored: Int, leftOut: Int, expired: Int) {
    var kept: [(key: Key, entry: CacheEntry<Value>, cost: Int64)] = []
    var keptCost: Int64 = 0
    var oversized: [Key] = []
    for (key, entry, cost) in entries.reversed() {
      if cost > costLimit {
        oversized.append(key)
        continue
      }
      guard kept.count < countLimit, cost <= costLimit - keptCost else { break }
      kept.append((key, entry, cost))
      keptCost += cost
    }
    kept.reverse()
    for key in oversized { removeValue(for: key, countingAs: .oversized) }
    // Entries with the keys of kept ones are replaced: out of the way first, so that the room
    // made below is room for the kept entries, not for the entries they replace.
    for (key, _, _) in kept { removeValue(for: key) }
    evict(untilCountIsAtMost: countLimit - kept.count, costIsAtMost: costLimit - keptCost)
    var stored = 0
    for (key, entry, cost) in kept where insert(entry, for: key, cost: cost) { stored += 1 }
    return (stored, entries.count - kept.count, kept.count - stored)
  }

  /// Removes the policy's first victims, segment after segment, until the totals are at most
  /// `countTarget` entries and `costTarget` in cost; counts them as evictions for the limit that
  /// made room. Evicts at most as many entries as there were.
  private func evict(untilCountIsAtMost countTarget: Int, costIsAtMost costTarget: Int64) {
    var budget = count
    var index = 0
    var emptyInARow = 0
    while budget > 0, emptyInARow < segments.count, count > countTarget || totalCost > costTarget {
      let reason: EvictionReason = count > countTarget ? .countLimit : .costLimit
      let node = segments.withLock(index) { segment -> Node? in
        guard let node = segment.removeFirstVictim() else { return nil }
        segment.evictions[reason] &+= 1
        return node
      }
      if let node {
        account(removed: node)
        if eventHub.isObserved { eventHub.emitEviction(of: node.key, reason: reason) }
        budget -= 1
        emptyInARow = 0
      } else {
        emptyInARow += 1
      }
      index = (index &+ 1) & segmentMask
    }
  }
}
