// The memory layer's storage where `Int` has 32 bits, as on watchOS devices (arm64_32), which
// cannot run here: .ci/check-32bit compiles Memory/MemorySegment.swift and its extensions, its node types and Memory/Policy
// with this file as Embedded Swift for wasm32, and runs it with WasmKit.
//
// It drives one segment the way MemoryStore does (lookups, inserts with costs, evictions while
// over a limit, removals) with seeded random operations, and checks every invariant after each
// one, under LRU, W-TinyLFU with the ghosts' window and W-TinyLFU chosen by a referee (whose
// shadows link their nodes with 16-bit indices), with small costs and with costs up to
// Int32.max whose sums do not fit 32 bits. Half of all keys have a hash tag above Int32.max.

/// The store's global totals (atomics in MemoryStore), kept beside the one segment.
struct Totals {
  var count = 0
  var cost: Int64 = 0
}

/// The policies exercised.
enum Mode {
  case leastRecentlyUsed
  case ghosts
  case referee

  var name: String {
    switch self {
    case .leastRecentlyUsed: "LRU"
    case .ghosts: "adaptive W-TinyLFU (ghosts)"
    case .referee: "adaptive W-TinyLFU (referee)"
    }
  }
}

/// Runs `steps` random operations; returns whether every invariant held after each.
func exercise(mode: Mode, countLimit: Int, costLimit: Int64, largestCost: Int64, steps: Int) -> Bool {
  var random = SplitMix64(seed: 0x5EED)
  let tinyLFU = mode != .leastRecentlyUsed
  let admission: SegmentAdmission =
    switch mode {
    case .leastRecentlyUsed: SegmentAdmission()
    case .ghosts: SegmentAdmission(countShare: countLimit, costShare: costLimit, adaptation: .ghosts, seed: 42)
    case .referee: SegmentAdmission(countShare: countLimit, costShare: costLimit, adaptation: .referee, seed: 42)
    }
  var segment = MemorySegment<Int, Int>(admission: admission)
  // The reuse sampler of the hit-ratio curve, as MemoryStore runs it, with a key sample of every
  // key counted from 8 (so that the check sees both counted and modelled windows).
  segment.sampleCountdown = segment.sampler.start(seed: 7, segments: 1)
  let keys = KeySample(
    capacity: countLimit, parameters: .init(minimumScale: 1, countedFrom: 8, countedFromCapacities: 0))
  segment.keySampleThreshold = keys.threshold
  var totals = Totals()
  var target = WindowTarget()
  var hits = 0
  for step in 0..<steps {
    let key = Int(truncatingIfNeeded: random.next() % UInt64(countLimit * 3))
    let hash = key.hashValue
    let operation = random.next() % 10
    // As MemoryStore's `withLock` does: everything but a lookup settles the pending hits first.
    if operation >= 5 { segment.settleHits() }
    switch operation {
    case 0..<5:
      if let slot = segment.find(key, hash: hash) {
        segment.recordHit(slot, hash: hash)
        segment.sampleHit(key, hash: hash, at: slot, keys: keys)
        hits += 1
      } else {
        segment.misses &+= 1
        segment.sampleMiss(key, hash: hash, keys: keys)
      }
    case 5..<9:
      let cost = Int64(random.next() % UInt64(largestCost + 1))
      let written: Int
      if let slot = segment.find(key, hash: hash) {
        let oldCost = segment.nodes[slot].cost
        segment.nodes[slot].cost = cost
        segment.totalCost &+= cost &- oldCost
        totals.cost += cost - oldCost
        segment.recordRewrite(slot, hash: hash, oldCost: oldCost)
        written = slot
      } else {
        written = segment.append(MemoryNode(key: key, value: step, expiry: .max, cost: cost), hash: hash)
        segment.markInserted(written, hash: hash)
        totals.count += 1
        totals.cost += cost
        // The ghosts' vote, counted into the layer's share as MemoryStore does.
        if mode == .ghosts,
          target.count(vote: segment.windowVote(tag: MemorySegment<Int, Int>.tag(of: hash)), entries: countLimit)
        {
          segment.applyWindowShare(target.share)
        }
      }
      let overLimit = { () -> EvictionReason? in
        if totals.count > countLimit { return .countLimit }
        if totals.cost > costLimit { return .costLimit }
        return nil
      }
      segment.evict(sparing: UInt32(truncatingIfNeeded: written), while: overLimit) { node, _ in
        totals.count -= 1
        totals.cost -= node.cost
      }
    default:
      if let slot = segment.find(key, hash: hash) {
        let node = segment.remove(slot: slot)
        totals.count -= 1
        totals.cost -= node.cost
      }
    }
    guard totals.count == segment.count, totals.cost == segment.totalCost, totals.cost <= costLimit else {
      print(
        "step \(step): the totals say \(totals.count), \(totals.cost); the segment \(segment.count), \(segment.totalCost)"
      )
      return false
    }
    // The lists are checked once settled: after every operation but a lookup, whose hits wait
    // (up to 16 in a row) as they do in the store.
    if operation < 5 { continue }
    let problems = segment.invariantViolations()
    guard problems.isEmpty else {
      print("step \(step): \(problems.count) invariant violations, the first: \(problems[0])")
      return false
    }
  }
  var window = 0
  var probation = 0
  var protected = 0
  for slot in segment.liveSlots {
    switch segment.nodes[slot].region {
    case .window: window += 1
    case .probation: probation += 1
    case .protected: protected += 1
    }
  }
  print(
    "  \(mode.name), costs up to \(largestCost): \(segment.count) entries costing \(segment.totalCost) "
      + "(window \(window), probation \(probation), protected \(protected)), \(hits) hits")
  // Every node's cost survived its watch bit (the invariants sum the costs), and reuses were timed.
  guard segment.sampler.histogram.total > 0, segment.sampler.distances.total > 0 else {
    print("the reuse sampler timed no reuse, or counted no window")
    return false
  }
  // The sampler's misses and hits on entries inserted unasked for are part of its lookups
  // (UInt64 on every platform; repeated hits are the rest), and some hits were repeated.
  let sampler = segment.sampler
  let lookups = sampler.lookups(countdown: segment.sampleCountdown)
  let repeated = sampler.repeatedHits(countdown: segment.sampleCountdown)
  guard repeated > 0, repeated &+ sampler.misses &+ sampler.unaskedHits == lookups,
    sampler.repeated.modelled.total <= sampler.histogram.total
  else {
    print(
      "the sampler counted \(lookups) lookups: \(sampler.misses) misses, \(sampler.unaskedHits) unasked hits, "
        + "\(repeated) repeated")
    return false
  }
  guard !tinyLFU || (probation > 0 && protected > 0) else {
    print("W-TinyLFU left probation or protected empty")
    return false
  }
  return true
}

