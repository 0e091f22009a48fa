import Testing

@testable import AsyncCache

/// A shadow must predict exactly what a segment running its expert keeps: the referee's choice
/// is only as good as that prediction.
@Suite struct ShadowCacheTests {
  /// A segment of `capacity` entries running `expert`, as a layer's segment does after the
  /// referee chose it.
  static func segment(capacity: Int, expert: PolicyExpert, seed: UInt64) -> MemorySegment<Int, Int> {
    var segment = MemorySegment<Int, Int>(
      admission: SegmentAdmission(countShare: capacity, costShare: .max, adaptation: .ghosts, seed: seed))
    segment.admission.appliedShare = expert.windowShare
    segment.admission.appliedProtectedShare = expert.protectedShare
    segment.admission.admissionRule = expert.admission
    segment.sizeWindow()
    return segment
  }

  /// Accesses `key` in `segment` as a layer does (a hit moves it, a miss inserts it and evicts
  /// while over `capacity`), counts the use in the sketch, and returns whether it hit.
  static func access(_ key: Int, in segment: inout MemorySegment<Int, Int>, capacity: Int) -> Bool {
    let hash = key.hashValue
    if let slot = segment.find(key, hash: hash) {
      segment.recordHit(slot, hash: hash)
      segment.settleHits()
      segment.admission.countPendingUses()
      return true
    }
    let written = segment.append(MemoryNode(key: key, value: key, expiry: .max, cost: 0), hash: hash)
    var count = segment.count
    let overLimit = { count > capacity ? EvictionReason.countLimit : nil }
    segment.evict(sparing: UInt32(truncatingIfNeeded: written), while: overLimit, { _, _ in count -= 1 })
    segment.admission.countPendingUses()
    return false
  }

  /// Keys with a skewed popularity, a loop, a scan and bursts of new keys read soon again: every
  /// move of the policy (promotions, demotions, duels won and lost, ties) comes up.
  static func keys(count: Int, keySpace: Int, seed: UInt64) -> [Int] {
    var random = SeededGenerator(seed: seed)
    var keys: [Int] = []
    var next = keySpace
    while keys.count < count {
      switch random.next() % 4 {
      case 0:
        for _ in 0..<50 { keys.append(Int(random.next() % UInt64(max(1, keySpace / 8)))) }
      case 1:
        keys.append(contentsOf: 0..<keySpace)
      case 2:
        for _ in 0..<30 {
          keys.append(next)
          keys.append(next)
          next += 1
        }
      default:
        for _ in 0..<50 { keys.append(Int(random.next() % UInt64(keySpace))) }
      }
    }
    return withDistinctTags(Array(keys.prefix(count)))
  }

  /// `keys`, where a key whose tag (in this process's hashing) is another's is replaced by a new
  /// key: a shadow tells keys apart by their tags, the segment by the keys, and a collision (one
  /// in a few thousand runs) is not what the comparison is about.
  static func withDistinctTags(_ keys: [Int]) -> [Int] {
    var owners: [UInt32: Int] = [:]
    var replacements: [Int: Int] = [:]
    var fresh = 1 << 40
    return keys.map { key in
      if let replacement = replacements[key] { return replacement }
      var chosen = key
      while let owner = owners[MemorySegment<Int, Int>.tag(of: chosen.hashValue)], owner != chosen {
        chosen = fresh
        fresh += 1
      }
      owners[MemorySegment<Int, Int>.tag(of: chosen.hashValue)] = chosen
      replacements[key] = chosen
      return chosen
    }
  }

  @Test(
    "a shadow hits, misses and keeps exactly what a segment running its expert does",
    arguments: PolicyExpert.all.indices
  )
  func shadowsMatchTheSegment(expert: Int) {
    for capacity in [1, 2, 7, 64, 300] {
      let expert = PolicyExpert.all[expert]
      var segment = Self.segment(capacity: capacity, expert: expert, seed: 42)
      // The same seed: a warm candidate that loses wins one time in 128, in both or neither.
      let shadows = ShadowSet(capacity: capacity, experts: [expert], seed: 42 &- 1)
      let shadow = shadows.shadows
      let keys = Self.keys(count: 6_000, keySpace: capacity * 3 / 2 + 2, seed: UInt64(capacity))
      var mismatches: [String] = []
      for (position, key) in keys.enumerated() where mismatches.isEmpty {
        let segmentHit = Self.access(key, in: &segment, capacity: capacity)
        let tag = MemorySegment<Int, Int>.tag(of: key.hashValue)
        let shadowHit = shadow.pointee.access(tag, sketch: segment.admission.sketch)
        if segmentHit != shadowHit {
          mismatches.append(
            "\(expert.name) at \(capacity): access \(position) to \(key) hit \(segmentHit), shadow \(shadowHit)")
        }
        if shadow.pointee.count != segment.count {
          mismatches.append(
            "\(expert.name) at \(capacity): after access \(position), \(shadow.pointee.count) keys, segment \(segment.count)"
          )
        }
      }
      let resident = segment.liveSlots.map { segment.nodes[$0].key }
      for key in resident where !shadow.pointee.contains(MemorySegment<Int, Int>.tag(of: key.hashValue)) {
        mismatches.append("\(expert.name) at \(capacity): the shadow lacks \(key)")
      }
      for region in SegmentRegion.allCases where shadow.pointee.count(in: region) != segment.keys(in: region).count {
        mismatches.append(
          "\(expert.name) at \(capacity): \(region) holds \(shadow.pointee.count(in: region)), segment \(segment.keys(in: region).count)"
        )
      }
      #expect(mismatches.isEmpty, "\(mismatches.prefix(3))")
      #expect(segment.invariantViolations().isEmpty)
      withExtendedLifetime(shadows) {}
    }
  }

  @Test("a shadow's index finds every key it holds and none it evicted, through any churn")
  func indexSurvivesChurn() {
    // Tags chosen to collide on their home slots: the backward-shift deletion must keep every
    // displaced key reachable.
    let sketch = FrequencySketch(maximumSize: 64)
    let shadows = ShadowSet(capacity: 48, experts: [PolicyExpert.all[3]], seed: 0)
    let shadow = shadows.shadows
    var random = SeededGenerator(seed: 7)
    var recent: [UInt32] = []
    for step in 0..<20_000 {
      let tag =
        step % 3 == 0
        ? UInt32(truncatingIfNeeded: random.next() % 64) << 26 : UInt32(truncatingIfNeeded: random.next() % 200)
      _ = shadow.pointee.access(tag, sketch: sketch)
      recent.removeAll { $0 == tag }
      recent.append(tag)
    }
    // Under the recency expert (a window of 99%) the shadow holds about the most recent keys;
    // it holds exactly its capacity, every one reachable.
    #expect(shadow.pointee.count == 48)
    let held = recent.filter { shadow.pointee.contains($0) }
    #expect(held.count == 48)
    #expect(recent.suffix(40).allSatisfy { shadow.pointee.contains($0) })
    withExtendedLifetime(shadows) {}
  }
}
