import Synchronization  // Atomic

// What a `MemoryStore` tells of itself: counts, keys, eviction order and totals.

extension MemoryStore {
  var count: Int { entryCount.load(ordering: .relaxed) }
  var totalCost: Int64 { entryCost.load(ordering: .relaxed) }

  /// The keys of all entries, expired ones included until they are removed.
  var keys: [Key] {
    var keys: [Key] = []
    keys.reserveCapacity(count)
    for index in 0..<segments.count {
      segments.withLock(index) { segment in
        for slot in segment.liveSlots { keys.append(segment.nodes[slot].key) }
      }
    }
    return keys
  }

  /// Keys per segment, in eviction order (LRU: from least to most recently used).
  var keysInEvictionOrder: [[Key]] {
    (0..<segments.count).map { index in
      segments.withLock(index) { segment in
        var keys: [Key] = []
        segment.forEachInEvictionOrder { keys.append($0.key) }
        return keys
      }
    }
  }

  /// The entries unexpired at `now` (nanoseconds since 1970) and not dead by tag, per segment, in eviction order (LRU:
  /// from least to most recently used); each segment is copied under its lock, without changing
  /// recency or statistics. O(n). For snapshots.
  func entriesInEvictionOrder(unexpiredAt now: Int64) -> [[(key: Key, entry: CacheEntry<Value>)]] {
    (0..<segments.count).map { index in
      segments.withLock(index) { segment in
        var entries: [(key: Key, entry: CacheEntry<Value>)] = []
        entries.reserveCapacity(segment.count)
        let metadata = segment.metadata
        segment.forEachInEvictionOrder { node in
          guard node.expiry > now else { return }
          let expiresAt = node.expiry == .max ? nil : CacheInstant(nanosecondsSince1970: node.expiry)
          let entryMetadata = node.hasMetadata ? metadata[node.key] ?? EntryMetadata() : EntryMetadata()
          // A dead entry (an invalidated tag) must not outlive the invalidation in a snapshot.
          guard !tagInvalidations.kills(entryMetadata) else { return }
          entries.append((node.key, CacheEntry(node.value, expiresAt: expiresAt, metadata: entryMetadata)))
        }
        return entries
      }
    }
  }

  /// Structural violations in every segment plus mismatches between the segments and the
  /// global totals (empty when sound). Call when no other thread uses the store. For tests.
  func invariantViolations() -> [String] {
    var problems: [String] = []
    var count = 0
    var cost: Int64 = 0
    for index in 0..<segments.count {
      segments.withLock(index) { segment in
        problems += segment.invariantViolations().map { "segment \(index): \($0)" }
        count += segment.count
        cost += segment.totalCost
      }
    }
    if count != self.count { problems.append("segments hold \(count) entries, the total says \(self.count)") }
    if cost != totalCost { problems.append("segments cost \(cost), the total says \(totalCost)") }
    if count > countLimit { problems.append("\(count) entries exceed the count limit \(countLimit)") }
    if cost > costLimit { problems.append("cost \(cost) exceeds the cost limit \(costLimit)") }
    return problems
  }

  struct Totals {
    var count = 0
    var cost: Int64 = 0
    var hits = 0
    var requestHits = 0
    var misses = 0
    var evictions = EvictionCounts()
  }

  /// Totals summed from the segments (each read under its lock).
  var totals: Totals {
    var totals = Totals()
    for index in 0..<segments.count {
      segments.withLock(index) { segment in
        totals.count += segment.count
        totals.cost += segment.totalCost
        totals.hits += segment.hits
        totals.requestHits += segment.requestHits
        totals.misses += segment.misses
        totals.evictions = totals.evictions + segment.evictions
      }
    }
    return totals
  }

  /// The hit-ratio curve from every segment's reuse sampler, for a layer of `capacity` entries;
  /// `nil` when the layer does not sample or has watched no lookup yet.
  func hitRatioCurve(capacity: Int) -> HitRatioCurve? {
    var parts: [(lookups: Double, reuseTimes: [Int], modelled: [Int])] = []
    var distances = [Int](repeating: 0, count: ReuseHistogram.bucketCount)
    var unresolved = 0
    var watched = 0
    for index in 0..<segments.count {
      segments.withLock(index) { segment in
        let sampler = segment.sampler
        guard sampler.isOn else { return }
        var reuseTimes = [Int](repeating: 0, count: ReuseHistogram.bucketCount)
        var modelled = reuseTimes
        for (bucket, count) in sampler.histogram.counts.enumerated() {
          reuseTimes[bucket] += Int(count)
          modelled[bucket] += Int(count)
        }
        for (bucket, count) in sampler.countedReuseTimes.counts.enumerated() { reuseTimes[bucket] += Int(count) }
        for (bucket, count) in sampler.distances.counts.enumerated() { distances[bucket] += Int(count) }
        unresolved += sampler.pendingWeight + sampler.dropped
        watched += sampler.watched
        // The lookups the segment has sampled from (at least one: a segment with reuse times
        // has a share).
        let lookups = Double(Swift.max(sampler.lookups(countdown: segment.sampleCountdown), 1))
        parts.append((lookups, reuseTimes, modelled))
      }
    }
    let lookups = parts.reduce(0) { $0 + $1.lookups }
    guard lookups > 0 else { return nil }
    return HitRatioCurve(
      capacity: capacity,
      segments: parts.map { .init(share: $0.lookups / lookups, reuseTimes: $0.reuseTimes, modelled: $0.modelled) },
      distances: distances, unresolved: unresolved, sampledLookups: watched)
  }
}
