/// What a segment's W-TinyLFU policy needs besides its lists: the sketch, the ghosts, the
/// sizes of the regions and their limits, in entries and in cost.
///
/// Each segment runs its own policy over its share of the limits (keys spread evenly over the
/// segments, so each sees a sample of the workload); with one segment it is exactly the
/// policy of Caffeine's design.
@usableFromInline
struct SegmentAdmission {
  // Field order is layout order: a hit reads `isEnabled` and the sketch's table and mask,
  // writes `pendingCount` and one word of `pending`, so these come first.
  /// Whether the policy is W-TinyLFU; `false` for LRU, which uses nothing else here.
  @usableFromInline let isEnabled: Bool
  @usableFromInline var sketch: FrequencySketch
  @usableFromInline var pendingCount = 0
  /// Uses not yet counted in the sketch: ``pendingCapacity`` keys' counter positions, each
  /// packed as the first word of the key's block (high 32 bits; tables have at most 2^25
  /// words) and its counter picks (low 32 bits), as ``FrequencySketch/slots(_:)`` gives them.
  ///
  /// A hit finds its key's counters, prefetches their cache line and appends them here; a full
  /// queue, or any read of the sketch, counts them all at once. The prefetch retires at once, so
  /// the hit does not wait for the line, and neither does the lock released next; by the time
  /// the queue is counted the lines are in cache. Every read sees every increment, so the
  /// decisions are exactly those of counting at once.
  @usableFromInline var pending:
    (
      UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
      UInt64, UInt64
    ) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
  /// The ghosts whose votes move the window under ``EvictionPolicy/adaptive``; `nil` for a
  /// fixed window.
  @usableFromInline var ghosts: WindowGhosts?
  /// The layer's window share (``WindowTarget/share``) that the maximums below follow; the
  /// segment takes a new one when it inserts a key.
  @usableFromInline var appliedShare = WindowTarget.minimumShare
  /// The entries the window keeps room for at least, the segment's part of the prefetchers'
  /// reservations (``MemoryStore/reserveWindow(entries:)``); 0 for none.
  @usableFromInline var appliedFloor = 0
  @usableFromInline var random: SplitMix64
  /// The segment's share of the count limit, for the window's sizes and the storage's growth.
  @usableFromInline let countShare: Int
  /// The segment's share of the cost limit, or `Int64.max` when cost does not bound the layer.
  @usableFromInline let costShare: Int64
  @usableFromInline var windowCountMaximum: Int
  @usableFromInline var windowCostMaximum: Int64
  @usableFromInline var protectedCountMaximum: Int
  @usableFromInline var protectedCostMaximum: Int64
  @usableFromInline var windowCount = 0
  @usableFromInline var windowCost: Int64 = 0
  @usableFromInline var protectedCount = 0
  @usableFromInline var protectedCost: Int64 = 0
  /// How many uses ``pending`` holds.
  @usableFromInline static var pendingCapacity: Int { 16 }

  /// Queues a use of the key with sketch key `tag` (see ``pending``), counting the queue when
  /// it is full.
  @inlinable
  @inline(__always)
  mutating func recordUse(_ tag: UInt32) {
    let slots = sketch.slots(Self.sketchKey(tag))
    sketch.prefetch(block: slots.block)
    let index = pendingCount
    let packed = UInt64(UInt32(truncatingIfNeeded: slots.block)) << 32 | (slots.picks & 0xFFFF_FFFF)
    withUnsafeMutableBytes(of: &pending) { $0.storeBytes(of: packed, toByteOffset: index &* 8, as: UInt64.self) }
    pendingCount = index &+ 1
    if pendingCount == Self.pendingCapacity { countPendingUses() }
  }

  /// Counts every queued use in the sketch. Call before reading the sketch.
  @inlinable
  mutating func countPendingUses() {
    let count = pendingCount
    guard count > 0 else { return }
    pendingCount = 0
    let queued = pending
    withUnsafeBytes(of: queued) { bytes in
      for index in 0..<count {
        let packed = bytes.load(fromByteOffset: index &* 8, as: UInt64.self)
        sketch.increment(slots: (block: Int(packed >> 32), picks: packed & 0xFFFF_FFFF))
      }
    }
  }

  /// The share of a limit that goes to the main region (Caffeine's `PERCENT_MAIN`).
  @usableFromInline static var mainShare: Double { 0.99 }
  /// The share of the main region that goes to protected (Caffeine's `PERCENT_MAIN_PROTECTED`).
  @usableFromInline static var protectedShare: Double { 0.8 }
  /// A candidate at least this popular may win a lost duel by chance (Caffeine's
  /// `ADMIT_HASHDOS_THRESHOLD`).
  @usableFromInline static var warmFrequency: Int { 6 }

