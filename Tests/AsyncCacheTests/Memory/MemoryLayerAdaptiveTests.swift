import AsyncCacheTesting
import Foundation
import Testing

@testable import AsyncCache

/// Seeded access sequences for the adaptation tests, small versions of `cache.hitRatio`'s traces.
enum AdaptiveTrace {
  /// Recency-biased (as the benchmark's `Trace.recencyBiased`): each new key is read `reads`
  /// times, each read a log-uniform gap of 1 to `maximumGap` accesses after the one before, then
  /// never again; an access is a new key whenever no read of an earlier key is due. Keys start
  /// at `firstKey`.
  static func recency(accesses: Int, reads: Int, maximumGap: Int, firstKey: Int, seed: UInt64) -> [Int] {
    var random = SeededGenerator(seed: seed)
    let logMaximumGap = log(Double(maximumGap))
    // Due reads: (due, key, remaining), a min-heap on (due, key).
    var heap: [(due: Int, key: Int, remaining: Int)] = []
    func precedes(_ a: (due: Int, key: Int, remaining: Int), _ b: (due: Int, key: Int, remaining: Int)) -> Bool {
      (a.due, a.key) < (b.due, b.key)
    }
    func push(_ read: (due: Int, key: Int, remaining: Int)) {
      heap.append(read)
      var child = heap.count - 1
      while child > 0, precedes(heap[child], heap[(child - 1) / 2]) {
        heap.swapAt(child, (child - 1) / 2)
        child = (child - 1) / 2
      }
    }
    func popDue(at time: Int) -> (due: Int, key: Int, remaining: Int)? {
      guard let first = heap.first, first.due <= time else { return nil }
      let last = heap.removeLast()
      guard !heap.isEmpty else { return first }
      heap[0] = last
      var parent = 0
      while true {
        let left = 2 * parent + 1
        guard left < heap.count else { break }
        var child = left
        if left + 1 < heap.count, precedes(heap[left + 1], heap[left]) { child = left + 1 }
        guard precedes(heap[child], heap[parent]) else { break }
        heap.swapAt(child, parent)
        parent = child
      }
      return first
    }
    var keys: [Int] = []
    keys.reserveCapacity(accesses)
    var nextKey = firstKey
    for time in 0..<accesses {
      var read: (due: Int, key: Int, remaining: Int)
      if let due = popDue(at: time) {
        read = due
      } else {
        read = (time, nextKey, reads)
        nextKey += 1
      }
      keys.append(read.key)
      read.remaining -= 1
      if read.remaining > 0 {
        let unit = Double(random.next() >> 11) / Double(1 << 53)
        read.due = time + max(1, Int(exp(unit * logMaximumGap)))
        push(read)
      }
    }
    return keys
  }

  /// Frequency-biased: a hot set of `hotKeys` keys drawn with a Zipf(`exponent`) skew, and
  /// between them, with probability `coldShare`, a cold key read once and never again. Hot
  /// keys are `firstKey..<firstKey + hotKeys`; cold keys follow.
  static func frequency(
    accesses: Int, hotKeys: Int, exponent: Double = 0.9, coldShare: Double, firstKey: Int, seed: UInt64
  ) -> [Int] {
    var random = SeededGenerator(seed: seed)
    var cumulative: [Double] = []
    var sum = 0.0
    for rank in 1...hotKeys {
      sum += 1 / pow(Double(rank), exponent)
      cumulative.append(sum)
    }
    var nextCold = firstKey + hotKeys
    return (0..<accesses).map { _ in
      if Double.random(in: 0..<1, using: &random) < coldShare {
        nextCold += 1
        return nextCold - 1
      }
      let draw = Double.random(in: 0..<sum, using: &random)
      var low = 0
      var high = hotKeys - 1
      while low < high {
        let middle = (low + high) / 2
        if cumulative[middle] > draw { high = middle } else { low = middle + 1 }
      }
      return firstKey + low
    }
  }

  /// `keyCount` keys in one order, `passes` times over.
  static func loop(keyCount: Int, passes: Int, firstKey: Int) -> [Int] {
    Array((0..<passes).map { _ in firstKey..<(firstKey + keyCount) }.joined())
  }
}