@_cdecl("run")
func run() -> Int32 {
  let maximumCost = MemoryNode<Int, Int>.maximumCost
  print("Int has \(Int.bitWidth) bits; the largest cost of an entry is \(maximumCost)")
  var passed = true
  if maximumCost != Int.max {
    print("the largest cost should be Int.max here")
    passed = false
  }
  // The reuse histogram's buckets cover every reuse time a 32-bit Int holds, in order.
  var next = 0
  for index in 0..<ReuseHistogram.bucketCount - 1 {
    let (start, size) = ReuseHistogram.span(of: index)
    guard let lower = Int(exactly: start), let width = Int(exactly: size), width > 0,
      lower.addingReportingOverflow(width).overflow == false
    else { break }
    let first = ReuseHistogram.bucket(of: lower)
    let last = ReuseHistogram.bucket(of: lower + width - 1)
    if lower != next || first != index || last != index {
      print("reuse bucket \(index) covers \(lower) to \(lower + width - 1), expected from \(next)")
      passed = false
    }
    next = lower + width
  }
  if !(0..<ReuseHistogram.bucketCount).contains(ReuseHistogram.bucket(of: .max)) || next <= Int(Int32.max / 2) {
    print("the reuse buckets stop at \(next), or Int.max falls outside them")
    passed = false
  }
  // The curve reads every bucket, the last ones past 2^31 included, as Doubles: each bucket's
  // span starts in that bucket.
  for index in 0..<ReuseHistogram.bucketCount
  where ReuseHistogram.bucket(of: ReuseHistogram.span(of: index).lower) != index {
    print("reuse bucket \(index) does not hold the start of its span")
    passed = false
  }
  // A loop over 1,000 keys, watched in two segments of unequal shares: LRU hits every lookup
  // from 1,000 entries, none below.
  func loop(_ segmentTime: Int, count: Int) -> [Int] {
    var counts = [Int](repeating: 0, count: ReuseHistogram.bucketCount)
    counts[ReuseHistogram.bucket(of: segmentTime)] = count
    return counts
  }
  let segments = [
    HitRatioCurve.SegmentReuse(share: 0.75, reuseTimes: loop(749, count: 300), modelled: loop(749, count: 300)),
    HitRatioCurve.SegmentReuse(share: 0.25, reuseTimes: loop(249, count: 100), modelled: loop(249, count: 100)),
  ]
  if let curve = HitRatioCurve(capacity: 2_000, segments: segments, distances: [], unresolved: 0, sampledLookups: 400),
    let small = curve.hitRatio(atScale: 0.25), let large = curve.hitRatio(atScale: 1), small < 0.01, large > 0.99
  {
  } else {
    print("the hit-ratio curve of a loop over 1,000 keys is wrong at 500 or 2,000 entries")
    passed = false
  }
  // The strata's weights: a sample with half its watches ended by a repeated hit, in a layer
  // that counted 60% of its lookups so.
  let weights = HitRatioCurve.StratumWeights(
    lookups: 10_000, repeatedHits: 6_000, samples: 100, repeatedSamples: 50, watches: 100, repeatedWatches: 50)
  if abs(weights.repeated - 1.2) > 1e-9 || abs(weights.other - 0.8) > 1e-9 {
    print("the strata's weights are \(weights.repeated) and \(weights.other), not 1.2 and 0.8")
    passed = false
  }
  // The key sample's positions and counts, against a count of every key since, through
  // compactions (the marks' words and blocks, the sparse positions).
  var sample = KeySampleState(horizon: 400)
  var accessed: [UInt64] = []
  var random = SplitMix64(seed: 3)
  for step in 0..<150_000 {
    let id = random.next() % 10 == 0 ? UInt64(1_000_000 + step) : random.next() % 300
    sample.access(id, horizon: 400)
    accessed.append(id)
    guard step % 9_973 == 0 else { continue }
    for back in [0, 1, 64, 513, 5_000, 70_000] where back <= accessed.count {
      let start = accessed.count - back
      var seen: [UInt64: Bool] = [:]
      for id in accessed[start...] { seen[id] = true }
      let counted = sample.keys(since: start)
      if counted.map({ $0 != seen.count }) ?? (seen.count < 400) {
        print("the key sample counted \(counted ?? -1) keys since \(start), where \(seen.count) were")
        passed = false
      }
    }
  }
  for mode in [Mode.leastRecentlyUsed, .ghosts, .referee] {
    passed = exercise(mode: mode, countLimit: 200, costLimit: 5_000, largestCost: 100, steps: 6_000) && passed
    passed =
      exercise(mode: mode, countLimit: 200, costLimit: Int64(1) << 36, largestCost: Int64(Int32.max), steps: 6_000)
      && passed
  }
  print(passed ? "32-bit check passed" : "32-bit check FAILED")
  return passed ? 0 : 1
}
