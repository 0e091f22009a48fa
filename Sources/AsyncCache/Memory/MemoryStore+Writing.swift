public import Synchronization  // Atomic

// How a `MemoryStore` writes: inserts, the adaptive window's spans and votes, eviction across
// segments, removal, trimming and memory pressure.

extension MemoryStore {
  /// Under ``EvictionPolicy/adaptive``: lets the key just inserted with `hash` vote with its
  /// ghost, counts it in the current span and ends the span after a capacity of new keys
  /// (``WindowTarget``), then sizes the segment's window for the layer's share if it moved since
  /// the segment last looked. Called under the segment's lock, before the insert's eviction.
  @inlinable
  func adaptWindow(of segment: inout MemorySegment<Key, Value>, toInsertOf hash: Int) {
    guard let windowTarget else { return }
    // The layer's size in entries: its count limit, or (bounded by cost, or unbounded) what it
    // holds, at least 256; the ghosts of a segment bounded by cost follow what it holds.
    let entries: Int
    if isBoundedByCost || countLimit == .max {
      entries = Swift.min(countLimit, Swift.max(entryCount.load(ordering: .relaxed), 256))
      if isBoundedByCost && countLimit != .max { segment.admission.ghosts?.follow(entries: segment.count) }
    } else {
      entries = countLimit
    }
    let vote = segment.windowVote(tag: MemorySegment<Key, Value>.tag(of: hash))
    if vote != 0 {
      if vote > 0 {
        spanVotesUp.wrappingAdd(1, ordering: .relaxed)
      } else {
        spanVotesDown.wrappingAdd(1, ordering: .relaxed)
      }
      windowTarget.withLock { target in
        if target.count(vote: vote, entries: entries) {
          windowShareBits.store(target.share.bitPattern, ordering: .relaxed)
        }
      }
    }
    // The segment's hits since it last handed them in.
    if segment.windowHits | segment.mainHits != 0 {
      spanWindowHits.wrappingAdd(segment.windowHits, ordering: .relaxed)
      spanMainHits.wrappingAdd(segment.mainHits, ordering: .relaxed)
      segment.windowHits = 0
      segment.mainHits = 0
    }
    let inserts = spanInserts.wrappingAdd(1, ordering: .relaxed).newValue
    // Of concurrent inserts past the span, the one that resets the count weighs the regions.
    if inserts >= entries,
      spanInserts.compareExchange(expected: inserts, desired: 0, ordering: .relaxed).exchanged
    {
      endSpan(entries: entries)
    }
    let share = Double(bitPattern: windowShareBits.load(ordering: .relaxed))
    if share != segment.admission.appliedShare { segment.applyWindowShare(share) }
  }

  /// Starts a new span: forgets the new keys, votes and hits counted so far. For tests (the
  /// five stores are not one atomic step).
  @usableFromInline
  func restartSpan() {
    spanInserts.store(0, ordering: .relaxed)
    spanVotesUp.store(0, ordering: .relaxed)
    spanVotesDown.store(0, ordering: .relaxed)
    spanWindowHits.store(0, ordering: .relaxed)
    spanMainHits.store(0, ordering: .relaxed)
  }

  /// The end of a span in a layer of about `entries` entries: relaxes the window
  /// (``WindowTarget/relax()``) if the span's votes did not ask for a larger one and the window
  /// earned clearly fewer hits per entry than the main region over it
  /// (``WindowTarget/windowEarnsLess(windowHits:windowEntries:mainHits:mainEntries:)``).
  @usableFromInline
  func endSpan(entries: Int) {
    let votesUp = spanVotesUp.exchange(0, ordering: .relaxed)
    let votesDown = spanVotesDown.exchange(0, ordering: .relaxed)
    let windowHits = spanWindowHits.exchange(0, ordering: .relaxed)
    let mainHits = spanMainHits.exchange(0, ordering: .relaxed)
    guard let windowTarget else { return }
    // A window a prefetcher holds open earns what its prefetches earn, not what its share
    // would: no evidence for the target.
    guard windowFloor.load(ordering: .relaxed) == 0 else { return }
    guard !WindowTarget.votesAskForLargerWindow(up: votesUp, down: votesDown) else { return }
    windowTarget.withLock { target in
      let regions = WindowTarget.regionEntries(
        share: target.share, count: entryCount.load(ordering: .relaxed), entries: entries)
      let earnsLess = WindowTarget.windowEarnsLess(
        windowHits: windowHits, windowEntries: regions.window, mainHits: mainHits, mainEntries: regions.main)
      if earnsLess && target.relax() {
        windowShareBits.store(target.share.bitPattern, ordering: .relaxed)
      }
    }
  }

