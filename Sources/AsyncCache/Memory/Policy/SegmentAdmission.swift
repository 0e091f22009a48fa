/// What a segment's W-TinyLFU policy needs besides its lists: the sketch, the adaptation of
/// its window (ghosts or a referee), the sizes of the regions and their limits, in entries and
/// in cost.
///
/// Each segment runs its own policy over its share of the limits (keys spread evenly over the
/// segments, so each sees a sample of the workload); with one segment it is exactly the
/// policy of Caffeine's design, or (a small adaptive layer) the expert its ``PolicyReferee``
/// chose.
@usableFromInline
struct SegmentAdmission {
  /// How the window of a W-TinyLFU segment is sized.
  @usableFromInline
  enum Adaptation: Sendable {
    /// At 1% of the segment, as Caffeine rounds it (``EvictionPolicy/windowTinyLFU``).
    case fixed
    /// From the layer's ``WindowTarget``, which the segments' ``WindowGhosts`` vote into
    /// (``EvictionPolicy/adaptive`` over several segments, or a large one).
    case ghosts
    /// By the expert a ``PolicyReferee`` chooses (``EvictionPolicy/adaptive`` in a layer of one
    /// segment of at most ``PolicyReferee/maximumCapacity`` entries).
    case referee
  }

  // Field order is layout order: a hit reads `isEnabled` and the sketch's table and mask,
  // writes `pendingCount` and one word of `pending`, so these come first.
  /// Whether the policy is W-TinyLFU; `false` for LRU, which uses nothing else here.
  @usableFromInline let isEnabled: Bool
  @usableFromInline var sketch: FrequencySketch
  @usableFromInline var pendingCount = 0
  /// Uses not yet counted in the sketch: ``pendingCapacity`` keys, each packed as the first word
  /// of the key's block in the sketch (high 32 bits; tables have at most 2^25 words) and the
  /// key's tag (low 32 bits), from which the counter picks follow (``FrequencySketch/picks(_:)``).
  ///
  /// A hit finds its key's block, prefetches its cache line and appends it here; a full queue,
  /// or any read of the sketch, counts them all at once. The prefetch retires at once, so the hit
  /// does not wait for the line, and neither does the lock released next; by the time the queue
  /// is counted the lines are in cache. Every read sees every increment, so the decisions are
  /// exactly those of counting at once.
  @usableFromInline var pending:
    (
      UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
      UInt64, UInt64
    ) = (0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
  /// Whether ``referee`` is set: the counted uses are also its accesses.
  @usableFromInline let isRefereed: Bool
  /// Whether the referee chose another expert that the lists do not follow yet; the next
  /// eviction applies it (``MemorySegment/applyRefereeChoice()``).
  @usableFromInline var refereeSwitched = false
  /// The ghosts whose votes move the window under ``Adaptation/ghosts``; `nil` otherwise.
  @usableFromInline var ghosts: WindowGhosts?
  /// The referee under ``Adaptation/referee`` once the segment was written to; `nil` otherwise
  /// (and after a critical memory pressure emptied the segment, until its next insert).
  var referee: PolicyReferee?
  /// Under ``Adaptation/referee``, the index in ``PolicyExpert/all`` of the expert the segment
  /// runs (kept when the referee is released, so that a new one starts from it).
  @usableFromInline var refereeExpert = PolicyExpert.initialIndex
  /// Whether ``referee`` is set.
  @usableFromInline var hasReferee = false
  /// Whether the window keeps Caffeine's fixed 1% (``Adaptation/fixed``).
  @usableFromInline let hasFixedWindow: Bool
  /// The window's share of the limits that the maximums below follow: the layer's
  /// ``WindowTarget/share`` (taken when the segment inserts a key), or the referee's expert's.
  @usableFromInline var appliedShare = WindowTarget.minimumShare
  /// Protected's share of what the window leaves.
  @usableFromInline var appliedProtectedShare = SegmentAdmission.protectedShare
  /// The rule a candidate must pass to enter the main region.
  @usableFromInline var admissionRule = PolicyExpert.Admission.moreFrequent
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
    let block = sketch.block(Self.sketchKey(tag))
    sketch.prefetch(block: block)
    let index = pendingCount
    let packed = UInt64(UInt32(truncatingIfNeeded: block)) << 32 | UInt64(tag)
    withUnsafeMutableBytes(of: &pending) { $0.storeBytes(of: packed, toByteOffset: index &* 8, as: UInt64.self) }
    pendingCount = index &+ 1
    if pendingCount == Self.pendingCapacity { countPendingUses() }
  }

  /// Counts every queued use in the sketch, and under a referee records them as its accesses.
  /// Call before reading the sketch.
  @inlinable
  mutating func countPendingUses() {
    let count = pendingCount
    guard count > 0 else { return }
    pendingCount = 0
    let queued = pending
    if isRefereed {
      countRefereedUses(queued, count: count)
      return
    }
    withUnsafeBytes(of: queued) { bytes in
      for index in 0..<count {
        let packed = bytes.load(fromByteOffset: index &* 8, as: UInt64.self)
        let picks = FrequencySketch.picks(Int(truncatingIfNeeded: UInt32(truncatingIfNeeded: packed)))
        sketch.increment(slots: (block: Int(packed >> 32), picks: picks))
      }
    }
  }

