import AsyncCacheTesting
import Testing

@testable import AsyncCache

/// The hit-ratio curve a memory layer estimates of itself (`Statistics.hitRatioCurve`), against
/// workloads whose LRU curve is known: a loop, and a skewed random trace checked against an exact
/// LRU simulation.
@Suite("MemoryLayer hit-ratio curve")
struct MemoryLayerHitRatioCurveTests {
  /// Makes segment 0 of `layer` watch the lookup `lookups` from now (its countdown), keeping the
  /// sampler's time.
  static func watch(after lookups: Int, in layer: MemoryLayer<Int, Int>) {
    layer.store.segments.withLock(0) { segment in
      let now = segment.sampler.gapEnd &- segment.sampleCountdown
      segment.sampler.drawn = segment.sampler.lookups(countdown: segment.sampleCountdown) &+ UInt64(lookups)
      segment.sampleCountdown = lookups
      segment.sampler.gapEnd = now &+ lookups
    }
  }

  /// Looks `key` up in `layer`, inserting it when it misses, as a loading cache does.
  static func access(_ key: Int, in layer: MemoryLayer<Int, Int>) throws {
    if layer.value(for: key) == nil { try layer.insert(key, for: key) }
  }

  /// The hit ratio an exact LRU cache of each of `capacities` has over `keys`: the fraction of
  /// accesses whose stack distance (other keys used since the key's last use) is below it, counted
  /// with a Fenwick tree over the accesses' times.
  static func exactLRU(_ keys: [Int], capacities: [Int]) -> [Double] {
    var tree = [Int](repeating: 0, count: keys.count + 1)
    func add(_ time: Int, _ delta: Int) {
      var index = time + 1
      while index <= keys.count {
        tree[index] += delta
        index += index & -index
      }
    }
    func keysUsedBefore(_ end: Int) -> Int {
      var index = end
      var sum = 0
      while index > 0 {
        sum += tree[index]
        index -= index & -index
      }
      return sum
    }
    var lastUse: [Int: Int] = [:]
    var distances: [Int] = []
    for (time, key) in keys.enumerated() {
      if let last = lastUse[key] {
        distances.append(lastUse.count - keysUsedBefore(last + 1))
        add(last, -1)
      }
      add(time, 1)
      lastUse[key] = time
    }
    return capacities.map { capacity in
      Double(distances.count { $0 < capacity }) / Double(keys.count)
    }
  }