  /// Under W-TinyLFU (fixed or adaptive), keeps room in the admission window for at least
  /// `entries` entries (all segments together, each its part rounded up, and at most half of
  /// each segment) until ``releaseWindow(_:)``; reservations add up. In a layer bounded by cost,
  /// the room is counted in cost by each segment's mean entry cost. A running
  /// ``AsyncPrefetcher`` reserves room for the keys it loads ahead of the user and those the
  /// user read since: its entries then wait in the window until they are read, instead of
  /// losing their duels at admission to older entries read more often. Under
  /// ``EvictionPolicy/adaptive`` the target goes on moving underneath (its votes still count;
  /// a span does not relax it while room is reserved). A segment applies the change at its
  /// next insert of a new key.
  ///
  /// - Returns: The reservation to release; `nil` under ``EvictionPolicy/leastRecentlyUsed``,
  ///   which has no admission window (nothing to release).
  func reserveWindow(entries: Int) -> UInt64? {
    guard hasAdmissionWindow, entries > 0 else { return nil }
    return windowReservations.withLock { reservations in
      reservations.next &+= 1
      reservations.entries[reservations.next] = entries
      windowFloor.store(Self.saturatingSum(reservations.entries.values), ordering: .relaxed)
      return reservations.next
    }
  }

  /// Ends reservation `id` of ``reserveWindow(entries:)``; each segment's window goes back to
  /// what the policy makes it at its next insert. Releasing twice does nothing.
  func releaseWindow(_ id: UInt64) {
    windowReservations.withLock { reservations in
      guard reservations.entries.removeValue(forKey: id) != nil else { return }
      windowFloor.store(Self.saturatingSum(reservations.entries.values), ordering: .relaxed)
    }
  }

  /// A segment's part of `floor` entries: its share, rounded up.
  @inlinable
  func segmentFloor(_ floor: Int) -> Int {
    let segments = segmentMask &+ 1
    return floor / segments &+ (floor % segments == 0 ? 0 : 1)
  }

  /// The sum of `entries`, `Int.max` if it overflows.
  static func saturatingSum(_ entries: some Sequence<Int>) -> Int {
    entries.reduce(0) { sum, next in
      let (total, overflow) = sum.addingReportingOverflow(next)
      return overflow ? .max : total
    }
  }

  /// Stores `entry` for `key`, letting the policy evict while over a limit (never this entry).
  ///
  /// Inlinable, with what it calls on its common path, so that it is specialized for the
  /// caller's key and value types: unspecialized, an insert spent most of its time looking up
  /// generic metadata (40% of a `cache.hitRatio` replay, which inserts on every miss).
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidCost`` when the cost function returns a cost outside
  ///   `0..<2^43`; the cache is unchanged then.
  @inlinable
  func insert(_ entry: CacheEntry<Value>, for key: Key) throws {
    if !entry.metadata.isEmpty { try entry.metadata.validate() }
    insert(entry, for: key, cost: try cost(of: entry.value, for: key))
  }

