import AsyncCacheTesting
import Testing

@testable import AsyncCache

/// Random operations against a simple model of an LRU cache, with invariants after each one.
@Suite(.timeLimit(.minutes(3))) struct MemoryLayerModelTests {
  /// An obviously correct (and slow) least-recently-used cache.
  struct Model {
    struct Item {
      var value: Int
      var cost: Int
      var expiry: CacheInstant?
      var metadata = EntryMetadata()
    }

    let countLimit: Int
    let costLimit: Int
    let trimFraction: Double
    /// Least recently used first.
    var order: [Int] = []
    var items: [Int: Item] = [:]
    var evictions = EvictionCounts()

    var totalCost: Int { items.values.reduce(0) { $0 + $1.cost } }

    mutating func touch(_ key: Int) {
      order.removeAll { $0 == key }
      order.append(key)
    }

    mutating func drop(_ key: Int) {
      order.removeAll { $0 == key }
      items[key] = nil
    }

    mutating func get(_ key: Int, now: CacheInstant) -> Item? {
      guard let item = items[key] else { return nil }
      if let expiry = item.expiry, expiry <= now {
        drop(key)
        evictions[.expired] += 1
        return nil
      }
      touch(key)
      return item
    }

    mutating func insert(
      _ value: Int, cost: Int, expiry: CacheInstant?, metadata: EntryMetadata = EntryMetadata(), for key: Int,
      now: CacheInstant
    ) {
      if let expiry, expiry <= now {
        drop(key)
        evictions[.expiredOnArrival] += 1
        return
      }
      if countLimit == 0 || cost > costLimit {
        drop(key)
        evictions[countLimit == 0 ? .countLimit : .oversized] += 1
        return
      }
      items[key] = Item(value: value, cost: cost, expiry: expiry, metadata: metadata)
      touch(key)
      while order.count > 1 {
        let reason: EvictionReason
        if items.count > countLimit {
          reason = .countLimit
        } else if totalCost > costLimit {
          reason = .costLimit
        } else {
          break
        }
        drop(order[0])
        evictions[reason] += 1
      }
    }

    mutating func removeExpired(now: CacheInstant) -> Int {
      let expired = items.filter { $0.value.expiry.map { $0 <= now } ?? false }.map(\.key)
      for key in expired { drop(key) }
      evictions[.expired] += expired.count
      return expired.count
    }

    mutating func trim() {
      let keepCount = Int((Double(min(countLimit, items.count)) * trimFraction).rounded(.down))
      let keepCost = Int((Double(min(costLimit, totalCost)) * trimFraction).rounded(.down))
      while !order.isEmpty, items.count > keepCount || totalCost > keepCost {
        drop(order[0])
        evictions[.memoryPressure] += 1
      }
    }
  }

  /// With `comparingEvery` above 1, the order is compared only every so many steps, and a lookup
  /// step is a run of up to 40 lookups: hits wait in the segment's queue (see
  /// `MemorySegment.recordHit`), fill it and settle on their own or at the next write, and the
  /// order must still be exactly the model's.
  @Test(arguments: [(1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (6, 1), (7, 25), (8, 25), (9, 25)] as [(UInt64, Int)])
  func exactLRUMatchesTheModel(seed: UInt64, comparingEvery: Int) async throws {
    var random = SeededGenerator(seed: seed)
    let clock = ManualClock()
    let countLimit = Int.random(in: 1...40, using: &random)
    let costLimit = Int.random(in: 20...400, using: &random)
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(
        countLimit: countLimit,
        costLimit: costLimit,
        cost: { $0 % 1000 },
        warningTrimFraction: 0.5,
        segmentCount: 1,
        evictionPolicy: .leastRecentlyUsed,
        clock: clock
      )
    )
    var model = Model(countLimit: countLimit, costLimit: costLimit, trimFraction: 0.5)
    for step in 0..<3000 {
      let key = Int.random(in: 0..<60, using: &random)
      switch Int.random(in: 0..<100, using: &random) {
      case 0..<40:
        let run = comparingEvery == 1 ? 1 : Int.random(in: 1...40, using: &random)
        for lookup in 0..<run {
          let key = lookup == 0 ? key : Int.random(in: 0..<60, using: &random)
          // Entries, so that each hit also reads the metadata kept beside some nodes.
          let expected = model.get(key, now: clock.now)
          let entry = memory.entry(for: key)
          #expect(entry?.value == expected?.value, "step \(step): get \(key)")
          #expect(entry?.metadata == expected?.metadata, "step \(step): the metadata of \(key)")
        }
      case 40..<80:
        let cost = Int.random(in: 0...60, using: &random)
        let value = step * 1000 + cost
        let ttl: Duration? = Bool.random(using: &random) ? .seconds(Int.random(in: 0...30, using: &random)) : nil
        let expiry = ttl.map { clock.now.advanced(by: $0) }
        // Half the entries carry metadata, so that replacing one with or without it, evicting
        // and expiring it all keep the nodes' flags and the metadata table in step (checked by
        // the invariants).
        let metadata =
          Bool.random(using: &random) ? EntryMetadata(entityTag: "\(value)", tags: ["k\(key)"]) : EntryMetadata()
        model.insert(value, cost: cost, expiry: expiry, metadata: metadata, for: key, now: clock.now)
        try memory.insert(CacheEntry(value, expiresAt: expiry, metadata: metadata), for: key)
      case 80..<90:
        model.drop(key)
        memory.removeValue(for: key)
      case 90..<96:
        clock.advance(by: .seconds(Int.random(in: 1...10, using: &random)))
      case 96..<98:
        #expect(memory.removeExpired() == model.removeExpired(now: clock.now), "step \(step): removeExpired")
      default:
        model.trim()
        await memory.handleMemoryPressure(.warning)
      }
      guard step % comparingEvery == comparingEvery - 1 else { continue }
      #expect(memory.store.keysInEvictionOrder == [model.order], "step \(step): recency order")
      #expect(memory.count == model.items.count)
      #expect(memory.totalCost == model.totalCost)
      #expect(memory.invariantViolations.isEmpty, "step \(step)")
      if memory.store.keysInEvictionOrder != [model.order] { return }
    }
    #expect(memory.statistics.evictions == model.evictions)
  }

  @Test(arguments: [11, 12, 13] as [UInt64])
  func segmentedLayersKeepTheLimitsAndTheLatestValues(seed: UInt64) async throws {
    var random = SeededGenerator(seed: seed)
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 64, costLimit: 600, cost: { $0 % 100 }, segmentCount: 8)
    )
    var latest: [Int: Int] = [:]
    for step in 0..<5000 {
      let key = Int.random(in: 0..<300, using: &random)
      switch Int.random(in: 0..<10, using: &random) {
      case 0..<5:
        if let entry = memory.entry(for: key) {
          #expect(latest[key] == entry.value, "step \(step): a read returned a value that is not the latest")
          #expect(entry.metadata.isEmpty || entry.metadata.entityTag == "\(entry.value)", "step \(step)")
        }
      case 5..<9:
        let value = step * 100 + Int.random(in: 0..<100, using: &random)
        let metadata = value % 2 == 0 ? EntryMetadata(entityTag: "\(value)") : EntryMetadata()
        try memory.insert(CacheEntry(value, expiresAt: nil, metadata: metadata), for: key)
        latest[key] = value
        #expect(memory.value(for: key) == value, "an entry is never evicted by its own insert")
      default:
        memory.removeValue(for: key)
        latest[key] = nil
      }
      #expect(memory.count <= 64 && memory.totalCost <= 600)
    }
    #expect(memory.invariantViolations.isEmpty)
    let evicted = memory.statistics.evictions
    #expect(evicted[.countLimit] + evicted[.costLimit] > 0)
  }

  @Test func concurrentTasksNeverSeeAnotherKeysValue() async throws {
    let memory = try MemoryLayer<Int, Int>(
      configuration: .init(countLimit: 200, costLimit: 5000, cost: { $0 % 50 }, segmentCount: 4)
    )
    await withTaskGroup(of: Void.self) { group in
      for task in 0..<4 {
        group.addTask {
          var random = SeededGenerator(seed: UInt64(100 + task))
          for step in 0..<20_000 {
            let key = Int.random(in: 0..<500, using: &random)
            if Bool.random(using: &random) {
              try? memory.insert(key * 1_000_000 + step % 1000, for: key)
            } else if let value = memory.value(for: key) {
              precondition(value / 1_000_000 == key, "key \(key) returned a value of key \(value / 1_000_000)")
            }
            if step % 997 == 0 { memory.removeValue(for: key) }
          }
        }
      }
    }
    #expect(memory.invariantViolations.isEmpty)
    #expect(memory.count <= 200)
  }
}