/// The ghosts' adaptation of ``EvictionPolicy/adaptive`` (layers of more than 4,096 entries, or
/// of several segments) through a real `MemoryLayer`: a recency phase grows the window until
/// the layer hits as LRU does, a frequency phase keeps the hot set as W-TinyLFU does, a loop does
/// not move the window. Smaller layers of one segment are refereed instead
/// (``MemoryLayerRefereeTests``).
///
/// Keys are `Int`s, whose hashes change with each process's hash seed: the segments and ghosts
/// differ from run to run, so the bounds leave room for that (measured over many runs), while
/// the sequences themselves are seeded.
@Suite struct MemoryLayerAdaptiveTests {
  /// A layer's count limit and segment count (`nil`: automatic), and a cost limit with a cost
  /// of 1 per entry (`nil`: none).
  struct Setup: Sendable, CustomTestStringConvertible {
    var countLimit: Int
    var segmentCount: Int?
    var costLimit: Int?
    /// The entries the layer holds when full.
    var capacity: Int { Swift.min(countLimit, costLimit ?? .max) }
    var testDescription: String {
      "\(countLimit) entries\(costLimit.map { ", cost limit \($0)" } ?? ""), "
        + (segmentCount.map { "\($0) segments" } ?? "automatic segments")
    }

    /// The default configuration but for its count limit: 16 automatic segments of 300 entries
    /// on any machine (the automatic count keeps at least 256 entries per segment, and splits
    /// only layers of more than 4,096).
    static let automatic = Setup(countLimit: 4_800, segmentCount: nil)
    /// One segment, large enough for the ghosts (smaller ones are refereed).
    static let oneSegment = Setup(countLimit: 5_000, segmentCount: 1)
  }

  /// Reads every key of `keys` (a miss inserts it) and returns the hit ratio, in %.
  @discardableResult
  static func replay(_ keys: some Collection<Int>, through memory: MemoryLayer<Int, Int>) throws -> Double {
    var hits = 0
    for key in keys {
      if memory.value(for: key) != nil {
        hits += 1
      } else {
        try memory.insert(key, for: key)
      }
    }
    return Double(hits) * 100 / Double(keys.count)
  }

  /// The layer's window share, from the target and as published to the segments (they agree
  /// whenever no insert is under way).
  static func share(of memory: MemoryLayer<Int, Int>) -> Double {
    let share = memory.store.windowTarget?.withLock { $0.share } ?? .nan
    #expect(Double(bitPattern: memory.store.windowShareBits.load(ordering: .relaxed)) == share)
    return share
  }

  static func layer(_ setup: Setup, policy: EvictionPolicy = .adaptive) throws -> MemoryLayer<Int, Int> {
    var configuration = MemoryLayer<Int, Int>.Configuration(countLimit: setup.countLimit, evictionPolicy: policy)
    if let costLimit = setup.costLimit {
      configuration.costLimit = costLimit
      configuration.cost = { _ in 1 }
    }
    configuration.segmentCount = setup.segmentCount
    return try MemoryLayer<Int, Int>(configuration: configuration, admissionSeed: 0xADA)
  }

  /// A recency-biased phase long enough for the window to settle (`settle` × the capacity), then
  /// `measured` × the capacity accesses over which the policies are compared.
  static func recencyPhase(capacity: Int, settle: Int, measured: Int) -> (settle: [Int], measured: [Int]) {
    let keys = AdaptiveTrace.recency(
      accesses: (settle + measured) * capacity, reads: 4, maximumGap: capacity, firstKey: 0, seed: 0x5A5)
    return (Array(keys.prefix(settle * capacity)), Array(keys.suffix(measured * capacity)))
  }

