// What more memory would buy: each segment samples about one lookup in a hundred and times how
// long its key takes to be looked up again. `HitRatioCurve` turns those reuse times into the hit
// ratios an LRU cache of other sizes would have.
//
// Why lookups, and not keys as SHARDS samples: the hit ratio is a mean over lookups, and a few
// keys carry many of them (in the ARC paper's OLTP trace, 100 of 186,880 blocks carry 14% of the
// requests). One key in a hundred holds one of those 100 or none, so SHARDS' estimate at 1% moved
// by up to 14 points from one hash seed to the next on that trace; a lookup in a hundred, drawn
// at random, samples a hot key as often as it is asked for (within 2.3 points on the same runs).
// The reuse times go through the average eviction time model (AET: Hu et al., "Kinetic Modeling
// of Data Eviction in Cache", USENIX ATC 2016), which needs no stack of keys. Where a window is
// long enough to hold 2,048 keys of the layer's spatial sample (`KeySample`: one key in a
// hundred as SHARDS, or fewer in a layer of more than 131,072 entries), its count of distinct
// keys replaces the model's guess. Each watch is filed by whether the lookup that ended it was a
// repeated hit, and the curve weighs the two kinds to the share of repeated hits the segment
// counted (`HitRatioCurve.StratumWeights`).

/// The reuse-time sampling of one memory segment: which of its lookups are watched, when each
/// began, and the histogram of the reuse times measured. Not thread-safe: under the segment's
/// lock.
///
/// Time is the segment's own count of the lookups it samples from (a loading cache's requests,
/// when the layer is one's top layer; every lookup otherwise). Keys are spread over the segments
/// by hash, so a segment's lookups are a spatial sample of the layer's: a reuse time in the
/// segment's lookups, over the segment's share of the layer's lookups, estimates it in the
/// layer's (``HitRatioCurve/SegmentReuse``). Shares are unequal where a segment holds a popular
/// key: times the segment count, as the curve first converted them, a loop with a hot key read
/// 87% at half the capacity where LRU hits 50%.
///
/// The countdown to the next watched lookup is the segment's own ``MemorySegment/sampleCountdown``
/// (beside the fields every hit writes): the time is ``gapEnd`` minus it.
@usableFromInline
struct ReuseSampler {
  /// The time at which the countdown reaches 0.
  @usableFromInline var gapEnd = 0
  /// The lookups of every gap drawn so far: minus the countdown, the lookups the segment has
  /// sampled from, for its share of the layer's (which `gapEnd`, an `Int` that wraps after
  /// 2^31 lookups where `Int` has 32 bits, cannot give).
  @usableFromInline var drawn: UInt64 = 0
  /// When a watch began: the segment's time, and the layer's ``KeySample`` position (0 without
  /// one); and the lookups it stands for, `2^level` at the ``level`` its gap was drawn at.
  @usableFromInline
  struct Watch: HashedTableValue {
    @usableFromInline var time: Int
    @usableFromInline var keys: Int
    @usableFromInline var weight: Int

    /// A watch begun at `time`; at `Int.min`, which marks an empty slot of the ``WatchTable``
    /// (time wraps where `Int` has 32 bits), a lookup later.
    @inlinable
    init(time: Int, keys: Int, weight: Int = 1) {
      self.time = time == .min ? .min + 1 : time
      self.keys = keys
      self.weight = weight
    }

    @inlinable static var vacant: Watch {
      var watch = Watch(time: 0, keys: 0, weight: 0)
      watch.time = .min
      return watch
    }

    @inlinable var isVacant: Bool { time == .min }
  }

