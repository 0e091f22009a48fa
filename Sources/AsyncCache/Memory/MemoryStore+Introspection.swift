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
  /// `nil` when the layer does not sample or has watched no lookup yet. Without `weighingStrata`
  /// (tests), every watch weighs what it stands for, whatever its next lookup was.
  func hitRatioCurve(capacity: Int, weighingStrata: Bool = true) -> HitRatioCurve? {
    typealias Counts = (all: [Double], repeated: [Double])
    let empty = [Double](repeating: 0, count: ReuseHistogram.bucketCount)
    func add(_ histogram: ReuseHistogram, to counts: inout [Double]) {
      for (bucket, count) in histogram.counts.enumerated() { counts[bucket] += Double(count) }
    }
    // Each segment's reuse times (all, and those the model judges), and the layer's distances,
    // each with the part of them whose watch a repeated hit ended.
    var parts: [(lookups: Double, reuseTimes: Counts, modelled: Counts)] = []
    var distances: Counts = (empty, empty)
    var unresolved = 0.0
    var (watched, repeatedWatches) = (0, 0)
    var (lookups, repeatedHits) = (0.0, 0.0)
    for index in 0..<segments.count {
      segments.withLock(index) { segment in
        let sampler = segment.sampler
        guard sampler.isOn else { return }
        var modelled: Counts = (empty, empty)
        add(sampler.histogram, to: &modelled.all)
        add(sampler.repeated.modelled, to: &modelled.repeated)
        var reuseTimes = modelled
        add(sampler.countedReuseTimes, to: &reuseTimes.all)
        add(sampler.repeated.counted, to: &reuseTimes.repeated)
        add(sampler.distances, to: &distances.all)
        add(sampler.repeated.distances, to: &distances.repeated)
        unresolved += Double(sampler.pendingWeight) + Double(sampler.dropped)
        watched += sampler.watched
        repeatedWatches += sampler.repeatedWatches
        // The lookups the segment has sampled from (at least one: a segment with reuse times
        // has a share).
        let segmentLookups = sampler.lookups(countdown: segment.sampleCountdown)
        lookups += Double(segmentLookups)
        repeatedHits += Double(sampler.repeatedHits(countdown: segment.sampleCountdown))
        parts.append((Double(Swift.max(segmentLookups, 1)), reuseTimes, modelled))
      }
    }
    let total = parts.reduce(0) { $0 + $1.lookups }
    guard total > 0 else { return nil }
    // A watch dropped before its key's next lookup came (the oldest of too many) counts as not
    // ended by a repeated hit: its key stayed away longer than most. Left out of the shares
    // instead, such watches read OLTP at 1,000 entries 10 points high.
    let samples = parts.reduce(unresolved) { $0 + $1.reuseTimes.all.reduce(0, +) }
    let repeatedSamples = parts.reduce(0) { $0 + $1.reuseTimes.repeated.reduce(0, +) }
    var weights = HitRatioCurve.StratumWeights.unweighed
    if weighingStrata {
      weights = HitRatioCurve.StratumWeights(
        lookups: lookups, repeatedHits: repeatedHits, samples: samples, repeatedSamples: repeatedSamples,
        watches: watched, repeatedWatches: repeatedWatches)
    }
    return HitRatioCurve(
      capacity: capacity,
      segments: parts.map {
        .init(
          share: $0.lookups / total, reuseTimes: weights.weigh($0.reuseTimes.all, repeated: $0.reuseTimes.repeated),
          modelled: weights.weigh($0.modelled.all, repeated: $0.modelled.repeated))
      },
      distances: weights.weigh(distances.all, repeated: distances.repeated),
      unresolved: weights.other * unresolved,
      sampledLookups: watched)
  }
}