  @Test(
    "a recency phase grows the window until the layer hits as LRU does; a frequency phase keeps the hot set",
    arguments: [Setup.oneSegment, .automatic]
  )
  func recencyThenFrequency(setup: Setup) throws {
    let capacity = setup.countLimit
    // The window settles after about 25 × the capacity of recency-biased traffic, 35 × with one
    // segment (each vote moves it by 1/500, against 1/1,200 over 4 segments, but a segment sees
    // every vote: ghosts of depth 5 against 3).
    let (settle, measured) = Self.recencyPhase(
      capacity: capacity, settle: setup.segmentCount == 1 ? 40 : 32, measured: 4)
    let adaptive = try Self.layer(setup)
    #expect(Self.share(of: adaptive) == 0.01)
    try Self.replay(settle, through: adaptive)
    let grown = Self.share(of: adaptive)
    let adaptiveRecency = try Self.replay(measured, through: adaptive)
    // LRU holds the most recently used keys whatever came before: a history of 3 × the
    // capacity is as good as all of it. W-TinyLFU gets the same, enough to turn new keys away.
    let lru = try Self.layer(setup, policy: .leastRecentlyUsed)
    let tinyLFU = try Self.layer(setup, policy: .windowTinyLFU)
    for memory in [lru, tinyLFU] { try Self.replay(settle.suffix(3 * capacity), through: memory) }
    let lruRecency = try Self.replay(measured, through: lru)
    let tinyLFURecency = try Self.replay(measured, through: tinyLFU)
    #expect(grown > 0.2, "the window grew from 1% to \(grown)")
    #expect(adaptiveRecency >= lruRecency - 2, "adaptive \(adaptiveRecency)%, LRU \(lruRecency)%")
    #expect(adaptiveRecency >= tinyLFURecency + 20, "adaptive \(adaptiveRecency)%, W-TinyLFU \(tinyLFURecency)%")

    // A small hot set (Zipf 0.99 over 30% of the capacity) read over and over, with one-off
    // keys between (60% of the reads): W-TinyLFU keeps the hot set and turns the one-off keys
    // away, and so must the adaptive window, however large the recency phase left it.
    let hotKeys = capacity * 3 / 10
    let frequency = AdaptiveTrace.frequency(
      accesses: 8 * capacity, hotKeys: hotKeys, exponent: 0.99, coldShare: 0.6, firstKey: 1 << 40, seed: 0x5A6)
    let warmUp = frequency.prefix(4 * capacity)
    let later = frequency.suffix(4 * capacity)
    for memory in [adaptive, tinyLFU] { try Self.replay(warmUp, through: memory) }
    let adaptiveFrequency = try Self.replay(later, through: adaptive)
    let tinyLFUFrequency = try Self.replay(later, through: tinyLFU)
    #expect(
      adaptiveFrequency >= tinyLFUFrequency - 1, "adaptive \(adaptiveFrequency)%, W-TinyLFU \(tinyLFUFrequency)%")
    // The hottest tenth of the hot set is there (hashes differ from run to run, so allow a few
    // unlucky duels).
    let hottest = (0..<(hotKeys / 10)).map { (1 << 40) + $0 }
    let missing = hottest.filter { !adaptive.contains($0) }
    #expect(missing.count * 10 <= hottest.count, "\(missing)")
    for memory in [adaptive, lru, tinyLFU] { #expect(memory.invariantViolations.isEmpty) }
  }

  /// Found while writing these tests: after a recency phase the window stayed where it grew. In
  /// a frequency phase the keys that could vote -1 (evicted from main, back within the ghosts'
  /// depth, 1% of the segment's exits) are rare, and hot keys come back after far more exits than
  /// that, so no ghost votes either way; where the hot set is about the size of the cache, the
  /// oversized window cost 2 to 5 points against W-TinyLFU for as long as the phase lasted. Now
  /// a span whose votes do not ask for a larger window, in which the window earns fewer hits
  /// per entry than main, relaxes it.
  ///
  /// Both layers live through the same recency phase first, so that they meet the frequency
  /// phase with the same history in their sketches (a W-TinyLFU layer that skipped it scores 2
  /// points more, the adaptive layer's window notwithstanding).
  @Test("a frequency phase after a recency phase shrinks the window back toward 1%")
  func frequencyPhaseShrinksTheWindow() throws {
    // Two segments of 250 entries: ghosts of the depth the rule was measured with (a layer of one
    // segment this small is refereed instead).
    try Self.checkFrequencyPhaseShrinksTheWindow(Setup(countLimit: 500, segmentCount: 2), trials: 4)
  }