  /// The watched keys, by hash, and when each was watched.
  @usableFromInline var watches = WatchTable()
  /// The reuse times of the watches the model judges: those whose window held fewer than
  /// ``KeySample/countedFrom`` of the layer's sampled keys (every one, without a sample).
  @usableFromInline var histogram = ReuseHistogram()
  /// The reuse times of the other watches, whose windows were counted: with ``histogram``, every
  /// reuse time, from which the model finds its eviction time.
  @usableFromInline var countedReuseTimes = ReuseHistogram()
  /// The distances of the counted watches, in keys of the layer: their window's sampled keys
  /// times ``KeySample/scale``.
  @usableFromInline var distances = ReuseHistogram()
  /// Watches ended without a reuse: their entry expired, was removed or invalidated (a lookup
  /// then misses at any size), or they were the oldest of too many.
  @usableFromInline var dropped = 0
  /// Of the reuses above, those of the watches whose key's next lookup was a repeated hit: a
  /// hit on an entry that filled a miss of its key or was hit since it was inserted
  /// (``repeatedWatches`` of them). The curve weighs them, and the others, so that their share
  /// of the watches is the share of the lookups the layer counted (``repeatedHits(countdown:)``
  /// over ``lookups(countdown:)``). See ``HitRatioCurve/StratumWeights``.
  @usableFromInline var repeated = RepeatedReuses()
  /// The watches ended by a repeated hit (each once, whatever its weight).
  @usableFromInline var repeatedWatches = 0
  /// The lookups sampled from that missed (an expired or invalidated entry's among them).
  @usableFromInline var misses: UInt64 = 0
  /// The hits sampled from on entries inserted unasked for, not hit before (see
  /// ``MemoryNode/isUnasked``): the first lookup of their key may be that hit.
  @usableFromInline var unaskedHits: UInt64 = 0
  /// The hashes of the latest misses sampled from, oldest overwritten first: an entry inserted
  /// for one of them fills that miss (``takeRecentMiss(hash:)``). In the sampler itself, compared
  /// at once: a miss writes one lane, an insert compares eight.
  @usableFromInline var recentMisses = SIMD8<Int>(repeating: 0)
  /// Where ``recentMisses`` takes the next miss.
  @usableFromInline var recentMissCursor = 0

  /// How many misses ``recentMisses`` remembers (a power of two): a miss's fill within this many
  /// other misses of the segment counts as asked for (a loading cache fills a miss after its
  /// load, while other misses of the segment may begin theirs).
  @inlinable static var recentMissCount: Int { SIMD8<Int>.scalarCount }

  /// The reuses of the watches whose next lookup was a repeated hit: as the sampler's own
  /// ``histogram``, ``countedReuseTimes`` and ``distances``, of which they are a part.
  @usableFromInline
  struct RepeatedReuses: Sendable {
    @usableFromInline var modelled = ReuseHistogram()
    @usableFromInline var counted = ReuseHistogram()
    @usableFromInline var distances = ReuseHistogram()

    @inlinable init() {}
  }
  /// The random state that spaces the watched lookups (xorshift64*); 0 when off.
  @usableFromInline var random: UInt64 = 0
  /// The fewest entries the watches are bounded for: 256 over the layer's segments.
  @usableFromInline var minimumEntries = 256
  /// How far the sampling has thinned: gaps are ``meanGap`` times `2^level` lookups on average.
  @usableFromInline var level = 0
  /// The watches begun (each once, whatever its weight).
  @usableFromInline var watched = 0
  /// The watches after which the level rises for the first time (then after twice as many
  /// more, and so on): the segment's share of 20,000 (a curve within about a third of a point
  /// of what its sample would show with every lookup watched; 40,000 cost a young layer's hits
  /// some 2% more for its first 4 million lookups, for a tenth of a point).
  @usableFromInline var thinningStart = 20_000
  /// The weight of the watch the running countdown will begin: `2^level` when its gap was drawn.
  @usableFromInline var gapWeight = 1
  /// A slot of ``recentlyRecorded``: the sampled key this segment last kept there, the
  /// sample's position when it was recorded (`Int.min` for none), and the last key that came
  /// back within its window in this slot (the key kept, when it is that one).
  @usableFromInline
  struct RecordedKey: Sendable {
    @usableFromInline var key: UInt64
    @usableFromInline var position: Int
    @usableFromInline var returned: UInt64?

    @inlinable
    init(key: UInt64, position: Int, returned: UInt64?) {
      self.key = key
      self.position = position
      self.returned = returned
    }
  }

  /// The sampled keys this segment recorded, one for each value of their mixed hash's lowest 3
  /// bits (``recordAccess(_:in:)``); empty until the first.
  @usableFromInline var recentlyRecorded: [RecordedKey] = []
  /// The highest level: one lookup in 102 × 2^10 (about 100,000).
  @inlinable static var maximumLevel: Int { 10 }

  /// The mean number of lookups between two watched ones: 102, so that at most 1% are watched
  /// (the count over 900k lookups stays 6 standard deviations below 1%).
  @inlinable static var meanGap: Int { 102 }

  @inlinable
  init() {}

