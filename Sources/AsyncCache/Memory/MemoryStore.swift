public import Synchronization  // Atomic

/// The synchronous, thread-safe storage behind ``MemoryLayer``.
///
/// Keys are spread over lock-striped segments by hash so that concurrent callers rarely meet
/// on one lock. The count and cost limits are global: totals live in atomics, and an insert
/// that takes them over the limit lets its own segment's policy evict first, then the other
/// segments'. Each segment runs the policy (LRU or W-TinyLFU) over its share of the limits;
/// with one segment the order is exactly the policy's.
///
/// Values that leave the store (evicted, replaced, removed) are released after the segment's
/// lock is unlocked, so a value's `deinit` may safely use the cache.
@usableFromInline
final class MemoryStore<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  @usableFromInline typealias Node = MemoryNode<Key, Value>

  @usableFromInline let segments: MemorySegments<Key, Value>
  @usableFromInline let segmentMask: Int
  /// The layer's clock: given, followed from its cache or chain, or the ``WallClock``; with the
  /// wall clock, hits read ``publishedWallTime`` directly, without a call through the
  /// existential.
  @usableFromInline let clock: FollowedClock
  /// The layer's clock (``clock``) and logger: given, or followed from its cache or chain.
  let environment: LayerEnvironment
  /// ``PublishedWallTime/shared``, held so that a hit does not go through its lazy global.
  @usableFromInline let publishedWallTime = PublishedWallTime.shared
  @usableFromInline let countLimit: Int
  /// Whether a cost limit bounds the layer (it may then hold fewer entries than its count limit).
  @usableFromInline let isBoundedByCost: Bool
  /// The cost limit; `Int64.max` for none. Costs and their sums are `Int64` on every platform,
  /// so that a sum of costs never wraps where `Int` has 32 bits.
  @usableFromInline let costLimit: Int64
  @usableFromInline let cost: (@Sendable (Value) -> Int)?
  @usableFromInline let timeToLive: Duration?
  let trimFraction: Double
  @usableFromInline let entryCount = Atomic<Int>(0)
  @usableFromInline let entryCost = Atomic<Int64>(0)
  /// Where evictions are reported while someone observes them.
  @usableFromInline let eventHub = EventHub<CacheEvent<Key>>()
  /// Under ``EvictionPolicy/adaptive``, the window share that every segment's ghosts vote into
  /// (one for the layer; see ``WindowTarget``); `nil` otherwise. Locked only to count a vote
  /// and at the end of a span, after the segment's lock (never the other way round).
  @usableFromInline let windowTarget: Locked<WindowTarget>?
  /// ``WindowTarget/share``'s bits, published after every move so that a segment reads the
  /// share on an insert without taking ``windowTarget``'s lock.
  @usableFromInline let windowShareBits = Atomic<UInt64>(WindowTarget.minimumShare.bitPattern)
  /// Under ``EvictionPolicy/adaptive``, the new keys inserted since the current span began (see
  /// ``WindowTarget``).
  @usableFromInline let spanInserts = Atomic<Int>(0)
  /// Under ``EvictionPolicy/adaptive``, the votes for a larger window in the current span.
  @usableFromInline let spanVotesUp = Atomic<Int>(0)
  /// Under ``EvictionPolicy/adaptive``, the votes for a smaller window in the current span.
  @usableFromInline let spanVotesDown = Atomic<Int>(0)
  /// Under ``EvictionPolicy/adaptive``, the hits on window entries that the segments handed in
  /// during the current span (64 bits on every platform: a span of a million new keys in a
  /// layer that hits 99.9% of the time counts billions of hits).
  @usableFromInline let spanWindowHits = Atomic<Int64>(0)
  /// As ``spanWindowHits``, on main-region entries.
  @usableFromInline let spanMainHits = Atomic<Int64>(0)
  /// Whether the policy has an admission window (W-TinyLFU, fixed or adaptive).
  let hasAdmissionWindow: Bool
  /// The entries the admission window keeps room for, for the running prefetchers (see
  /// ``reserveWindow(entries:)``), by reservation, and their sum (``windowFloor``), which each
  /// segment takes its part of at its inserts, whatever the votes say.
  let windowReservations = Locked<(next: UInt64, entries: [UInt64: Int])>((0, [:]))
  @usableFromInline let windowFloor = Atomic<Int>(0)
  /// The tags invalidated in the layer (``MemoryLayer/invalidate(tag:at:)``): a lookup that
  /// finds an entry filed under one, produced at or before its invalidation, removes it and
  /// misses. Read only for the entries with metadata, and only once a tag was invalidated.
  @usableFromInline let tagInvalidations = TagInvalidations()
  /// Whether the reuse sampler samples only a loading cache's requests (``lookupSlot``'s
  /// `countingRequest`): set when the layer becomes a loading cache's top layer, whose loads look
  /// the key up again after the request missed it (a second lookup that is not a reuse).
  @usableFromInline let samplesRequestsOnly = Atomic<Bool>(false)
  /// The spatial sample of keys that counts long reuses' distinct keys for the hit-ratio curve:
  /// kept by a layer that samples, bounded by a count limit of at least
  /// ``KeySample/Parameters/minimumCapacity`` entries (and not by cost).
  @usableFromInline let keySample: KeySample?

  /// - Parameter costLimit: The cost limit; `Int.max` for none.
  init(
    countLimit: Int,
    costLimit: Int,
    cost: (@Sendable (Value) -> Int)?,
    timeToLive: Duration?,
    trimFraction: Double,
    segmentCount: Int,
    policy: EvictionPolicy,
    allowsReferee: Bool = true,
    seed: UInt64,
    samplesReuse: Bool = true,
    keySampling: KeySample.Parameters = .standard,
    environment: LayerEnvironment
  ) {
    self.countLimit = countLimit
    isBoundedByCost = cost != nil && costLimit != .max
    let costLimit = costLimit == .max ? Int64.max : Int64(costLimit)
    self.costLimit = costLimit
    self.cost = cost
    self.timeToLive = timeToLive
    self.trimFraction = trimFraction
    self.clock = environment.clock
    self.environment = environment
    // Rounded up without `countLimit + segmentCount - 1`, which overflows near `Int.max`.
    let countShare =
      countLimit == .max ? Int.max : countLimit / segmentCount + (countLimit % segmentCount == 0 ? 0 : 1)
    let segments = Int64(segmentCount)
    let costShare =
      cost == nil || costLimit == .max ? Int64.max : costLimit / segments + (costLimit % segments == 0 ? 0 : 1)
    let refereed =
      allowsReferee
      && Self.isRefereed(
        policy: policy, countLimit: countLimit, boundedByCost: cost != nil && costLimit != .max,
        segmentCount: segmentCount)
    self.segments = MemorySegments(count: segmentCount) { index in
      switch policy.kind {
      case .leastRecentlyUsed:
        SegmentAdmission(countShare: countShare)
      case .windowTinyLFU:
        SegmentAdmission(countShare: countShare, costShare: costShare, adaptation: .fixed, seed: seed &+ UInt64(index))
      case .adaptive:
        SegmentAdmission(
          countShare: countShare, costShare: costShare, adaptation: refereed ? .referee : .ghosts,
          seed: seed &+ UInt64(index))
      }
    }
    self.segmentMask = segmentCount - 1
    windowTarget = policy.kind == .adaptive && !refereed ? Locked(WindowTarget()) : nil
    hasAdmissionWindow = policy.kind != .leastRecentlyUsed
    keySample =
      samplesReuse && !isBoundedByCost && countLimit != .max && countLimit >= keySampling.minimumCapacity
      ? KeySample(capacity: countLimit, parameters: keySampling) : nil
    if samplesReuse {
      let keyThreshold = keySample?.threshold ?? 0
      for index in 0..<segmentCount {
        self.segments.withLock(index) { segment in
          segment.sampleCountdown = segment.sampler.start(
            seed: seed ^ (0x5EED_C0DE &* UInt64(index &+ 1)), segments: segmentCount)
          segment.keySampleThreshold = keyThreshold
        }
      }
    }
  }

  /// Whether a layer's adaptive policy is chosen by a ``PolicyReferee`` rather than sized by the
  /// ghosts' votes: one segment of 1 to ``PolicyReferee/maximumCapacity`` entries, bounded by its
  /// count alone (the shadows count entries: a cost limit would let the layer hold fewer than
  /// they simulate).
  static func isRefereed(policy: EvictionPolicy, countLimit: Int, boundedByCost: Bool, segmentCount: Int) -> Bool {
    policy.kind == .adaptive && !boundedByCost && segmentCount == 1
      && (1...PolicyReferee.maximumCapacity).contains(countLimit)
  }

  /// The segment of a hash: its top byte (at most 256 segments), independent of the low 32 bits
  /// the segment's index uses, on 64-bit and 32-bit platforms alike.
  @inlinable
  func segmentIndex(for hash: Int) -> Int {
    Int(truncatingIfNeeded: UInt(bitPattern: hash) >> UInt(Int.bitWidth - 8)) & segmentMask
  }

  // MARK: Reading

  /// A time to check `expiry` (nanoseconds since 1970) against, in nanoseconds since 1970: what
  /// hits read. With the ``WallClock``, the time a background thread publishes every few
  /// milliseconds when the expiry is further than a margin from it, else the exact time (see
  /// ``PublishedWallTime``): an entry is served until exactly its expiry (unless the publishing
  /// thread runs more than 46 ms late), and a hit far from the expiry reads one shared word,
  /// not the clock. A ``CacheClock`` of the user's, `ManualClock` included,
  /// answers with its ``CacheClock/coarseNow``, exactly unless it says otherwise.
  @inlinable
  @inline(__always)
  func now(checking expiry: Int64) -> Int64 {
    clock.isWallClock
      ? publishedWallTime.time(checking: expiry) : clock.clock.coarseNow.nanosecondsSince1970
  }

  /// Returns the unexpired entry for `key` and marks it most recently used.
  ///
  /// Never suspends; costs one hash, one uncontended lock and O(1) expected work.
  @inlinable
  func entry(for key: Key) -> CacheEntry<Value>? {
    lookupSlot(key) { segment, slot, _ in
      // Field by field: a copy of the whole node would retain its key too.
      let expiry = segment.nodes[slot].expiry
      let expiresAt = expiry == .max ? nil : CacheInstant(nanosecondsSince1970: expiry)
      return CacheEntry(
        segment.nodes[slot].value, expiresAt: expiresAt, metadata: segment.metadata(at: slot, key: key))
    }
  }

  /// Returns the unexpired value for `key` and marks it most recently used.
  @inlinable
  func value(for key: Key) -> Value? {
    lookup(key) { $0.value }
  }

  /// Returns the unexpired value for `key`, its expiry and the time it was checked against (both
  /// `Int64.max` when it never expires), and marks it most recently used.
  ///
  /// - Parameter countingRequest: Count a hit as a loading cache's request too.
  @inlinable
  @inline(__always)
  func timedValue(for key: Key, countingRequest: Bool = false) -> (value: Value, expiry: Int64, now: Int64)? {
    lookup(key, countingRequest: countingRequest) { node, now in (node.value, node.expiry, now) }
  }

  /// What a lookup found.
  @usableFromInline
  enum Lookup<Found: Sendable>: Sendable {
    case hit(Found)
    case miss
    /// The entry was there but expired, or dead by tag: removed.
    case dropped(Node, EvictionReason)
  }

  /// Finds `key`; on a hit marks it most recently used and returns `extract` of its node.
  @inlinable
  @inline(__always)
  func lookup<Found: Sendable>(
    _ key: Key, countingRequest: Bool = false, _ extract: (borrowing Node) -> Found
  ) -> Found? {
    lookup(key, countingRequest: countingRequest) { node, _ in extract(node) }
  }

  /// Finds `key`; on a hit marks it most recently used and returns `extract` of its node and of
  /// the time the expiry was checked against (``now(checking:)``, nanoseconds since 1970; `Int64.max`
  /// when the entry never expires, for which the clock is not read). With `countingRequest`, a
  /// hit is also counted as a loading cache's request hit.
  ///
  /// An entry is a hit while ``now(checking:)`` is before its expiry: with the ``WallClock``
  /// until exactly its expiry unless the publishing thread runs more than 46 ms late (see
  /// ``PublishedWallTime``), with a `ManualClock` never past it.
  @inlinable
  @inline(__always)
  func lookup<Found: Sendable>(
    _ key: Key, countingRequest: Bool = false, _ extract: (borrowing Node, Int64) -> Found
  ) -> Found? {
    lookupSlot(key, countingRequest: countingRequest) { segment, slot, now in extract(segment.nodes[slot], now) }
  }

  /// Finds `key`; on a hit marks it most recently used and returns `extract` of its segment
  /// (locked), its slot and the time its expiry was checked against, as the lookup above does.
  @inlinable
  @inline(__always)
  func lookupSlot<Found: Sendable>(
    _ key: Key, countingRequest: Bool = false, _ extract: (borrowing MemorySegment<Key, Value>, Int, Int64) -> Found
  ) -> Found? {
    let hash = key.hashValue
    let index = segmentIndex(for: hash)
    segments.prefetchBucket(of: hash, in: index)
    let result = segments.withLookupLock(index) { segment -> Lookup<Found> in
      guard let slot = segment.find(key, hash: hash) else {
        segment.misses &+= 1
        if countingRequest || !samplesRequestsOnly.load(ordering: .relaxed) {
          segment.sampleMiss(key, hash: hash, keys: keySample)
        }
        return .miss
      }
      let expiry = segment.nodes[slot].expiry
      var now = Int64.max
      if expiry != .max {
        now = self.now(checking: expiry)
        if expiry <= now {
          segment.abandonWatch(at: slot, hash: hash)
          let node = segment.drop(slot, because: .expired)
          if countingRequest || !samplesRequestsOnly.load(ordering: .relaxed) {
            segment.sampleMiss(key, hash: hash, keys: keySample)
          }
          return .dropped(node, .expired)
        }
      }
      // One bit of the node, read with its expiry, for an entry without metadata; for one with
      // tags whose check is still good, an atomic load, its stamp and two words of the segment.
      if segment.nodes[slot].hasMetadata {
        let recorded = tagInvalidations.recordedCount
        if recorded != 0, !segment.tagsAreKnownAlive(at: slot, recorded: recorded),
          Self.isDeadByTag(key, at: slot, in: &segment, recorded: recorded, checkingAgainst: tagInvalidations)
        {
          segment.abandonWatch(at: slot, hash: hash)
          let node = segment.drop(slot, because: .invalidated)
          if countingRequest || !samplesRequestsOnly.load(ordering: .relaxed) {
            segment.sampleMiss(key, hash: hash, keys: keySample)
          }
          return .dropped(node, .invalidated)
        }
      }
      segment.recordHit(slot, hash: hash)
      if countingRequest || !samplesRequestsOnly.load(ordering: .relaxed) {
        segment.sampleHit(key, hash: hash, at: slot, keys: keySample)
      }
      if countingRequest { segment.requestHits &+= 1 }
      return .hit(extract(segment, slot, now))
    }
    switch result {
    case .hit(let found):
      return found
    case .miss:
      return nil
    case .dropped(let node, let reason):
      account(removed: node)
      if eventHub.isObserved { reportDrop(of: node.key, because: reason) }
      return nil
    }
  }

  /// Whether the entry for `key` at `slot` of `segment`, which has metadata, is dead by tag,
  /// `recorded` invalidations being on record (read before the check: one recorded during it
  /// makes the next hit check again). An entry found alive is stamped so (see
  /// `MemorySegment+Tags.swift`): until the next invalidation (or until a resize of the table or
  /// the sweep clears the stamp), its hits check nothing more.
  ///
  /// Never inlined: hits come here only for an entry with metadata whose stamp is not current
  /// (the first after an invalidation, mostly), and inlined it would make the hit path too
  /// large to be inlined into the cache's.
  @inlinable
  @inline(never)
  static func isDeadByTag(
    _ key: Key, at slot: Int, in segment: inout MemorySegment<Key, Value>, recorded: UInt64,
    checkingAgainst invalidations: TagInvalidations
  ) -> Bool {
    segment.advanceTagGeneration(to: recorded)
    if segment.tagsAreKnownAlive(at: slot, recorded: recorded) { return false }
    if let metadata = segment.metadata[key], invalidations.kills(metadata) { return true }
    segment.markTagsAlive(at: slot)
    return false
  }

  /// Reports that a lookup found the entry for `key` expired or dead by tag, and removed it.
  @usableFromInline
  func reportDrop(of key: Key, because reason: EvictionReason) {
    eventHub.emitEviction(of: key, reason: reason)
  }

  /// `expiry` (nanoseconds since 1970), no later than the store's time-to-live from `now`.
  func cappedExpiry(_ expiry: Int64, now: Int64) -> Int64 {
    guard let timeToLive else { return expiry }
    return Swift.min(expiry, CacheInstant(nanosecondsSince1970: now).advanced(by: timeToLive).nanosecondsSince1970)
  }

  /// Moves the expiry of the entry for `key` from `oldExpiry` to `newExpiry` (nanoseconds since
  /// 1970; see ``cappedExpiry(_:now:)``), if the entry is still there and still expires at
  /// `oldExpiry` (no write replaced it). Returns the entry it extended, read under the same
  /// lock (its value and metadata belong together), with its new expiry; `nil` when it did not.
  /// Does not change recency or statistics.
  func extendExpiry(of key: Key, from oldExpiry: Int64, to expiry: Int64) -> CacheEntry<Value>? {
    let hash = key.hashValue
    return segments.withLock(segmentIndex(for: hash)) { segment in
      guard let slot = segment.find(key, hash: hash), segment.nodes[slot].expiry == oldExpiry else {
        return nil
      }
      segment.nodes[slot].expiry = expiry
      let metadata = segment.metadata(at: slot, key: key)
      return CacheEntry(
        segment.nodes[slot].value, expiresAt: expiry == .max ? nil : CacheInstant(nanosecondsSince1970: expiry),
        metadata: metadata)
    }
  }

  /// Gives the entry for `key`, if it still expires at `oldExpiry` (nanoseconds since 1970,
  /// `Int64.max` for never) with the metadata `heldMetadata`, the expiry `expiry` (capped by the
  /// store's time-to-live from now) and `metadata`, keeping its value. Returns whether it did: not when the entry is gone or
  /// was replaced, nor when the new expiry has passed already. Does not change recency or
  /// statistics.
  func revalidate(
    _ key: Key, from oldExpiry: Int64, heldMetadata: EntryMetadata, to expiry: Int64, metadata: EntryMetadata
  ) -> Bool {
    let now = clock.now.nanosecondsSince1970
    let target = cappedExpiry(expiry, now: now)
    guard target > now else { return false }
    let hash = key.hashValue
    return segments.withLock(segmentIndex(for: hash)) { segment in
      guard let slot = segment.find(key, hash: hash), segment.nodes[slot].expiry == oldExpiry else {
        return false
      }
      guard segment.metadata(at: slot, key: key) == heldMetadata else { return false }
      segment.nodes[slot].expiry = target
      segment.setMetadata(metadata, at: slot, key: key)
      return true
    }
  }

  /// The metadata of the entry for `key`, if the store holds one (expired or not); does not
  /// change recency or statistics.
  func metadataWithoutRecency(of key: Key) -> EntryMetadata? {
    let hash = key.hashValue
    return segments.withLock(segmentIndex(for: hash)) { segment in
      guard let slot = segment.find(key, hash: hash) else { return nil }
      return segment.metadata(at: slot, key: key)
    }
  }

  /// Whether an unexpired entry for `key`, not dead by tag, exists (by ``now(checking:)``, as a
  /// lookup would tell);
  /// does not change recency or statistics.
  func contains(_ key: Key) -> Bool {
    let hash = key.hashValue
    return segments.withLock(segmentIndex(for: hash)) { segment in
      guard let slot = segment.find(key, hash: hash) else { return false }
      let expiry = segment.nodes[slot].expiry
      guard expiry == .max || expiry > now(checking: expiry) else { return false }
      guard segment.nodes[slot].hasMetadata else { return true }
      let recorded = tagInvalidations.recordedCount
      return recorded == 0
        || !Self.isDeadByTag(key, at: slot, in: &segment, recorded: recorded, checkingAgainst: tagInvalidations)
    }
  }
}