  /// The same at the scale the ghosts serve alone: sixteen segments of 300 entries. Spans ended
  /// only when a whole capacity of inserts brought no vote at all, and here some segment always
  /// voted, so the window stayed where the recency phase left it and the layer trailed W-TinyLFU
  /// by several points for as long as the phase lasted (issue 36). Spans now end after every
  /// capacity of inserts, and votes that balance do not stop the relaxing.
  @Test("a large layer's window comes back after a recency phase too")
  func largeLayersShrinkTheWindowToo() throws {
    try Self.checkFrequencyPhaseShrinksTheWindow(Setup.automatic)
  }

  /// A layer bounded by cost whose count limit is a far safety cap: sixteen segments that hold
  /// 300 entries each where their share of the count limit is 3,125. Spans and votes were
  /// measured against the count limit, and the ghosts were as deep as 1% of it: every returning
  /// key voted for a larger window, and the layer ended as LRU (found by review: 26.8% on the
  /// frequency phase against W-TinyLFU's 44.1%). Now both follow the entries the layer holds.
  @Test("a layer bounded by cost under a far count limit brings its window back too")
  func costBoundLayersShrinkTheWindowToo() throws {
    try Self.checkFrequencyPhaseShrinksTheWindow(Setup(countLimit: 50_000, segmentCount: 16, costLimit: 4_800))
  }

  /// A recency phase, then a frequency phase: the window must come back toward 1% and the layer
  /// hit as W-TinyLFU does.
  ///
  /// Hashes, so admissions, differ from process to process (Swift seeds its hasher at launch),
  /// and so do the figures. On two segments of 250 entries, over 100 histories, the layer's hit
  /// ratio minus W-TinyLFU's was -0.3 points on average, from -1.6 to +1.2 (one run of the full
  /// suite measured -1.9; the stuck window cost 2 to 5), and the window's share halfway was a
  /// tenth of the grown one, but once 1.16 of it (it grew for a while before it shrank; it ended
  /// at 0.04 as the others did). The small layer is therefore measured over `trials` independent
  /// histories (other keys, so other hashes, and other seeds), and their averages are held to the
  /// bounds: with four, their spread is half a single history's.
  static func checkFrequencyPhaseShrinksTheWindow(_ setup: Setup, trials: Int = 1) throws {
    var differences: [Double] = []
    var halfwayShares: [Double] = []
    for trial in 0..<trials {
      let history = try Self.frequencyPhaseAfterRecency(setup, trial: trial)
      differences.append(history.adaptiveRatio - history.tinyLFURatio)
      halfwayShares.append(history.shrunk / history.grown)
      // Whatever happened halfway, by the end the window is back near 1%.
      #expect(history.final < history.grown / 4, "the window's share went from \(history.grown) to \(history.final)")
    }
    let halfway = halfwayShares.reduce(0, +) / Double(trials)
    #expect(halfway < 0.65, "halfway, the window kept these parts of its grown share: \(halfwayShares)")
    let difference = differences.reduce(0, +) / Double(trials)
    #expect(difference >= -1.5, "adaptive minus W-TinyLFU, in points: \(differences)")
  }

