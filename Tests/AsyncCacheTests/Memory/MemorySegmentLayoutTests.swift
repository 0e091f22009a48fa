import Testing

@testable import AsyncCache

/// The bit layouts of the memory layer's storage, which must not depend on the width of `Int`:
/// it has 32 bits on watchOS devices (arm64_32), where `1 << 43` is 0. These run on 64 bits
/// here; `.ci/check-32bit` runs the storage itself with a 32-bit `Int`.
@Suite("MemorySegment bit layout")
struct MemorySegmentLayoutTests {
  typealias Node = MemoryNode<Int, Int>
  typealias Segment = MemorySegment<Int, Int>

  @Test(
    "cost, watch flag, unasked flag, stamp, region and metadata flag share one UInt64 on every platform: bits 0..<43, 43, 44, 45..<61, 61..<63, 63"
  )
  func layoutIsFixedWidth() {
    let node = Node(key: 0, value: 0, expiry: .max, cost: 0)
    #expect(type(of: node.costAndRegion) == UInt64.self)
    #expect(type(of: node.cost) == Int64.self)
    #expect(Node.costMask == 0x07FF_FFFF_FFFF)
    #expect(Node.watchBit == 1 << 43 && Node.watchBit & (Node.costMask | Node.stampMask) == 0)
    #expect(Node.unaskedBit == 1 << 44 && Node.unaskedBit & (Node.costMask | Node.stampMask | Node.watchBit) == 0)
    #expect(Node.stampShift == 45 && Node.stampMask == 0x1FFF_E000_0000_0000)
    #expect(Node.regionShift == 61)
    #expect(Node.costMask & Node.stampMask == 0 && Node.stampMask & (3 << Node.regionShift) == 0)
    #expect(Node.metadataBit == 1 << 63)
    let highest = SegmentRegion.allCases.map { UInt64($0.rawValue) }.max() ?? 0
    #expect(highest <= 3 && (highest << Node.regionShift) & Node.costMask == 0, "every region fits above the cost")
  }

  /// Costs at the edges of 32-bit arithmetic, and the largest cost the layout holds.
  static let boundaryCosts: [Int64] = [
    0, 1, Int64(Int32.max), Int64(Int32.max) + 1, Int64(UInt32.max), Int64(UInt32.max) + 1, 1 << 40,
    Int64(MemoryNode<Int, Int>.costMask),
  ]