  /// Stores `entry`, whose cost (``cost(of:for:)``) is `entryCost`, for `key`, letting the
  /// policy evict while over a limit (never this entry). Returns whether it was stored: `false`
  /// when it has expired already (the entry for `key` is removed then) or is refused (over the
  /// cost limit, or a count limit of 0).
  @inlinable
  @discardableResult
  func insert(_ entry: CacheEntry<Value>, for key: Key, cost entryCost: Int64) -> Bool {
    // The clock is read only when something can expire.
    let now = timeToLive != nil || entry.expiresAt != nil ? clock.now : nil
    let capped = entry.expiring(noLaterThan: timeToLive.flatMap { ttl in now?.advanced(by: ttl) })
    let expiry = capped.expiresAt?.nanosecondsSince1970 ?? .max
    if let now, capped.isExpired(at: now) {
      // Already expired: storing it would only serve a stale value; drop the old one too.
      refuseExpiredArrival(key, expiresAt: capped.expiresAt ?? now, now: now)
      return false
    }
    if countLimit == 0 || entryCost > costLimit {
      removeValue(for: key, countingAs: countLimit == 0 ? .countLimit : .oversized)
      return false
    }

    let hash = key.hashValue
    let index = segmentIndex(for: hash)
    var released: [(node: Node, reason: EvictionReason)] = []
    let (stillOver, replaced) = segments.withLock(index) { segment -> (Bool, Value?) in
      var replaced: Value?
      let written: Int
      if let slot = segment.find(key, hash: hash) {
        var value = entry.value
        swap(&value, &segment.nodes[slot].value)
        replaced = value
        let oldCost = segment.nodes[slot].cost
        segment.nodes[slot].cost = entryCost
        segment.nodes[slot].expiry = expiry
        segment.totalCost &+= entryCost &- oldCost
        self.entryCost.wrappingAdd(entryCost &- oldCost, ordering: .relaxed)
        segment.recordRewrite(slot, hash: hash, oldCost: oldCost)
        segment.setMetadata(entry.metadata, at: slot, key: key)
        written = slot
      } else {
        written = segment.append(Node(key: key, value: entry.value, expiry: expiry, cost: entryCost), hash: hash)
        segment.setMetadata(entry.metadata, at: written, key: key)
        segment.markInserted(written, hash: hash)
        self.entryCount.wrappingAdd(1, ordering: .relaxed)
        self.entryCost.wrappingAdd(entryCost, ordering: .relaxed)
        if windowTarget != nil { adaptWindow(of: &segment, toInsertOf: hash) }
        if segment.admission.isEnabled {
          // Room for the prefetchers' entries, resized on every insert while reserved (the
          // segment's mean cost moves), and once more when the reservations end.
          let floor = windowFloor.load(ordering: .relaxed)
          if floor != 0 || segment.admission.appliedFloor != 0 { segment.applyWindowFloor(segmentFloor(floor)) }
        }
      }
      // Keep the entry just written.
      evict(from: &segment, sparing: UInt32(truncatingIfNeeded: written), into: &released)
      return (overLimitReason() != nil, replaced)
    }
    if stillOver { evict(startingAfter: index, into: &released) }
    // The replaced value and the evicted nodes are released here, after the lock.
    withExtendedLifetime(replaced) {}
    if !released.isEmpty, eventHub.isObserved {
      for (node, reason) in released { eventHub.emitEviction(of: node.key, reason: reason) }
    }
    return true
  }

  /// Evicts from the segments after `index`, one at a time, until the totals are within the
  /// limits. Never holds two segment locks at once.
  @inlinable
  func evict(startingAfter index: Int, into released: inout [(node: Node, reason: EvictionReason)]) {
    for offset in 1...segments.count {
      guard overLimitReason() != nil else { return }
      segments.withLock((index &+ offset) & segmentMask) { segment in
        evict(from: &segment, sparing: MemorySegment<Key, Value>.none, into: &released)
      }
    }
  }

  /// Lets `segment`'s policy evict while the totals are over a limit, never the node at
  /// `spared`; counts each eviction by its reason.
  @inlinable
  func evict(
    from segment: inout MemorySegment<Key, Value>, sparing spared: UInt32,
    into released: inout [(node: Node, reason: EvictionReason)]
  ) {
    var evictions = EvictionCounts()
    segment.evict(sparing: spared, while: overLimitReason) { node, reason in
      evictions[reason] &+= 1
      account(removed: node)
      released.append((node, reason))
    }
    segment.evictions = segment.evictions + evictions
  }

  /// The limit the totals exceed, if any.
  @inlinable
  func overLimitReason() -> EvictionReason? {
    if entryCount.load(ordering: .relaxed) > countLimit { return .countLimit }
    if entryCost.load(ordering: .relaxed) > costLimit { return .costLimit }
    return nil
  }

  @inlinable
  func account(removed node: Node) {
    entryCount.wrappingSubtract(1, ordering: .relaxed)
    entryCost.wrappingSubtract(node.cost, ordering: .relaxed)
  }

  @inlinable
  func cost(of value: Value, for key: Key) throws -> Int64 {
    guard let cost else { return 0 }
    let result = cost(value)
    guard result >= 0, result <= Node.maximumCost else { throw Self.invalidCost(result, for: key) }
    return Int64(result)
  }

  /// The error of a cost function that returned `cost` for the value of `key`.
  @usableFromInline
  static func invalidCost(_ cost: Int, for key: Key) -> AsyncCacheError {
    AsyncCacheError(
      code: .invalidCost,
      message: "the cost function returned \(cost) for the value of key \(key); costs must be in 0..<2^43"
    )
  }

  /// Removes the entry for `key` and returns its value, if there was one.
  @discardableResult
  func removeValue(for key: Key) -> Value? {
    removeValue(for: key, countingAs: nil)
  }

  /// Removes `key`'s entry because an entry for it arrived already expired at `now`, counts and
  /// reports that, and logs it: a warning the first time, then at debug.
  @usableFromInline
  func refuseExpiredArrival(_ key: Key, expiresAt: CacheInstant, now: CacheInstant) {
    removeValue(for: key, countingAs: .expiredOnArrival)
    environment.logExpiredArrival(key: key, expiresAt: expiresAt, now: now)
  }

