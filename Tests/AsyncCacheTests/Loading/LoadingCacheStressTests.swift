import AsyncCacheTesting
import TestSupport
import Testing

@testable import AsyncCache

/// RELIABILITY row 16: many tasks, many keys, seeded random operations, invariants afterwards.
///
/// Each key has one owner task that alone writes it, so the owner can check its reads against a
/// sequential model while every other task reads (and cancels reads of) the same keys:
/// - an owner reads its own latest write (no lost update);
/// - after an owner removes a key, no older write comes back (no resurrection);
/// - any read returns the origin's value or a value the key's owner wrote;
/// - afterwards the in-flight table and the write coordinator are empty and the memory layer's
///   storage is sound (no unbounded growth, no leaked waiter).
@Suite(.timeLimit(.minutes(3))) struct LoadingCacheStressTests {
  static let taskCount = 8
  static let keyCount = 96
  static let operationsPerTask = 1200

  /// A value encodes its key and a version: 0 comes from the origin, 1... from the key's owner.
  static func encode(key: Int, version: Int) -> Int { key * 1_000_000 + version }
  static func decode(_ value: Int) -> (key: Int, version: Int) { (value / 1_000_000, value % 1_000_000) }

  @Test(arguments: [1, 2, 3] as [UInt64])
  func randomOperationsFromManyTasksKeepEveryInvariant(seed: UInt64) async throws {
    let memory = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 40, segmentCount: 4))
    let disk = FakeLayer<Int, Int>()
    let originCalls = Locked(0)
    let origin = ClosureFetcher<Int, Int> { key in
      let call = originCalls.withLock { calls in
        calls += 1
        return calls
      }
      await Task.yield()
      if call % 7 == 0 { throw TestError("origin hiccup") }
      return Self.encode(key: key, version: 0)
    }
    let cache = try LoadingCache(layers: [memory, disk], origin: origin)

    try await withThrowingTaskGroup(of: Void.self) { group in
      for task in 0..<Self.taskCount {
        group.addTask {
          try await Self.run(task: task, seed: seed, cache: cache)
        }
      }
      try await group.waitForAll()
    }

    let statistics = cache.statistics
    #expect(statistics.loadsInFlight == 0 && statistics.requestsWaiting == 0)
    #expect(cache.loadTable.isEmpty)
    // A load whose last request was cancelled ends on its own task, after that request
    // returned: its read ends then. Every read must end (a leak hangs here until the time limit).
    await cache.chain.coordinator.waitUntil { $0.isIdle }
    #expect(memory.invariantViolations.isEmpty)
    #expect(memory.count <= 40)
    // Whether a cancellation lands while a request waits depends on timing, so it is not
    // asserted; loads and origin failures happen for every seed.
    #expect(statistics.loads > 0 && statistics.loadFailures > 0)
  }

  static func run(task: Int, seed: UInt64, cache: LoadingCache<Int, Int>) async throws {
    var random = SeededGenerator(seed: seed &* 1000 &+ UInt64(task))
    let owned = Array(stride(from: task, to: keyCount, by: taskCount))
    var version = 0
    /// The owner's latest write per owned key; `.some(nil)` after a removal.
    var written: [Int: Int?] = [:]

    for step in 0..<operationsPerTask {
      switch Int.random(in: 0..<100, using: &random) {
      case 0..<20:
        let key = owned.randomElement(using: &random)!
        version += 1
        let value = encode(key: key, version: version)
        try await cache.insert(value, for: key)
        written[key] = value
        let readBack = try await cache.value(for: key)
        #expect(readBack == value, "task \(task) step \(step): lost its own write of key \(key)")
      case 20..<28:
        let key = owned.randomElement(using: &random)!
        try await cache.removeValue(for: key)
        written[key] = .some(nil)
        do {
          let value = try await cache.value(for: key)
          #expect(decode(value).version == 0, "task \(task) step \(step): key \(key) came back after removal")
        } catch is TestError {
          // The origin may fail; that is not a resurrection.
        }
      default:
        let key = Int.random(in: 0..<keyCount, using: &random)
        // Some reads are cancelled at varying points: before they start, while they wait, after.
        let cancelAfter = Int.random(in: 0..<10, using: &random) == 0 ? Int.random(in: 0..<4, using: &random) : nil
        switch await runInTask(cancellingAfter: cancelAfter, { try await cache.value(for: key) }) {
        case .success(let value):
          let (valueKey, valueVersion) = decode(value)
          #expect(valueKey == key, "task \(task) step \(step): key \(key) returned key \(valueKey)'s value")
          if key % taskCount == task, let latest = written[key] {
            // The owner reads either its latest write or, after a removal, the origin's value.
            #expect(
              value == latest ?? encode(key: key, version: 0), "task \(task) step \(step): stale read of key \(key)")
          } else {
            #expect(valueVersion >= 0)
          }
        case .failure(let error):
          #expect(error is CancellationError || error is TestError, "unexpected \(error)")
        }
      }
    }
  }

  /// Many writers per key, `removeAll`, and cancelled writes and reads. Afterwards nothing is
  /// registered anywhere, and memory and the layer below agree on every key memory holds.
  @Test(arguments: [1, 2, 3] as [UInt64])
  func competingWritersRemoveAllAndCancellationLeaveTheLayersInAgreement(seed: UInt64) async throws {
    let memory = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 20, segmentCount: 4))
    let disk = FakeLayer<Int, Int>()
    let origin = ClosureFetcher<Int, Int> { key in
      await Task.yield()
      return key
    }
    let cache = try LoadingCache(layers: [memory, disk], origin: origin)
    await withTaskGroup(of: Void.self) { group in
      for task in 0..<8 {
        group.addTask {
          var random = SeededGenerator(seed: seed &* 1000 &+ UInt64(task))
          for _ in 0..<800 {
            let key = Int.random(in: 0..<6, using: &random)
            let kind = Int.random(in: 0..<100, using: &random)
            let cancelAfter = Int.random(in: 0..<5, using: &random) == 0 ? Int.random(in: 0..<3, using: &random) : nil
            _ = await runInTask(cancellingAfter: cancelAfter) {
              switch kind {
              case 0..<5: try? await cache.removeAll()
              case 5..<25: try? await cache.insert(key + 1000 * (task + 1), for: key)
              case 25..<35: try? await cache.removeValue(for: key)
              default: _ = try? await cache.value(for: key)
              }
            }
          }
        }
      }
    }
    #expect(cache.loadTable.isEmpty)
    // Abandoned loads end on their own tasks; wait for their reads to end (see above).
    await cache.chain.coordinator.waitUntil { $0.isIdle }
    #expect(memory.invariantViolations.isEmpty)
    for key in 0..<6 {
      if let value = memory.value(for: key) {
        #expect(disk.storedEntries[key]?.value == value, "key \(key): memory and disk disagree")
      }
    }
  }

  /// Bulk requests through a batch origin, single requests, demotions and cancellations from
  /// many tasks: afterwards no load, batch, gate or urgent count is left behind.
  @Test(arguments: [1, 2, 3] as [UInt64])
  func bulkBatchesAndDemotionsLeaveNothingBehind(seed: UInt64) async throws {
    let memory = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 16, segmentCount: 4))
    let origin = ClosureFetcher<Int, Int> { key in
      await Task.yield()
      return key
    }
    let calls = Locked(0)
    let batches = ClosureBatchFetcher<Int, Int>(maximumBatchSize: 3) { keys in
      let call = calls.withLock { calls in
        calls += 1
        return calls
      }
      await Task.yield()
      if call % 5 == 0 { throw TestError("batch hiccup") }
      return Dictionary(uniqueKeysWithValues: keys.filter { $0 % 11 != 0 }.map { ($0, $0) })
    }
    let cache = try LoadingCache(layers: [memory, FakeLayer<Int, Int>()], origin: origin, batchOrigin: batches)
    await withTaskGroup(of: Void.self) { group in
      for task in 0..<8 {
        group.addTask {
          var random = SeededGenerator(seed: seed &* 1000 &+ UInt64(task))
          for _ in 0..<300 {
            let keys = (0..<Int.random(in: 1...6, using: &random)).map { _ in Int.random(in: 0..<24, using: &random) }
            let kind = Int.random(in: 0..<100, using: &random)
            let cancelAfter = Int.random(in: 0..<4, using: &random) == 0 ? Int.random(in: 0..<3, using: &random) : nil
            _ = await runInTask(cancellingAfter: cancelAfter) {
              switch kind {
              case 0..<40:
                let outcome = await cache.values(for: keys)
                for (key, value) in outcome.values { #expect(value == key) }
              case 40..<60: _ = try? await cache.allValues(for: keys)
              case 60..<70: cache.demote(keys[0])
              case 70..<80: try? await cache.removeValue(for: keys[0])
              default: _ = try? await cache.value(for: keys[0])
              }
            }
          }
        }
      }
    }
    await cache.chain.coordinator.waitUntil { $0.isIdle }
    let leftovers = cache.loadTable.state.withLock { state in
      let machine = state.machine
      return (
        machine.isEmpty, machine.batches.count, machine.gates.count, machine.urgentLoads, state.watchers.waiting.count
      )
    }
    #expect(leftovers == (true, 0, 0, 0, 0))
    #expect(memory.invariantViolations.isEmpty)
  }
}