  /// Starts sampling, its gaps drawn from `seed`, in a segment of a layer of `segments`
  /// segments; returns the first countdown.
  mutating func start(seed: UInt64, segments: Int) -> Int {
    random = seed | 1
    drawn = 0
    minimumEntries = Swift.max(256 / Swift.max(segments, 1), 4)
    thinningStart = Swift.max(20_000 / Swift.max(segments, 1), 64)
    let gap = nextGap()
    gapEnd = gap
    return gap
  }

  @inlinable var isOn: Bool { random != 0 }

  /// The lookups sampled from so far, given the running `countdown`.
  @inlinable
  func lookups(countdown: Int) -> UInt64 {
    let remaining = UInt64(Swift.max(countdown, 0))
    return drawn > remaining ? drawn - remaining : 0
  }

  /// The repeated hits sampled from, given the running `countdown`: the hits less those on
  /// entries inserted unasked for (``unaskedHits``). Each is the next lookup of a key whose
  /// lookup before it was counted too: the miss its entry filled, or a hit.
  @inlinable
  func repeatedHits(countdown: Int) -> UInt64 {
    let hits = lookups(countdown: countdown)
    let other = misses &+ unaskedHits
    return hits > other ? hits - other : 0
  }

  /// Counts a miss sampled from, of the key whose hash is `hash`, and remembers it for the
  /// insert that may fill it.
  @inlinable
  mutating func noteMiss(hash: Int) {
    misses &+= 1
    recentMisses[recentMissCursor] = hash
    recentMissCursor = (recentMissCursor &+ 1) & (Self.recentMissCount - 1)
  }

  /// Whether one of the latest misses was of the key whose hash is `hash` (a key inserted for
  /// it fills it); forgets that miss.
  @inlinable
  mutating func takeRecentMiss(hash: Int) -> Bool {
    let matches = recentMisses .== SIMD8(repeating: hash)
    guard any(matches) else { return false }
    // Cleared to a value another key could hash to as well as any (as the lanes' first 0): a
    // wrong match (one in 2^64, 2^32 where `Int` has 32 bits) only files one entry as asked for.
    recentMisses.replace(with: ~hash, where: matches)
    return true
  }

  /// The lookups the watches still waiting stand for.
  @usableFromInline var pendingWeight: Int { watches.values.reduce(0) { $0 &+ $1.weight } }

  /// 52 to 152 (``meanGap`` ± 50), uniformly, times `2^level`: a watched lookup is never
  /// predictable from the last, and the count of watched lookups varies little. The watch it
  /// ends in will weigh `2^level`.
  @inlinable
  mutating func nextGap() -> Int {
    random ^= random >> 12
    random ^= random << 25
    random ^= random >> 27
    let draw = (random &* 0x2545_F491_4F6C_DD1D) >> 33
    gapWeight = 1 << level
    let gap = (Self.meanGap - 50 + Int(draw % 101)) << level
    drawn &+= UInt64(gap)
    return gap
  }

  /// The most watches a segment holding `count` entries keeps: a quarter of its entries (of
  /// ``minimumEntries`` at least), which bounds their memory to a few bytes per entry in a scan.
  /// The oldest leaves first, as never reused: a long reuse that a cache four times as large would
  /// keep may then count as a miss.
  @inlinable
  func limit(forEntries count: Int) -> Int {
    Swift.max(count, minimumEntries) / 4 + 1
  }

  /// Begins watching the key whose hash is `hash`, looked up at `time` (and at `keys` in the layer's ``KeySample``), in
  /// a segment holding `count` entries; beyond the limit, the oldest quarter of the watches ends.
  @inlinable
  mutating func watch(hash: Int, at time: Int, keys: Int, entries count: Int) {
    if let replaced = watches.insert(Watch(time: time, keys: keys, weight: gapWeight), forHash: hash) {
      dropped &+= replaced.weight
    }
    watched &+= 1
    // Thinning: after `thinningStart` watches, half the rate; after twice as many more (four
    // times the lookups), half again; and so on. Each watch weighs the lookups it stands for.
    if level < Self.maximumLevel, watched >= thinningStart &* ((2 << level) &- 1) { level += 1 }
    let limit = limit(forEntries: count)
    if watches.count > limit { dropOldest(keeping: limit - limit / 4) }
  }