  /// The entries the sketch of a segment without a count limit is first sized for.
  @usableFromInline static var initialUnboundedSketchSize: Int { 256 }
  /// The most entries the sketch of a bounded segment is first sized for (a compact sketch of
  /// 1 MiB); it grows as the segment fills, up to the segment's share. A sketch that grows
  /// starts its counts over, and each reset during the fill costs hit ratio (a one-segment
  /// W-TinyLFU of 50k entries growing from 4,096 lost 4.8 points on `cache.hitRatio`'s loop),
  /// so only very large limits (safety caps) are sized lazily.
  @usableFromInline static var initialBoundedSketchSize: Int { 1 << 17 }

  /// Gives a segment without a count limit a sketch sized for twice its `count` entries once it
  /// holds more than the sketch is sized for. The counts start over, as in Caffeine; doubling
  /// makes that rare. The queued uses are dropped with the old counts: they are positions in
  /// the old table, which the new one must never count.
  @inlinable
  mutating func growSketchIfNeeded(count: Int) {
    guard count > sketch.size, sketch.size < Swift.min(countShare, FrequencySketch.maximumCapacity) else { return }
    pendingCount = 0
    let size = Swift.min(count &* 2, countShare)
    sketch = FrequencySketch(maximumSize: size, compact: ghosts != nil)
    ghosts?.resize(entries: size)
  }

  /// LRU: no admission.
  ///
  /// - Parameter countShare: The segment's share of the count limit (`Int.max` for none), which
  ///   only sizes the segment's storage.
  init(countShare: Int = .max) {
    isEnabled = false
    sketch = FrequencySketch(maximumSize: 0)
    random = SplitMix64(seed: 0)
    self.countShare = countShare
    costShare = .max
    windowCountMaximum = .max
    windowCostMaximum = .max
    protectedCountMaximum = .max
    protectedCostMaximum = .max
  }

  /// W-TinyLFU over a segment's share of the limits.
  ///
  /// - Parameters:
  ///   - countShare: The segment's share of the count limit (0 or more).
  ///   - costShare: Its share of the cost limit, or `Int64.max` when cost does not bound.
  ///   - adaptive: Whether the window follows the layer's ``WindowTarget``, which this
  ///     segment's ``WindowGhosts`` vote into.
  ///   - seed: The seed of the rare random admissions.
  init(countShare: Int, costShare: Int64, adaptive: Bool, seed: UInt64) {
    isEnabled = true
    self.countShare = countShare
    self.costShare = costShare
    // Without a count limit the number of entries is unknown: the sketch starts small and
    // grows with the segment (as Caffeine's does with a weighted cache).
    // The sketch starts sized for the share, or for at most ``initialBoundedSketchSize``
    // entries, and grows with the segment: a count limit set high as a safety cap costs
    // little until entries arrive (as in Caffeine). Without a count limit the number of
    // entries is unknown, and the sketch starts smaller.
    let entries =
      countShare == .max ? Self.initialUnboundedSketchSize : Swift.min(countShare, Self.initialBoundedSketchSize)
    sketch = FrequencySketch(maximumSize: entries, compact: adaptive)
    ghosts = adaptive ? WindowGhosts(entries: entries) : nil
    random = SplitMix64(seed: seed)
    (windowCountMaximum, protectedCountMaximum) = Self.maximums(share: countShare)
    (windowCostMaximum, protectedCostMaximum) = Self.maximums(share: costShare)
  }

  /// The window's and protected's sizes for a share of a limit: 1% and 80% of the other 99%,
  /// rounded as Caffeine does; unbounded for an unbounded share.
  @usableFromInline
  static func maximums<Size: FixedWidthInteger & SignedInteger>(share: Size) -> (window: Size, protected: Size) {
    guard share != .max else { return (.max, .max) }
    let main = Size(Double(share) * mainShare)
    return (share - main, Size(Double(main) * protectedShare))
  }

  /// The sketch's key for a key's tag (the low 32 bits of its hash).
  @inlinable
  @inline(__always)
  static func sketchKey(_ tag: UInt32) -> Int { Int(truncatingIfNeeded: tag) }

  /// The sketch's key of `key`.
  @inlinable
  @inline(__always)
  static func sketchKey<Key: Hashable>(of key: Key) -> Int {
    Int(truncatingIfNeeded: UInt32(truncatingIfNeeded: key.hashValue))
  }
}