  @Test("every region keeps every cost and stamp, and each keeps the others", arguments: SegmentRegion.allCases)
  func regionAndCostRoundTrip(region: SegmentRegion) {
    for cost in Self.boundaryCosts {
      for stamp: UInt16 in [0, 1, 0x8001, .max] {
        for (hasMetadata, isWatched, isUnasked) in [
          (false, false, false), (true, false, true), (false, true, false), (true, true, true), (false, true, true),
        ] {
          var node = Node(key: 0, value: 0, expiry: .max, cost: cost)
          node.hasMetadata = hasMetadata
          node.isWatched = isWatched
          node.isUnasked = isUnasked
          node.aliveStamp = stamp
          node.region = region
          #expect(node.cost == cost)
          #expect(node.region == region)
          #expect(node.aliveStamp == stamp, "a new region leaves the stamp alone")
          #expect(node.hasMetadata == hasMetadata)
          #expect(
            node.costAndRegion
              == (hasMetadata ? 1 << 63 : 0) | UInt64(region.rawValue) << 61 | UInt64(stamp) << 45
              | (isUnasked ? 1 << 44 : 0) | (isWatched ? 1 << 43 : 0) | UInt64(cost))
          #expect(node.concernsSampler == (isWatched || isUnasked))
          node.cost = 7
          node.cost = cost
          #expect(node.region == region && node.aliveStamp == stamp, "a new cost leaves the other bits alone")
          node.aliveStamp = 0
          node.aliveStamp = stamp
          #expect(node.cost == cost && node.region == region && node.hasMetadata == hasMetadata)
          node.isWatched.toggle()
          node.isWatched.toggle()
          node.isUnasked.toggle()
          node.isUnasked.toggle()
          #expect(node.cost == cost && node.aliveStamp == stamp && node.isWatched == isWatched)
          #expect(node.isUnasked == isUnasked && node.region == region)
        }
      }
    }
  }

  @Test("the largest cost is 2^43 - 1 where Int has 64 bits, Int.max where it has 32")
  func maximumCost() {
    #expect(Node.maximumCost == Int(clamping: (UInt64(1) << 43) - 1))
    #expect(Int64(Node.maximumCost) >= Int64(Int32.max))
    #expect(UInt64(Node.maximumCost) <= Node.costMask)
  }

  @Test("every tag has its home group inside a table of any length, and a control byte that marks a live slot")
  func tagPositions() {
    let tags: [UInt32] = [0, 1, 2, 0x7FFF_FFFF, 0x8000_0000, 0x8000_0007, 0xFFFF_FFFF]
    for tag in tags {
      for count in [1, 6, 7, 8, 255, 41_667, 1 << 20] {
        let position = Segment.position(of: tag, count: count)
        #expect((0..<count).contains(position))
        #expect(Segment.next(after: count - 1, count: count) == 0)
      }
      let control = Segment.control(of: tag)
      #expect(control >= 0x80 && control != Segment.empty)
    }
  }

  @Test("a table holds at most 4/5 live slots, in whole groups, and as many nodes as asked for")
  func tableSizes() {
    for capacity in [1, 4, 12, 13, 100, 4_096, 31_250, 1_000_000] {
      let slots = Segment.slotCount(forCapacity: capacity)
      #expect(slots % Segment.groupLength == 0)
      #expect(Segment.capacity(forSlots: slots) >= capacity)
      #expect(Segment.capacity(forSlots: slots) * 5 <= slots * 4)
    }
  }

  /// The table alone (under LRU: the policy's lists do not change where nodes live).
  @Test("a full table under churn keeps every key reachable and is never rebuilt")
  func churnNeverRebuilds() {
    let share = 3_000
    var segment = Segment()
    var key = 0
    // Filled to the table's capacity (4/5 of its slots), so that groups fill up and nodes spill
    // past them.
    while segment.count < share || segment.count < segment.capacity {
      segment.append(Node(key: key, value: key, expiry: .max, cost: 1), hash: key.hashValue)
      key += 1
    }
    let slots = segment.slotCount
    let rebuilds = segment.rebuilds
    var mostPassed = 0
    for step in 0..<40_000 {
      // One leaves, one comes: the count stays at the capacity.
      #expect(segment.removeFirstVictim() != nil)
      segment.append(Node(key: key, value: key, expiry: .max, cost: 1), hash: key.hashValue)
      key += 1
      if step % 4_999 == 0 {
        #expect(segment.invariantViolations().isEmpty)
        for group in 0..<segment.groupCount {
          mostPassed = max(mostPassed, Int(segment.overflowCount(of: group)))
        }
      }
    }
    #expect(mostPassed > 0, "full groups made nodes spill past them")
    #expect(mostPassed < Int(Segment.saturatedOverflow), "no count saturated")
    #expect(segment.rebuilds == rebuilds, "removals left nothing for a rebuild to clear")
    #expect(segment.slotCount == slots)
    #expect(segment.invariantViolations().isEmpty)
    var found = 0
    for old in 0..<key where segment.find(old, hash: old.hashValue) != nil { found += 1 }
    #expect(found == segment.count, "every key present is found, and no other")
  }

  @Test("nodes crowded into one home group spill past it, and leave it, in any order, with exact counts")
  func crowdedHomeGroup() {
    var segment = Segment()
    // At least 64 nodes, with room for the crowd below without growing.
    var present = 0
    while present < 64 || segment.capacity - segment.count < 40 {
      segment.append(Node(key: present, value: present, expiry: .max, cost: 1), hash: present.hashValue)
      present += 1
    }
    let rebuilds = segment.rebuilds
    let groups = segment.groupCount
    #expect(groups > 4)
    let crowdedHome = 1
    // 40 keys whose home is group 1: more than its 16 slots, so at least 24 spill past it.
    var crowded: [Int] = []
    var candidate = 1_000_000
    while crowded.count < 40 {
      if Segment.position(of: Segment.tag(of: candidate.hashValue), count: groups) == crowdedHome {
        crowded.append(candidate)
      }
      candidate += 1
    }
    #expect(segment.capacity - segment.count >= crowded.count, "room without growing")
    let countsBefore = (0..<groups).map { segment.overflowCount(of: $0) }
    for key in crowded {
      segment.append(Node(key: key, value: key, expiry: .max, cost: 1), hash: key.hashValue)
    }
    #expect(segment.rebuilds == rebuilds)
    #expect(segment.overflowCount(of: crowdedHome) >= 24)
    #expect(segment.invariantViolations().isEmpty)
    var generator = SplitMix64(seed: 7)
    for key in crowded.shuffled(using: &generator) {
      guard let slot = segment.find(key, hash: key.hashValue) else {
        Issue.record("key \(key) not found")
        continue
      }
      segment.remove(slot: slot)
      #expect(segment.find(key, hash: key.hashValue) == nil)
      let problems = segment.invariantViolations()
      #expect(problems.isEmpty, "after removing \(key): \(problems.prefix(3))")
    }
    for key in 0..<present { #expect(segment.find(key, hash: key.hashValue) != nil) }
    #expect((0..<groups).map { segment.overflowCount(of: $0) } == countsBefore, "the crowd left no count behind")
  }

  @Test("small tags (weak hashes) spread over the buckets, and so do tags that differ only in their high bits")
  func weakTagsSpread() {
    let count = 1_000
    let small = Set((0..<UInt32(500)).map { Segment.position(of: $0, count: count) })
    #expect(small.count > 350, "\(small.count) distinct homes for 500 small tags in 1,000 buckets")
    let high = Set((0..<UInt32(500)).map { Segment.position(of: $0 << 20, count: count) })
    #expect(high.count > 200, "\(high.count) distinct homes for 500 high-bit tags in 1,000 buckets")
  }

  /// With 32-bit sums, three costs of 2^30 + 1 wrap below zero, the limit never looks exceeded,
  /// and nothing is evicted.
  @Test(
    "costs of Int32 size add up exactly: a limit of Int32.max evicts, and no limit totals past 2^32",
    arguments: [EvictionPolicy.leastRecentlyUsed, .windowTinyLFU])
  func int32SizedCostsAddUp(policy: EvictionPolicy) throws {
    let limited = try MemoryLayer<Int, Int>(
      configuration: .init(costLimit: Int(Int32.max), cost: { $0 }, segmentCount: 1, evictionPolicy: policy))
    for key in 0..<3 { try limited.insert((1 << 30) + 1, for: key) }
    #expect(limited.count == 1)
    #expect(limited.store.totalCost == (1 << 30) + 1)
    #expect(limited.invariantViolations.isEmpty)

    let unlimited = try MemoryLayer<Int, Int>(
      configuration: .init(cost: { $0 }, segmentCount: 1, evictionPolicy: policy))
    for key in 0..<10 { try unlimited.insert(Int(Int32.max), for: key) }
    #expect(unlimited.count == 10)
    #expect(unlimited.store.totalCost == 10 * Int64(Int32.max))
    #expect(unlimited.totalCost == Int(clamping: 10 * Int64(Int32.max)))
    #expect(unlimited.invariantViolations.isEmpty)
  }

  @Test("costs above 2^32 keep W-TinyLFU's regions apart: every list in use, every size exact")
  func largeCostsUnderTinyLFU() throws {
    // The cost of a value is the value: multiples of 2^33 (clamped to Int.max where Int has 32
    // bits).
    let unit = Int64(1) << 33
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(
        costLimit: Int(clamping: unit * 300), cost: { $0 }, segmentCount: 1, evictionPolicy: .windowTinyLFU))
    var random = SeededGenerator(seed: 19)
    for _ in 0..<4_000 {
      let key =
        Bool.random(using: &random) ? Int.random(in: 0..<10, using: &random) : Int.random(in: 0..<1_000, using: &random)
      if memory.value(for: key) == nil { try memory.insert(Int(clamping: unit * Int64(1 + key % 3)), for: key) }
      #expect(memory.store.totalCost <= memory.store.costLimit)
    }
    let sizes = memory.store.segments.withLock(0) { segment in
      SegmentRegion.allCases.map { segment.keys(in: $0).count }
    }
    #expect(sizes.allSatisfy { $0 > 0 }, "window, probation and protected all hold entries: \(sizes)")
    #expect(memory.invariantViolations.isEmpty)
  }
}