  /// One history of ``checkFrequencyPhaseShrinksTheWindow(_:trials:)``: the window's share when
  /// the recency phase ends (`grown`), halfway through the frequency phase (`shrunk`) and at its
  /// end (`final`), and the two layers' hit ratios over the frequency phase's second part.
  static func frequencyPhaseAfterRecency(
    _ setup: Setup, trial: Int
  ) throws -> (grown: Double, shrunk: Double, final: Double, adaptiveRatio: Double, tinyLFURatio: Double) {
    let capacity = setup.capacity
    // Each trial its own keys (so hashes) and seeds; trial 0 is the history this test always had.
    let offset = trial << 48
    let settle = AdaptiveTrace.recency(
      accesses: 20 * capacity, reads: 4, maximumGap: capacity, firstKey: offset, seed: 0x5A5 &+ UInt64(trial))
    let adaptive = try Self.layer(setup)
    let tinyLFU = try Self.layer(setup, policy: .windowTinyLFU)
    for memory in [adaptive, tinyLFU] { try Self.replay(settle, through: memory) }
    let grown = Self.share(of: adaptive)
    #expect(grown > 0.15)
    // A hot set as large as the cache, mildly skewed, and one-off keys between.
    let frequency = AdaptiveTrace.frequency(
      accesses: 48 * capacity, hotKeys: capacity, exponent: 0.5, coldShare: 0.5, firstKey: offset + (1 << 40),
      seed: 0x5A7 &+ UInt64(trial))
    for memory in [adaptive, tinyLFU] { try Self.replay(frequency.prefix(16 * capacity), through: memory) }
    let shrunk = Self.share(of: adaptive)
    let adaptiveRatio = try Self.replay(frequency.suffix(32 * capacity), through: adaptive)
    let tinyLFURatio = try Self.replay(frequency.suffix(32 * capacity), through: tinyLFU)
    #expect(adaptive.invariantViolations.isEmpty)
    return (grown, shrunk, Self.share(of: adaptive), adaptiveRatio, tinyLFURatio)
  }