  /// Ends the watch of the key whose hash is `hash`, looked up again at `time`, if it is watched; returns whether it was.
  /// Records the reuse as the lookups between, the second one excluded: a key looked up again
  /// with `n` lookups of other keys between has at most `n` keys used since, so an LRU cache of
  /// `n + 1` entries hits. With the layer's `sample`, a window that held at least
  /// ``KeySample/countedFrom`` of its keys is recorded by its count of distinct keys instead
  /// (more than any size of the curve when the sample no longer reaches back to it).
  /// With `repeated`, the lookup that ends the watch was a repeated hit: the reuse is recorded
  /// in ``repeated`` too.
  @discardableResult
  @inlinable
  mutating func resolve(hash: Int, at time: Int, sample: KeySample?, repeated isRepeated: Bool = false) -> Bool {
    guard let began = watches.remove(hash: hash) else { return false }
    let reuseTime = time &- began.time &- 1
    if isRepeated { repeatedWatches &+= 1 }
    // Fewer sampled accesses since than `countedFrom` (the lock-free check) hold fewer keys.
    if let sample, sample.position &- began.keys >= sample.countedFrom {
      let counted = sample.keys(since: began.keys) ?? .max
      if counted >= sample.countedFrom {
        let distance = counted.multipliedReportingOverflow(by: sample.scale)
        let keys = distance.overflow ? .max : distance.partialValue
        if countedReuseTimes.wouldOverflow(reuseTime, weight: began.weight)
          || distances.wouldOverflow(keys, weight: began.weight)
        {
          halveAll()
        }
        countedReuseTimes.record(reuseTime, weight: began.weight)
        distances.record(keys, weight: began.weight)
        if isRepeated {
          repeated.counted.record(reuseTime, weight: began.weight)
          repeated.distances.record(keys, weight: began.weight)
        }
        return true
      }
    }
    if histogram.wouldOverflow(reuseTime, weight: began.weight) { halveAll() }
    histogram.record(reuseTime, weight: began.weight)
    if isRepeated { repeated.modelled.record(reuseTime, weight: began.weight) }
    return true
  }

  /// Halves every count of reuses and of watches dropped, keeping their proportions (a
  /// repeated reuse stays part of all reuses), when one would overflow: after 2^32 reuses in
  /// one bucket. The watches still waiting keep their weights.
  @usableFromInline
  mutating func halveAll() {
    histogram.halve()
    countedReuseTimes.halve()
    distances.halve()
    repeated.modelled.halve()
    repeated.counted.halve()
    repeated.distances.halve()
    dropped /= 2
  }

  /// Records an access to the sampled key of mixed hash `mixed` in the layer's `sample`, unless
  /// this segment recorded it fewer than ``KeySample/repeatWindow`` positions ago. The segment
  /// keeps one key for each value of the hash's lowest 3 bits: a key keeps its slot until its
  /// window ends, except that a key that came back in that slot before takes it from one that
  /// has not (yet). So a popular sampled key takes the sample's lock about once every 64
  /// sampled accesses of the layer (once more when it takes its slot back), however many other
  /// keys share its slot, rather than at each of its lookups on every core; of two popular keys
  /// that share a slot, the second takes the lock at each of its lookups.
  ///
  /// The latest access of a key, as the sample knows it, is then up to 64 positions old: a
  /// window that began within those 64 positions may miss the key. At most one key per slot
  /// of each segment is in that state at a time, out of the 2,048 or more a counted window
  /// holds.
  @inlinable
  mutating func recordAccess(_ mixed: UInt64, in sample: KeySample) {
    if recentlyRecorded.isEmpty {
      recentlyRecorded = Array(repeating: RecordedKey(key: 0, position: .min, returned: nil), count: 8)
    }
    let slot = Int(truncatingIfNeeded: mixed & 7)
    let position = sample.position
    let recent = recentlyRecorded[slot]
    let isRecent = (0..<KeySample.repeatWindow).contains(position &- recent.position)
    if recent.key == mixed, isRecent {
      recentlyRecorded[slot].returned = mixed
      return
    }
    sample.access(mixed)
    // The slot is free (its key's window has ended) or this key's own, or this key came back
    // in it before and takes it from one that has not.
    if !isRecent || recent.key == mixed || recent.returned == mixed {
      recentlyRecorded[slot].key = mixed
      recentlyRecorded[slot].position = position
    }
  }

  /// Ends the watch of the key whose hash is `hash`, if any, as never reused: its entry left the layer other than by
  /// eviction (expired, removed, invalidated), so its next lookup misses whatever the size.
  mutating func abandon(hash: Int) {
    if let watch = watches.remove(hash: hash) { dropped &+= watch.weight }
  }