  @usableFromInline
  @discardableResult
  func removeValue(for key: Key, countingAs reason: EvictionReason?) -> Value? {
    let hash = key.hashValue
    let removed = segments.withLock(segmentIndex(for: hash)) { segment -> Node? in
      if let reason { segment.evictions[reason] &+= 1 }
      guard let slot = segment.find(key, hash: hash) else { return nil }
      segment.abandonWatch(at: slot, hash: hash)
      return segment.remove(slot: slot)
    }
    // A refused entry is reported whether or not an older one was there.
    if let reason, eventHub.isObserved { eventHub.emitEviction(of: key, reason: reason) }
    guard let removed else { return nil }
    account(removed: removed)
    return removed.value
  }

  /// Removes every entry; `reason`, when given, counts them as evictions. The entries are
  /// released after each segment is unlocked.
  func removeAll(countingAs reason: EvictionReason? = nil) {
    for index in 0..<segments.count {
      let observed = reason != nil && eventHub.isObserved
      let (detached, evictedKeys) = segments.withLock(index) { segment -> (_, [Key]) in
        if let reason { segment.evictions[reason] &+= segment.count }
        let keys = observed ? segment.liveSlots.map { segment.nodes[$0].key } : []
        entryCount.wrappingSubtract(segment.count, ordering: .relaxed)
        entryCost.wrappingSubtract(segment.totalCost, ordering: .relaxed)
        segment.sampler.abandonAll()
        // Memory pressure releases a referee's shadows too.
        return (segment.detachAllNodes(releasingReferee: reason == .memoryPressure), keys)
      }
      withExtendedLifetime(detached) {}
      if let reason { for key in evictedKeys { eventHub.emitEviction(of: key, reason: reason) } }
    }
  }

  /// Removes every expired entry and returns how many there were. O(n).
  @discardableResult
  func removeExpired() -> Int {
    let now = clock.now.nanosecondsSince1970
    var removedCount = 0
    for index in 0..<segments.count {
      var released: [Node] = []
      segments.withLock(index) { segment in
        // A removal moves no other node.
        segment.forEachSlot { segment, slot in
          guard segment.nodes[slot].expiry <= now else { return }
          segment.abandonWatch(at: slot)
          let node = segment.remove(slot: slot)
          segment.evictions[.expired] &+= 1
          account(removed: node)
          released.append(node)
        }
        segment.shrinkIfSparse()
      }
      removedCount &+= released.count
      if !released.isEmpty, eventHub.isObserved {
        for node in released { eventHub.emitEviction(of: node.key, reason: .expired) }
      }
    }
    return removedCount
  }

  /// Trims to ``trimFraction`` of the limits (`.warning`) or empties the store (`.critical`).
  func handleMemoryPressure(_ level: MemoryPressureLevel) {
    switch level {
    case .normal:
      return
    case .critical:
      removeAll(countingAs: .memoryPressure)
    case .warning:
      trim(toFraction: trimFraction)
    }
  }

  /// Evicts entries until the totals are at most `fraction` of the limits (or of the current
  /// totals, when smaller).
  ///
  /// The segments give up their first victim (LRU: the least recently used; W-TinyLFU:
  /// probation's, then the window's, then protected's least recently used) in turn until the global totals
  /// reach the target, so the trim is exact however the entries are spread (a small cache over
  /// many segments is trimmed, not emptied) and approaches global LRU order. It evicts at most
  /// as many entries as there were, even if other threads keep inserting.
  func trim(toFraction fraction: Double) {
    let countTarget = Int((Double(Swift.min(countLimit, count)) * fraction).rounded(.down))
    let costTarget = Int64((Double(Swift.min(costLimit, totalCost)) * fraction).rounded(.down))
    var budget = count
    var index = 0
    var emptyInARow = 0
    while budget > 0, emptyInARow < segments.count, count > countTarget || totalCost > costTarget {
      let node = segments.withLock(index) { segment -> Node? in
        guard let node = segment.removeFirstVictim() else { return nil }
        segment.evictions[.memoryPressure] &+= 1
        return node
      }
      if let node {
        account(removed: node)
        if eventHub.isObserved { eventHub.emitEviction(of: node.key, reason: .memoryPressure) }
        budget -= 1
        emptyInARow = 0
      } else {
        emptyInARow += 1
      }
      index = (index &+ 1) & segmentMask
    }
    for index in 0..<segments.count {
      segments.withLock(index) { $0.shrinkIfSparse() }
    }
  }
}