  /// The rule itself, on a layer of one segment whose window grew: a capacity of new keys ends a
  /// span, and when its votes do not ask for a larger window, the hits of the span decide. Hits
  /// on main entries halve the window's distance to 1%; hits on window entries leave it.
  @Test("a span relaxes a window that earns fewer hits per entry than main, and only then")
  func spansWeighTheWindowAgainstMain() throws {
    let setup = Setup.oneSegment
    let capacity = setup.countLimit
    let (settle, _) = Self.recencyPhase(capacity: capacity, settle: 20, measured: 0)
    for hitsOnWindow in [false, true] {
      let memory = try Self.layer(setup)
      try Self.replay(settle, through: memory)
      let grown = Self.share(of: memory)
      #expect(grown > 0.15)
      // Start a span here, so that the hits of the recency phase do not count in it.
      memory.store.restartSpan()
      memory.store.segments.withLock(0) { segment in (segment.windowHits, segment.mainHits) = (0, 0) }
      // Keys never seen leave no ghost to vote: each capacity of them is one span.
      var shares: [Double] = []
      var next = 1 << 41
      for _ in 0..<2 {
        for _ in 0..<capacity {
          let (window, main) = memory.store.segments.withLock(0) { segment in
            (segment.keys(in: .window), segment.keys(in: .probation) + segment.keys(in: .protected))
          }
          // Read one entry of the chosen region (its first, most recently used, key), then
          // insert a new key.
          if let key = (hitsOnWindow ? window : main).first { #expect(memory.value(for: key) != nil) }
          try memory.insert(next, for: next)
          next += 1
        }
        shares.append(Self.share(of: memory))
      }
      if hitsOnWindow {
        #expect(shares == [grown, grown], "a window that earned every hit kept its share")
      } else {
        func relaxed(_ share: Double) -> Double { WindowTarget.minimumShare + (share - WindowTarget.minimumShare) / 2 }
        #expect(shares == [relaxed(grown), relaxed(relaxed(grown))], "each span halves the distance to 1%")
      }
      #expect(memory.invariantViolations.isEmpty)
    }
  }

  /// The votes a span weighs are the ghosts' votes at the layer's inserts: in a recency phase
  /// they ask for a larger window, and a quiet frequency phase brings few.
  @Test("inserts count their ghosts' votes in the span: a recency phase asks for a larger window")
  func insertsCountTheirVotesInTheSpan() throws {
    let setup = Setup.oneSegment
    let capacity = setup.countLimit
    let (settle, _) = Self.recencyPhase(capacity: capacity, settle: 20, measured: 0)
    let memory = try Self.layer(setup)
    // Fill the layer (about 5 capacities of accesses: each key is read 4 times) while the window
    // starts growing, then watch less than a capacity of accesses, so that the span cannot end
    // within them.
    try Self.replay(settle.prefix(6 * capacity), through: memory)
    memory.store.restartSpan()
    try Self.replay(settle.dropFirst(6 * capacity).prefix(capacity - 1), through: memory)
    let up = memory.store.spanVotesUp.load(ordering: .relaxed)
    let down = memory.store.spanVotesDown.load(ordering: .relaxed)
    #expect(up > 0, "\(up) votes up, \(down) down")
    #expect(WindowTarget.votesAskForLargerWindow(up: up, down: down), "\(up) votes up, \(down) down")
    #expect(memory.store.spanInserts.load(ordering: .relaxed) > 0)
  }

  /// The votes of a span: a clear lead for a larger window keeps the window whatever it earned;
  /// votes that balance, or lean toward a smaller window, leave the decision to the hits.
  @Test("a span whose votes ask for a larger window keeps it; balanced votes leave it to the hits")
  func spanVotesThatAskForMoreKeepTheWindow() throws {
    let memory = try Self.layer(Setup.oneSegment)
    let target = try #require(memory.store.windowTarget)
    // (up, down) and whether the span may relax the window.
    let cases: [(up: Int, down: Int, relaxes: Bool)] = [
      (0, 0, true), (30, 0, false), (12, 10, true), (2, 25, true), (61, 39, false), (60, 40, true),
    ]
    for (up, down, relaxes) in cases {
      target.withLock { $0.share = 0.5 }
      memory.store.restartSpan()
      memory.store.spanVotesUp.store(up, ordering: .relaxed)
      memory.store.spanVotesDown.store(down, ordering: .relaxed)
      // The window earned nothing, main everything.
      memory.store.spanMainHits.store(1_000, ordering: .relaxed)
      memory.store.endSpan(entries: Setup.oneSegment.countLimit)
      let share = target.withLock { $0.share }
      #expect((share < 0.5) == relaxes, "\(up) up, \(down) down: share \(share)")
      // The span's counts start over.
      #expect(memory.store.spanVotesUp.load(ordering: .relaxed) == 0)
      #expect(memory.store.spanVotesDown.load(ordering: .relaxed) == 0)
      #expect(memory.store.spanMainHits.load(ordering: .relaxed) == 0)
    }
  }

  @Test(
    "a loop longer than the cache does not grow the window: the layer hits as W-TinyLFU does",
    arguments: [Setup.oneSegment, .automatic]
  )
  func loopsDoNotGrowTheWindow(setup: Setup) throws {
    let capacity = setup.countLimit
    let loop = AdaptiveTrace.loop(keyCount: capacity * 3 / 2, passes: 6, firstKey: 0)
    let adaptive = try Self.layer(setup)
    let tinyLFU = try Self.layer(setup, policy: .windowTinyLFU)
    let adaptiveRatio = try Self.replay(loop, through: adaptive)
    let tinyLFURatio = try Self.replay(loop, through: tinyLFU)
    #expect(Self.share(of: adaptive) < 0.02)
    #expect(abs(adaptiveRatio - tinyLFURatio) <= 1, "adaptive \(adaptiveRatio)%, W-TinyLFU \(tinyLFURatio)%")
    // LRU misses every access of a loop longer than the cache; W-TinyLFU keeps most of a pass.
    #expect(adaptiveRatio > 40)
  }

  /// A segment of fewer than 300 entries has ghosts of the minimum depth (3 exits); with a
  /// depth of 1 they never voted, and a small cache lost 40 points to LRU on recency-biased
  /// traffic (found by these tests and by review). A layer of one such segment is refereed now;
  /// one of several (an explicit segment count) still relies on the ghosts.
  @Test("small segments (four of 150 entries) adapt too")
  func smallSegmentsAdapt() throws {
    let setup = Setup(countLimit: 600, segmentCount: 4)
    let (settle, measured) = Self.recencyPhase(capacity: 600, settle: 40, measured: 8)
    let adaptive = try Self.layer(setup)
    let lru = try Self.layer(setup, policy: .leastRecentlyUsed)
    try Self.replay(settle, through: adaptive)
    try Self.replay(settle.suffix(3 * 600), through: lru)
    let adaptiveRatio = try Self.replay(measured, through: adaptive)
    let lruRatio = try Self.replay(measured, through: lru)
    #expect(Self.share(of: adaptive) > 0.15)
    // Far from W-TinyLFU's 12%; within a few points of LRU (a window of 150 moves in coarse
    // steps).
    #expect(adaptiveRatio >= lruRatio - 10, "adaptive \(adaptiveRatio)%, LRU \(lruRatio)%")
  }

  /// Each segment's maximums for the share it applied: the window `share` of its count limit
  /// (at least 1), protected 80% of the rest; its regions within them.
  static func segmentProblems(of memory: MemoryLayer<Int, Int>) -> [String] {
    var problems: [String] = []
    for index in 0..<memory.store.segments.count {
      memory.store.segments.withLock(index) { segment in
        let admission = segment.admission
        let share = admission.appliedShare
        if share < WindowTarget.minimumShare || share > WindowTarget.maximumShare {
          problems.append("segment \(index): share \(share)")
        }
        // A segment that never took a share keeps the maximums it was created with, for 1%.
        let initial = share == WindowTarget.minimumShare
        if admission.countShare != .max {
          let window = min(max(1, Int(share * Double(admission.countShare))), admission.countShare)
          let protected = Int(Double(admission.countShare - window) * SegmentAdmission.protectedShare)
          let maximums = (admission.windowCountMaximum, admission.protectedCountMaximum)
          if maximums != (window, protected)
            && !(initial && maximums == SegmentAdmission.maximums(share: admission.countShare))
          {
            problems.append(
              "segment \(index): maximums \((admission.windowCountMaximum, admission.protectedCountMaximum)) for \(share)"
            )
          }
        }
        if admission.costShare != .max {
          let window = min(max(1, Int64(share * Double(admission.costShare))), admission.costShare)
          let protected = Int64(Double(admission.costShare - window) * SegmentAdmission.protectedShare)
          let maximums = (admission.windowCostMaximum, admission.protectedCostMaximum)
          if maximums != (window, protected)
            && !(initial && maximums == SegmentAdmission.maximums(share: admission.costShare))
          {
            problems.append(
              "segment \(index): cost maximums \((admission.windowCostMaximum, admission.protectedCostMaximum)) for \(share)"
            )
          }
        }
        if admission.windowCount > admission.windowCountMaximum
          || admission.protectedCount > admission.protectedCountMaximum
          || admission.windowCost > admission.windowCostMaximum
          || admission.protectedCost > admission.protectedCostMaximum
        {
          problems.append("segment \(index): regions over their maximums")
        }
        if admission.windowCount + admission.protectedCount > segment.count {
          problems.append("segment \(index): regions hold more than the segment")
        }
      }
    }
    return problems
  }

  @Test("after a recency phase every segment's window and protected follow the layer's share")
  func segmentsFollowTheShare() throws {
    let setup = Setup.automatic
    let (settle, _) = Self.recencyPhase(capacity: setup.countLimit, settle: 10, measured: 0)
    let adaptive = try Self.layer(setup)
    try Self.replay(settle, through: adaptive)
    let share = Self.share(of: adaptive)
    #expect(share > 0.05)
    #expect(Self.segmentProblems(of: adaptive).isEmpty, "\(Self.segmentProblems(of: adaptive))")
    // A segment takes the layer's latest share with its next new key.
    for key in (1 << 40)..<((1 << 40) + 200) { try adaptive.insert(key, for: key) }
    let latest = Self.share(of: adaptive)
    for index in 0..<adaptive.store.segments.count {
      #expect(adaptive.store.segments.withLock(index) { $0.admission.appliedShare } == latest)
      let windowMaximum = adaptive.store.segments.withLock(index) { $0.admission.windowCountMaximum }
      #expect(windowMaximum == max(1, Int(latest * 300)), "segment \(index)")
    }
    #expect(adaptive.invariantViolations.isEmpty)
  }
}
