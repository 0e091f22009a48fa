import Testing

@testable import AsyncCache

/// A generator that always returns one value: it decides the random admission of a warm
/// candidate (`value & 127 == 0` admits).
private struct ConstantGenerator: RandomNumberGenerator {
  var value: UInt64
  mutating func next() -> UInt64 { value }
}

/// W-TinyLFU's regions, admission and weights, and random operations against a simple model.
///
/// Keys hash differently in every process, so the behaviour tests leave a wide margin to the
/// sketch's estimates; the model test checks invariants, which hold whatever the hashes.
@Suite struct WTinyLFUPolicyTests {
  typealias Policy = WTinyLFUPolicy<Int, SeededGenerator>

  @Test(
    "the window is 1% of the capacity and protected 80% of the rest",
    arguments: [(0, 0, 0), (1, 1, 0), (10, 1, 7), (100, 1, 79), (1_000, 10, 792), (50_000, 500, 39_600)]
  )
  func regionSizes(maximumWeight: Int, window: Int, protected: Int) {
    let policy = Policy(maximumWeight: maximumWeight, random: SeededGenerator(seed: 1))
    #expect(policy.windowMaximum == window)
    #expect(policy.protectedMaximum == protected)
  }

  @Test("new keys enter the window; its overflow moves to probation while main has room")
  func windowOverflowGoesToProbation() {
    var policy = Policy(maximumWeight: 10, random: SeededGenerator(seed: 1))
    for key in 0..<10 { #expect(policy.insert(key, weight: 1).isEmpty) }
    #expect(policy.keys(in: .window) == [9])
    #expect(policy.keys(in: .probation) == Array(0..<9))
    #expect(policy.keys(in: .protected).isEmpty)
    #expect(policy.totalWeight == 10)
    #expect(policy.invariantViolations().isEmpty)
  }

  @Test("a used probation entry is promoted; protected overflow is demoted to probation's MRU end")
  func promotionAndDemotion() {
    var policy = Policy(maximumWeight: 10, random: SeededGenerator(seed: 1))
    for key in 0..<10 { policy.insert(key, weight: 1) }
    for key in 0..<8 {
      let hit = policy.recordAccess(key)
      #expect(hit)
    }
    #expect(policy.keys(in: .protected) == Array(1..<8), "protected holds 7; the oldest, 0, was demoted")
    #expect(policy.keys(in: .probation) == [8, 0])
    #expect(policy.keys(in: .window) == [9])
    policy.recordAccess(9)
    policy.recordAccess(3)
    #expect(policy.keys(in: .window) == [9])
    #expect(policy.keys(in: .protected) == [1, 2, 4, 5, 6, 7, 3], "a protected hit moves to the MRU end")
    let hit = policy.recordAccess(99)
    #expect(!hit, "a miss changes nothing")
    #expect(policy.invariantViolations().isEmpty)
  }

  @Test("a key used now and then survives a scan of one-hit keys that flushes an LRU cache")
  func scanResistance() {
    var policy = Policy(maximumWeight: 10, random: SeededGenerator(seed: 1))
    var lru: [Int] = []  // least recently used first, capacity 10
    func lruInsert(_ key: Int) {
      lru.removeAll { $0 == key }
      lru.append(key)
      if lru.count > 10 { lru.removeFirst() }
    }
    let hot = -1
    policy.insert(hot, weight: 1)
    lruInsert(hot)
    for _ in 0..<3 { policy.recordAccess(hot) }
    var lruLostHot = false
    for key in 0..<1_000 {
      let evicted = policy.insert(key, weight: 1)
      #expect(!evicted.contains(hot))
      lruInsert(key)
      if !lru.contains(hot) { lruLostHot = true }
      if key % 15 == 14 {
        let hit = policy.recordAccess(hot)
        #expect(hit)
        if lru.contains(hot) { lruInsert(hot) }
      }
    }
    #expect(policy.contains(hot))
    #expect(policy.region(of: hot) == .protected)
    #expect(lruLostHot, "the same workload evicts the key from an LRU cache of the same size")
    #expect(policy.invariantViolations().isEmpty)
  }

  @Test("a new key cannot displace a more popular probation victim")
  func coldCandidateLosesTheDuel() {
    // A generator that never grants a random admission.
    var policy = WTinyLFUPolicy<Int, ConstantGenerator>(maximumWeight: 10, random: ConstantGenerator(value: 1))
    let victim = -1
    policy.insert(victim, weight: 1)
    for _ in 0..<8 { policy.recordAccess(victim) }  // in the window: no promotion
    for key in 0..<9 { policy.insert(key, weight: 1) }
    #expect(policy.keys(in: .probation).first == victim, "the popular key is probation's LRU victim")
    for key in 9..<30 {
      let evicted = policy.insert(key, weight: 1)
      #expect(evicted == [key - 1], "the candidate leaving the window is less popular and rejected")
    }
    #expect(policy.region(of: victim) == .probation)
    #expect(policy.invariantViolations().isEmpty)
  }

  @Test(
    "a warm candidate that is not more popular enters only by the random admission",
    arguments: [(UInt64(0), true), (1, false), (128, true)]
  )
  func warmCandidateRandomAdmission(random: UInt64, admitted: Bool) {
    var policy = WTinyLFUPolicy<Int, ConstantGenerator>(maximumWeight: 10, random: ConstantGenerator(value: random))
    let victim = -1
    let candidate = -2
    policy.insert(victim, weight: 1)
    for _ in 0..<10 { policy.recordAccess(victim) }  // frequency 11
    for key in 0..<9 { policy.insert(key, weight: 1) }
    policy.insert(candidate, weight: 1)
    for _ in 0..<7 { policy.recordAccess(candidate) }  // frequency 8: warm, less than 11
    let evicted = policy.insert(100, weight: 1)
    #expect(evicted == [admitted ? victim : candidate])
    #expect(policy.contains(candidate) == admitted)
    #expect(policy.invariantViolations().isEmpty)
  }

  @Test("an entry heavier than the capacity is rejected at once, on insert and on update")
  func overweightEntryIsRejected() {
    var policy = Policy(maximumWeight: 10, random: SeededGenerator(seed: 1))
    #expect(policy.insert(1, weight: 3).isEmpty)
    #expect(policy.insert(2, weight: 3).isEmpty)
    #expect(policy.insert(3, weight: 11) == [3])
    #expect(!policy.contains(3))
    #expect(policy.totalWeight == 6)
    #expect(policy.update(1, weight: 11) == [1])
    #expect(!policy.contains(1))
    #expect(policy.totalWeight == 3)
    policy.remove(2)
    #expect(policy.insert(4, weight: 10).isEmpty, "exactly the capacity fits")
    #expect(policy.totalWeight == 10)
    #expect(policy.invariantViolations().isEmpty)
  }

  @Test("a candidate that beats the victim next to it goes on with its own neighbour, not the evicted one")
  func candidateNextToEvictedVictim() {
    var policy = Policy(maximumWeight: 10, random: SeededGenerator(seed: 1))
    policy.insert(-1, weight: 2)  // heavier than the window: straight to probation
    policy.recordAccess(-1)  // protected, out of the way
    policy.insert(0, weight: 1)
    for _ in 0..<4 { policy.recordAccess(0) }  // popular, still in the window
    policy.insert(1, weight: 1)
    policy.insert(2, weight: 1)
    policy.remove(2)  // the window is empty; key 1 holds the last slot
    #expect(policy.keys(in: .probation) == [0, 1])
    // Key 0 grows past protected's size: it stays in probation, at the MRU end, next to 1.
    let evicted = policy.update(0, weight: 9)
    #expect(evicted == [1, -1], "0 beats 1; 0 was just written and is spared, so protected's -1 goes next")
    #expect(policy.keys(in: .protected).isEmpty)
    #expect(policy.keys(in: .probation) == [0])
    #expect(policy.totalWeight == 9)
    #expect(policy.invariantViolations().isEmpty)
  }

  @Test("an entry of weight 0 is never evicted for size: evicting it would free nothing")
  func zeroWeightEntriesStay() {
    var policy = Policy(maximumWeight: 10, random: SeededGenerator(seed: 1))
    policy.insert(-1, weight: 0)
    for key in 0..<100 {
      let evicted = policy.insert(key, weight: 1)
      #expect(!evicted.contains(-1))
    }
    #expect(policy.contains(-1))
    #expect(policy.count == 11)
    #expect(policy.totalWeight == 10)
    #expect(policy.invariantViolations().isEmpty)
  }

  @Test("weights are tracked per region through updates and removals")
  func weightsFollowUpdates() {
    var policy = Policy(maximumWeight: 100, random: SeededGenerator(seed: 1))
    for key in 0..<5 { policy.insert(key, weight: 10) }
    #expect(policy.weight(of: .window) == 0, "each entry is heavier than the window and moved to probation")
    #expect(policy.weight(of: .probation) == 50)
    policy.recordAccess(0)
    #expect(policy.weight(of: .protected) == 10)
    policy.update(0, weight: 30)
    #expect(policy.weight(of: .protected) == 30)
    #expect(policy.weight(of: 0) == 30)
    policy.insert(1, weight: 20)
    #expect(policy.weight(of: .protected) == 50, "an update is a use: probation promotes to protected")
    let removed = policy.remove(0)
    let removedAgain = policy.remove(0)
    #expect(removed && !removedAgain)
    #expect(policy.weight(of: .protected) == 20)
    #expect(policy.totalWeight == 50)
    #expect(policy.update(0, weight: 1).isEmpty, "updating an absent key does nothing")
    #expect(policy.invariantViolations().isEmpty)
  }

  @Test(
    "random inserts, uses, updates and removals keep every invariant of a simple model",
    arguments: [(1, 1), (5, 3), (10, 1), (50, 2), (100, 1), (200, 4), (300, 5)]
  )
  func model(maximumWeight: Int, seed: UInt64) throws {
    var random = SeededGenerator(seed: seed)
    let weighted = seed % 2 == 0
    var policy = Policy(maximumWeight: maximumWeight, random: SeededGenerator(seed: seed &+ 1))
    var model: [Int: Int] = [:]  // resident key -> weight
    let keySpace = 3 * maximumWeight + 5

    func randomWeight() -> Int {
      guard weighted else { return 1 }
      switch Int.random(in: 0..<20, using: &random) {
      case 0: return 0
      case 1: return maximumWeight + Int.random(in: 1...3, using: &random)
      case 2: return maximumWeight
      default: return Int.random(in: 1...Swift.max(1, maximumWeight / 4), using: &random)
      }
    }

    for step in 0..<3_000 {
      let key = Int.random(in: 0..<keySpace, using: &random)
      var evicted: [Int] = []
      var weights = model  // weights before the operation, for the eviction checks
      switch Int.random(in: 0..<10, using: &random) {
      case 0..<4:
        let weight = randomWeight()
        evicted = policy.insert(key, weight: weight)
        weights[key] = weight
        model[key] = weight
      case 4..<7:
        let hit = policy.recordAccess(key)
        #expect(hit == (model[key] != nil))
      case 7..<9:
        let weight = randomWeight()
        evicted = policy.update(key, weight: weight)
        if model[key] != nil {
          weights[key] = weight
          model[key] = weight
        } else {
          #expect(evicted.isEmpty)
        }
      default:
        let removed = policy.remove(key)
        #expect(removed == (model.removeValue(forKey: key) != nil))
      }

      #expect(Set(evicted).count == evicted.count, "step \(step): a key is evicted once")
      for gone in evicted {
        #expect(model.removeValue(forKey: gone) != nil, "step \(step): \(gone) was evicted but not resident")
        #expect(!policy.contains(gone), "step \(step): \(gone) was evicted but is still resident")
      }
      if let last = evicted.last, let weight = weights[last] {
        #expect(policy.totalWeight + weight > maximumWeight, "step \(step): evicted more than needed")
      }

      let violations = policy.invariantViolations()
      try #require(violations.isEmpty, "step \(step): \(violations)")
      #expect(policy.count == model.count)
      #expect(policy.totalWeight == model.values.reduce(0, +))
      #expect(policy.totalWeight <= maximumWeight)
      let regions = Policy.Region.allCases.map { Set(policy.keys(in: $0)) }
      #expect(regions.reduce(0) { $0 + $1.count } == model.count)
      #expect(regions.reduce(Set<Int>()) { $0.union($1) } == Set(model.keys), "step \(step)")
      for region in Policy.Region.allCases {
        let members = policy.keys(in: region)
        #expect(policy.weight(of: region) == members.reduce(0) { $0 + model[$1, default: 0] })
      }
      for (key, weight) in model { #expect(policy.weight(of: key) == weight) }
    }
  }
}