  /// Counts the first `count` uses of `queued` (see ``pending``) one at a time, each followed by
  /// its access to the referee's shadows, so that a shadow's duel reads the counts up to its own
  /// access, as the layer's duel does (counting the whole queue first let the shadows see up to 15
  /// accesses ahead: on a loop, a shadow then kept the keys about to be read, and scored tens of
  /// points more than a layer running its configuration). Out of line: only a small refereed
  /// layer pays for it.
  @usableFromInline
  mutating func countRefereedUses(
    _ queued: (
      UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64, UInt64,
      UInt64, UInt64
    ),
    count: Int
  ) {
    withUnsafeBytes(of: queued) { bytes in
      for index in 0..<count {
        let packed = bytes.load(fromByteOffset: index &* 8, as: UInt64.self)
        let tag = UInt32(truncatingIfNeeded: packed)
        sketch.increment(slots: (block: Int(packed >> 32), picks: FrequencySketch.picks(Int(truncatingIfNeeded: tag))))
        if referee?.record(tag, sketch: sketch) == true {
          refereeSwitched = true
          refereeExpert = referee?.current ?? refereeExpert
        }
      }
    }
  }

  /// Creates the referee of a refereed segment at its first insert (and after a critical memory
  /// pressure emptied it): the shadows must see the layer's whole history, or they hold other
  /// keys than the layer and mislead the referee (created when the layer was half full, they took
  /// LIRS2's `backf` at 200 entries from 24.3% to 17.8%). A layer never written to never pays.
  @inlinable
  mutating func startRefereeIfDue() {
    guard isRefereed, !hasReferee else { return }
    startReferee()
  }

  @usableFromInline
  mutating func startReferee() {
    referee = PolicyReferee(capacity: countShare, seed: random.next(), initial: refereeExpert)
    hasReferee = true
  }

  /// Releases the referee's shadows (memory pressure, which empties the segment); a new one starts
  /// from the same expert at the segment's next insert.
  @usableFromInline
  mutating func releaseReferee() {
    referee = nil
    hasReferee = false
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
    sketch = FrequencySketch(maximumSize: size, compact: !hasFixedWindow, dense: isRefereed)
    ghosts?.resize(entries: size)
  }

  /// LRU: no admission.
  ///
  /// - Parameter countShare: The segment's share of the count limit (`Int.max` for none), which
  ///   only sizes the segment's storage.
  init(countShare: Int = .max) {
    isEnabled = false
    isRefereed = false
    hasFixedWindow = true
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
  ///   - countShare: The segment's share of the count limit (0 or more; at most
  ///     ``PolicyReferee/maximumCapacity`` under ``Adaptation/referee``).
  ///   - costShare: Its share of the cost limit, or `Int64.max` when cost does not bound.
  ///   - adaptation: How the window is sized.
  ///   - seed: The seed of the rare random admissions (and of the referee's shadows').
  init(countShare: Int, costShare: Int64, adaptation: Adaptation, seed: UInt64) {
    isEnabled = true
    self.countShare = countShare
    self.costShare = costShare
    // The sketch starts sized for the share, or for at most ``initialBoundedSketchSize``
    // entries, and grows with the segment: a count limit set high as a safety cap costs
    // little until entries arrive (as in Caffeine). Without a count limit the number of
    // entries is unknown, and the sketch starts smaller.
    let entries =
      countShare == .max ? Self.initialUnboundedSketchSize : Swift.min(countShare, Self.initialBoundedSketchSize)
    hasFixedWindow = adaptation == .fixed
    // A refereed segment is small: its sketch is dense (see FrequencySketch.denseWordsPerEntry).
    sketch = FrequencySketch(maximumSize: entries, compact: !hasFixedWindow, dense: adaptation == .referee)
    ghosts = adaptation == .ghosts ? WindowGhosts(entries: entries) : nil
    random = SplitMix64(seed: seed)
    if adaptation == .referee {
      precondition(
        (1...PolicyReferee.maximumCapacity).contains(countShare), "a refereed segment holds 1 to 4,096 entries")
      isRefereed = true
      let expert = PolicyExpert.all[refereeExpert]
      appliedShare = expert.windowShare
      appliedProtectedShare = expert.protectedShare
      admissionRule = expert.admission
    } else {
      isRefereed = false
    }
    if !isRefereed {
      // The window starts at 1% as Caffeine rounds it; the ghosts' target moves it from there.
      (windowCountMaximum, protectedCountMaximum) = Self.maximums(share: countShare)
      (windowCostMaximum, protectedCostMaximum) = Self.maximums(share: costShare)
    } else {
      (windowCountMaximum, protectedCountMaximum) = Self.maximums(
        windowShare: appliedShare, protectedShare: appliedProtectedShare, of: countShare)
      (windowCostMaximum, protectedCostMaximum) = Self.maximums(
        windowShare: appliedShare, protectedShare: appliedProtectedShare, of: costShare)
    }
  }

  /// The window's and protected's sizes when the window takes `windowShare` of a segment's
  /// `limit` and protected `protectedShare` of the rest (see ``PolicyExpert/maximums(of:)``);
  /// unbounded for an unbounded limit.
  @inlinable
  static func maximums<Size: FixedWidthInteger & SignedInteger>(
    windowShare: Double, protectedShare: Double, of limit: Size
  ) -> (window: Size, protected: Size) {
    guard limit != .max else { return (.max, .max) }
    let window = Swift.min(Swift.max(1, Size(windowShare * Double(limit))), limit)
    return (window, Size(Double(limit &- window) * protectedShare))
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