  /// Ends every watch as never reused (the layer was emptied), and releases their storage.
  mutating func abandonAll() {
    dropped &+= pendingWeight
    watches = WatchTable()
  }

  /// Ends all but the `kept` newest watches, as never reused, and releases storage sized for
  /// many more (the layer shrank). O(watches log watches), once every quarter of the limit's new
  /// watches at most.
  @inlinable
  mutating func dropOldest(keeping kept: Int) {
    let times = watches.values.map { $0.time }.sorted()
    let cutoff = times[Swift.max(times.count - kept, 0)]
    let before = pendingWeight
    watches.keep { $0.time >= cutoff }
    dropped &+= before - pendingWeight
  }
}

/// Reuse times, counted in buckets that are exact up to 31 and then 8 to each power of two (each
/// within 1/8 of its values), up to 2^48 (the last bucket counts all above).
@usableFromInline
struct ReuseHistogram: Sendable, Hashable {
  /// The counts by bucket; empty until the first reuse is recorded.
  @usableFromInline var counts: [UInt32] = []
  /// How many reuse times were recorded.
  @usableFromInline var total = 0

  @inlinable static var exactLimit: Int { 32 }
  @inlinable static var subBuckets: Int { 8 }
  @inlinable static var bucketCount: Int { exactLimit + (48 - 5) * subBuckets }

  @inlinable
  static func bucket(of value: Int) -> Int {
    guard value >= exactLimit else { return Swift.max(value, 0) }
    let exponent = Int.bitWidth - 1 - value.leadingZeroBitCount
    let sub = (value >> (exponent - 3)) & (subBuckets - 1)
    return Swift.min(exactLimit + (exponent - 5) * subBuckets + sub, bucketCount - 1)
  }

  /// The values bucket `index` counts, as `Double`s, which do not wrap where `Int` has 32 bits
  /// (the last buckets start past 2^31): `lower ..< lower + width`.
  static func span(of index: Int) -> (lower: Double, width: Double) {
    guard index >= exactLimit else { return (Double(index), 1) }
    let exponent = (index - exactLimit) / subBuckets + 5
    let unit = Double(sign: .plus, exponent: exponent - 3, significand: 1)
    return (Double(subBuckets + (index - exactLimit) % subBuckets) * unit, unit)
  }

  /// The bucket of `value` (0 or more, and finite), which may be past what `Int` holds.
  static func bucket(of value: Double) -> Int {
    guard value >= Double(exactLimit) else { return Swift.max(Int(value), 0) }
    let exponent = Int(value.exponent)
    guard exponent < 48 else { return bucketCount - 1 }
    let sub = Int(value / Double(sign: .plus, exponent: exponent - 3, significand: 1)) & (subBuckets - 1)
    return Swift.min(exactLimit + (exponent - 5) * subBuckets + sub, bucketCount - 1)
  }

  @inlinable
  mutating func record(_ value: Int, weight: Int = 1) {
    if counts.isEmpty { counts = Array(repeating: 0, count: Self.bucketCount) }
    let index = Self.bucket(of: value)
    let added = Self.added(weight)
    // The sampler halves every histogram first (``ReuseSampler/halveAll()``); this keeps a
    // histogram recorded alone from overflowing.
    if counts[index] > .max - added { halve() }
    counts[index] += added
    // Wrapping: a histogram's total passes 2^31 long before a bucket reaches 2^32 where `Int`
    // has 32 bits; the curve reads the counts.
    total &+= Int(added)
  }

  /// What a reuse of `weight` adds to its bucket: the weight, at most 2^20.
  @inlinable
  static func added(_ weight: Int) -> UInt32 {
    UInt32(truncatingIfNeeded: Swift.min(weight, 1 << 20))
  }

  /// Whether recording `value` of `weight` would overflow its bucket's count.
  @inlinable
  func wouldOverflow(_ value: Int, weight: Int) -> Bool {
    !counts.isEmpty && counts[Self.bucket(of: value)] > .max - Self.added(weight)
  }

  /// Halves every count, keeping their proportions, when one would overflow (after 2^32 reuses
  /// in one bucket).
  @inlinable
  mutating func halve() {
    total = 0
    for index in counts.indices {
      counts[index] /= 2
      total &+= Int(counts[index])
    }
  }
}