  @Test("a loop over 1,000 keys: LRU misses every lookup below 1,000 entries and hits nearly all above")
  func loop() throws {
    let layer = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 600, admissionSeed: 1))
    for _ in 0..<100 {
      for key in 0..<1_000 { try Self.access(key, in: layer) }
    }
    let curve = try #require(layer.statistics.hitRatioCurve)
    #expect(curve.points.map(\.scale) == [0.25, 0.5, 1, 2, 4])
    #expect(curve.points.map(\.capacity) == [150, 300, 600, 1_200, 2_400])
    for point in curve.points {
      // Every reuse is 1,000 lookups later; the first pass and the watches still waiting at the
      // end never reuse: 1 lookup in 100 misses at any size.
      let expected = point.capacity < 1_000 ? 0 : 0.99
      #expect(abs(point.hitRatio - expected) < 0.01, "at \(point.capacity) entries: \(point.hitRatio)")
    }
  }

  @Test(
    "a skewed trace, at three capacities: within 3 points of an exact LRU simulation at every size",
    arguments: [200, 500, 1_000])
  func skewed(capacity: Int) throws {
    var draws = SplitMix64(seed: UInt64(capacity))
    // 80% of lookups over a hot tenth of 20,000 keys, the rest over all of them.
    let keys = (0..<200_000).map { _ in
      Int.random(in: 0..<100, using: &draws) < 80
        ? Int.random(in: 0..<2_000, using: &draws) : Int.random(in: 0..<20_000, using: &draws)
    }
    let layer = try MemoryLayer<Int, Int>(configuration: .init(countLimit: capacity, admissionSeed: 7))
    for key in keys { try Self.access(key, in: layer) }
    let statistics = layer.statistics
    let curve = try #require(statistics.hitRatioCurve)
    let exact = Self.exactLRU(keys, capacities: curve.points.map(\.capacity))
    for (point, lru) in zip(curve.points, exact) {
      #expect(abs(point.hitRatio - lru) < 0.03, "at \(point.capacity) entries: \(point.hitRatio) vs \(lru)")
    }
    // About 1 lookup in 102 is watched: at most 1%.
    let sampled = Double(curve.sampledLookups) / Double(keys.count)
    #expect(sampled <= 0.01 && sampled > 0.008, "\(curve.sampledLookups) of \(keys.count) lookups watched")
    #expect(statistics.hitRatio == Double(statistics.hits) / Double(keys.count))
  }

  @Test("off, or before the first lookup, there is no curve; a hit or insert never watches a key when off")
  func offAndEmpty() throws {
    let off = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 100, estimatesHitRatioCurve: false))
    let on = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 100))
    #expect(on.statistics.hitRatioCurve == nil)
    for round in 0..<50 {
      for key in 0..<100 {
        try Self.access(key + round % 2, in: off)
        try Self.access(key + round % 2, in: on)
      }
    }
    #expect(off.statistics.hitRatioCurve == nil)
    #expect(off.store.segments.withLock(0) { $0.sampler.watches.isEmpty && $0.sampler.histogram.total == 0 })
    let curve = try #require(on.statistics.hitRatioCurve)
    #expect(curve.sampledLookups > 0)
  }

  @Test("a watched key that is evicted and inserted again is timed from its first lookup to its next")
  func watchSurvivesEviction() throws {
    let layer = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 10, evictionPolicy: .leastRecentlyUsed))
    // Only the lookups the test chooses are watched: the countdown runs out at the next lookup,
    // then never again.
    func watchNext() { Self.watch(after: 1, in: layer) }
    func watchNoMore() { Self.watch(after: .max, in: layer) }
    func sampler() -> ReuseSampler { layer.store.segments.withLock(0) { $0.sampler } }
    watchNoMore()
    watchNext()
    #expect(layer.value(for: 1) == nil)  // missed: watched from lookup 1
    watchNoMore()
    try layer.insert(1, for: 1)
    #expect(sampler().watches[hash: 1.hashValue]?.time == 1)
    // The load's insert marks the node: its next hit ends the watch.
    for key in 100..<105 { _ = layer.value(for: key) }  // lookups 2 to 6, all misses
    #expect(layer.value(for: 1) == 1)  // lookup 7
    let afterHit = sampler()
    #expect(afterHit.histogram.total == 1)
    #expect(
      afterHit.histogram.counts.count > 5 && afterHit.histogram.counts[5] == 1,
      "6 lookups later, 5 between: a cache of 6 entries would hit")
    #expect(afterHit.watches.isEmpty)

    // Watched again, then evicted by ten other keys, then missed: the miss ends the watch.
    watchNext()
    #expect(layer.value(for: 1) == 1)  // lookup 8, watched
    watchNoMore()
    for key in 200..<210 { try layer.insert(key, for: key) }
    #expect(layer.value(for: 1) == nil)  // lookup 9: evicted, a reuse of 1
    let afterMiss = sampler()
    #expect(afterMiss.histogram.total == 2 && afterMiss.histogram.counts[0] == 1, "looked up again next")
    #expect(afterMiss.watches.isEmpty)
  }

  @Test("the watches stay below a quarter of the entries, however many keys a scan watches")
  func watchesAreBounded() throws {
    let layer = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 2_000, admissionSeed: 3))
    for key in 0..<1_024 { try layer.insert(key, for: key) }
    // Every key once: no watch ever ends. A layer of 1,024 entries keeps at most 257 watches.
    for key in 10_000..<210_000 { _ = layer.value(for: key) }
    let sampler = layer.store.segments.withLock(0) { $0.sampler }
    #expect(sampler.watches.count <= 1_024 / 4 + 1)
    #expect(sampler.dropped + sampler.watches.count > 1_900, "about 1 lookup in 102 watched")
    let curve = try #require(layer.statistics.hitRatioCurve)
    #expect(curve.points.allSatisfy { $0.hitRatio == 0 })
  }

  @Test("one watch that never ends stays, while the thousands after it end at their reuse")
  func longWatchStays() throws {
    let layer = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 2_000, admissionSeed: 5))
    for key in 0..<1_024 { try layer.insert(key, for: key) }
    Self.watch(after: 1, in: layer)
    _ = layer.value(for: 1_000)  // watched, and never looked up again
    // Ten keys looked up in turn: every watch ends ten lookups later; the first never does.
    for lookup in 0..<65_000 { _ = layer.value(for: lookup % 10) }
    let sampler = layer.store.segments.withLock(0) { $0.sampler }
    #expect(sampler.watches[hash: 1_000.hashValue]?.time == 1)
    #expect(sampler.watches.count <= 11 && sampler.dropped == 0)
    #expect(sampler.histogram.total > 600, "about 1 lookup in 102 watched, each ended")
  }

  @Test("through a LoadingCache, the curve is the requests': a load's second look at the top layer is no reuse")
  func throughALoadingCache() async throws {
    var draws = SplitMix64(seed: 9)
    let keys = (0..<100_000).map { _ in
      Int.random(in: 0..<100, using: &draws) < 80
        ? Int.random(in: 0..<1_000, using: &draws) : Int.random(in: 0..<10_000, using: &draws)
    }
    let memory = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 500, admissionSeed: 11))
    let cache = try LoadingCache(layers: [memory], origin: ClosureFetcher { (key: Int) in key })
    for key in keys { _ = try await cache.value(for: key) }
    let curve = try #require(memory.statistics.hitRatioCurve)
    let exact = Self.exactLRU(keys, capacities: curve.points.map(\.capacity))
    for (point, lru) in zip(curve.points, exact) {
      #expect(abs(point.hitRatio - lru) < 0.03, "at \(point.capacity) entries: \(point.hitRatio) vs \(lru)")
    }
    let sampled = Double(curve.sampledLookups) / Double(keys.count)
    #expect(sampled <= 0.01 && sampled > 0.008, "requests are sampled, not the loads' second looks")
  }

  @Test("an entry that expires, is removed or invalidated before its key comes back is no reuse", arguments: 0..<3)
  func entriesThatLeave(way: Int) async throws {
    let clock = ManualClock()
    let layer = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 1_000, admissionSeed: 13, clock: clock))
    for round in 0..<200 {
      for key in 0..<200 {
        if layer.value(for: key) == nil {
          let lifetime: Duration = way == 0 ? .seconds(1) : .seconds(3_600)
          let metadata = EntryMetadata(producedAt: clock.now, tags: ["round \(round)"])
          try layer.insert(
            CacheEntry(key, expiresAt: clock.now.advanced(by: lifetime), metadata: metadata), for: key)
        }
      }
      switch way {
      case 0: clock.advance(by: .seconds(2))  // every entry expires
      case 1: layer.removeAll()
      default:
        clock.advance(by: .milliseconds(1))
        await layer.invalidate(tag: "round \(round)", at: clock.now)
      }
    }
    #expect(layer.statistics.hits == 0)
    let curve = try #require(layer.statistics.hitRatioCurve)
    for point in curve.points { #expect(point.hitRatio < 0.01, "at \(point.capacity) entries: \(point.hitRatio)") }
  }

  @Test("a loop of as many keys as the layer holds hits at its size: a reuse counts the lookups between")
  func loopAtCapacity() throws {
    let layer = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 10, admissionSeed: 17))
    for _ in 0..<20_000 {
      for key in 0..<10 { try Self.access(key, in: layer) }
    }
    let curve = try #require(layer.statistics.hitRatioCurve)
    #expect(try #require(curve.hitRatio(atScale: 1)) > 0.99)
    #expect(try #require(curve.hitRatio(atScale: 0.5)) < 0.01)
  }

  @Test("a segment's reuse times count in the layer's lookups: over its share, not times the segment count")
  func segmentSharesConvertReuseTimes() throws {
    // Every key comes back after 1,000 of the layer's lookups; segment 0 sees three quarters of
    // them (750 of its own), segment 1 a quarter (250). An LRU cache of fewer than 1,000 entries
    // hits none; of more, all.
    func histogram(_ reuseTime: Int, count: Int) -> [Int] {
      var counts = [Int](repeating: 0, count: ReuseHistogram.bucketCount)
      counts[ReuseHistogram.bucket(of: reuseTime)] = count
      return counts
    }
    let segments = [
      HitRatioCurve.SegmentReuse(
        share: 0.75, reuseTimes: histogram(750, count: 3_000), modelled: histogram(750, count: 3_000)),
      HitRatioCurve.SegmentReuse(
        share: 0.25, reuseTimes: histogram(250, count: 1_000), modelled: histogram(250, count: 1_000)),
    ]
    let curve = try #require(
      HitRatioCurve(capacity: 2_000, segments: segments, distances: [], unresolved: 0, sampledLookups: 4_000))
    // 500 entries: the quarter in segment 1 came back after 250 of its lookups, but 1,000 of the
    // layer's: no hit (the segment count, 2, would have said 500 and a hit).
    #expect(try #require(curve.hitRatio(atScale: 0.25)) < 0.01)
    #expect(try #require(curve.hitRatio(atScale: 1)) > 0.99)
  }

  /// The layer's eviction time by the model, computed without moving any histogram: the time
  /// at which the integral of P(reuse time / share > t), over every segment's buckets (each
  /// spread evenly) and the samples never reused, reaches `entries`; by bisection.
  static func referenceEvictionTime(entries: Double, segments: [HitRatioCurve.SegmentReuse], samples: Double) -> Double
  {
    let recorded = Double(segments.reduce(0) { $0 + $1.reuseTimes.reduce(0, +) })
    func area(until time: Double) -> Double {
      var area = (samples - recorded) * time
      for segment in segments {
        let local = time * segment.share
        for index in segment.reuseTimes.indices where segment.reuseTimes[index] != 0 {
          let (lower, width) = ReuseHistogram.span(of: index)
          let covered =
            local <= lower
            ? local
            : local < lower + width ? local - (local - lower) * (local - lower) / (2 * width) : lower + width / 2
          area += Double(segment.reuseTimes[index]) * covered / segment.share
        }
      }
      return area
    }
    var (low, high) = (0.0, 1.0)
    while area(until: high) < entries * samples {
      (low, high) = (high, high * 2)
      if high > 0x1p70 { return .infinity }
    }
    for _ in 0..<100 {
      let middle = (low + high) / 2
      if area(until: middle) < entries * samples { low = middle } else { high = middle }
    }
    return high
  }

  @Test(
    "moving the segments' reuse times to the layer's time gives the model's estimate at any shares",
    arguments: [[0.25, 0.25, 0.25, 0.25], [0.5, 0.3, 0.15, 0.05]])
  func sharesMatchTheModel(shares: [Double]) throws {
    var draws = SplitMix64(seed: 11)
    for _ in 0..<30 {
      // Four segments of random reuse times, some never reused.
      let segments = shares.map { share in
        var counts = [Int](repeating: 0, count: ReuseHistogram.bucketCount)
        for _ in 0..<200 {
          let bound = 1 << Int.random(in: 2..<24, using: &draws)
          counts[ReuseHistogram.bucket(of: Int.random(in: 0..<bound, using: &draws))] += 1
        }
        return HitRatioCurve.SegmentReuse(share: share, reuseTimes: counts, modelled: counts)
      }
      let unresolved = Double(Int.random(in: 0..<100, using: &draws))
      let capacity = Int.random(in: 100..<1_000_000, using: &draws)
      let curve = try #require(
        HitRatioCurve(capacity: capacity, segments: segments, distances: [], unresolved: unresolved, sampledLookups: 1))
      let samples = segments.reduce(unresolved) { $0 + $1.reuseTimes.reduce(0, +) }
      for point in curve.points {
        let eviction = Self.referenceEvictionTime(entries: Double(point.capacity), segments: segments, samples: samples)
        let hits = segments.reduce(0.0) { $0 + HitRatioCurve.count(below: eviction * $1.share, in: $1.modelled) }
        #expect(
          abs(point.hitRatio - hits / samples) < 0.005,
          "\(point.scale)× of \(capacity): \(point.hitRatio), the model \(hits / samples)")
      }
    }
  }

  @Test("a segment's lookups, for its share, are the gaps drawn less the countdown, in 64 bits")
  func segmentLookups() {
    var sampler = ReuseSampler()
    var countdown = sampler.start(seed: 3, segments: 1)
    var consumed: UInt64 = 0
    for _ in 0..<1_000 {
      consumed += UInt64(countdown)
      countdown = sampler.nextGap()
    }
    #expect(sampler.lookups(countdown: countdown) == consumed)
    #expect(sampler.lookups(countdown: countdown - 5) == consumed + 5)
    #expect(sampler.lookups(countdown: .max) == 0, "a countdown set past the gaps drawn (tests) gives 0, not a wrap")
    // Past 2^32 lookups (where `Int` has 32 bits, the segment's time has wrapped by then).
    sampler.drawn = 1 << 40
    #expect(sampler.lookups(countdown: 100) == (1 << 40) - 100)
  }

  @Test("spreading a range over the histogram gives each bucket its share of the range")
  func spreadKeepsCounts() {
    var draws = SplitMix64(seed: 5)
    for _ in 0..<200 {
      var histogram = [Double](repeating: 0, count: ReuseHistogram.bucketCount)
      let lower = Double.random(in: 0..<0x1p50, using: &draws) / Double(1 << Int.random(in: 0..<50, using: &draws))
      let upper = lower + Double.random(in: 0.5..<4, using: &draws) * Swift.max(lower / 8, 1)
      HitRatioCurve.spread(7, over: lower, to: upper, into: &histogram)
      #expect(abs(histogram.reduce(0, +) - 7) < 1e-9)
      for index in histogram.indices {
        let (start, width) = ReuseHistogram.span(of: index)
        let end = index == histogram.count - 1 ? Double.infinity : start + width
        let share = Swift.max(Swift.min(upper, end) - Swift.max(lower, start), 0) / (upper - lower)
        #expect(abs(histogram[index] - 7 * share) < 1e-9, "\(lower)..<\(upper) in bucket \(index)")
      }
    }
    // Past the last bucket's start, and invalid ranges.
    var histogram = [Double](repeating: 0, count: ReuseHistogram.bucketCount)
    HitRatioCurve.spread(3, over: 0x1p60, to: 0x1p61, into: &histogram)
    HitRatioCurve.spread(1, over: -1, to: 5, into: &histogram)
    HitRatioCurve.spread(1, over: 5, to: .infinity, into: &histogram)
    #expect(histogram.last == 3 && histogram.reduce(0, +) == 3)
  }

  @Test("a hot key's segment sees more lookups, and the curve still follows LRU")
  func hotKeySegment() throws {
    // A loop over 1,000 keys with one hot key looked up between any two: LRU hits the hot key
    // from 2 entries, and the loop from 1,001.
    let layer = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 1_000, segmentCount: 4, evictionPolicy: .leastRecentlyUsed, admissionSeed: 3))
    let hot = -1
    var trace: [Int] = []
    for _ in 0..<300 {
      for key in 0..<1_000 { trace += [key, hot] }
    }
    for key in trace where !Task.isCancelled { try Self.access(key, in: layer) }
    let curve = try #require(layer.statistics.hitRatioCurve)
    let scales = [0.25, 0.5, 2, 4]
    let exact = Self.exactLRU(trace, capacities: scales.map { Int($0 * 1_000) })
    try #require(exact.count == scales.count)
    #expect(abs(exact[1] - 0.5) < 0.01 && exact[2] > 0.99, "\(exact)")
    for (scale, exact) in zip(scales, exact) {
      let estimate = try #require(curve.hitRatio(atScale: scale))
      #expect(abs(estimate - exact) < 0.03, "\(scale)×: \(estimate), LRU \(exact)")
    }
  }

  @Test("a count limit near Int.max gives a curve, not a trap")
  func hugeCountLimit() throws {
    let layer = try MemoryLayer<Int, Int>(configuration: .init(countLimit: Int.max / 2))
    for _ in 0..<3 {
      for key in 0..<1_000 { try Self.access(key, in: layer) }
    }
    let curve = try #require(layer.statistics.hitRatioCurve)
    #expect(curve.points.allSatisfy { $0.capacity > 0 && (0...1).contains($0.hitRatio) })
  }

  @Test("a sampler that is off stays off when its countdown runs out (after 2^31 lookups on 32 bits)")
  func offStaysOff() throws {
    let layer = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 100, estimatesHitRatioCurve: false))
    layer.store.segments.withLock(0) { $0.sampleCountdown = 3 }
    for _ in 0..<10 {
      for key in 0..<100 { try Self.access(key, in: layer) }
    }
    #expect(layer.statistics.hitRatioCurve == nil)
    #expect(layer.store.segments.withLock(0) { $0.sampler.watches.isEmpty && $0.sampleCountdown > 1 << 30 })
  }

  @Test("the histogram's buckets cover every reuse time once, each within an eighth of its values")
  func histogramBuckets() {
    var next = 0
    for index in 0..<ReuseHistogram.bucketCount - 1 {
      let (start, size) = ReuseHistogram.span(of: index)
      let (lower, width) = (Int(start), Int(size))
      #expect(Double(lower) == start && Double(width) == size, "bucket \(index): whole numbers")
      #expect(lower == next, "bucket \(index)")
      #expect(ReuseHistogram.bucket(of: lower) == index && ReuseHistogram.bucket(of: lower + width - 1) == index)
      #expect(width == 1 || width * 8 <= lower)
      next = lower + width
    }
    #expect(ReuseHistogram.bucket(of: .max) == ReuseHistogram.bucketCount - 1)
    var draws = SplitMix64(seed: 3)
    for _ in 0..<10_000 {
      let value = Int.random(in: 0..<(1 << Int.random(in: 1..<53, using: &draws)), using: &draws)
      #expect(ReuseHistogram.bucket(of: Double(value)) == ReuseHistogram.bucket(of: value), "\(value)")
    }
    #expect(ReuseHistogram.bucket(of: 0x1p80) == ReuseHistogram.bucketCount - 1)
    var histogram = ReuseHistogram()
    histogram.record(5)
    histogram.counts[5] = .max
    histogram.record(5)
    #expect(histogram.counts[5] == UInt32.max / 2 + 1 && histogram.total == Int(UInt32.max / 2 + 1))
  }
}
