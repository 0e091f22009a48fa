import AsyncCacheTesting
import Testing

@testable import AsyncCache

/// ``EvictionPolicy/adaptive`` under concurrent writers: the limits hold, the storage stays
/// sound, and every segment's regions follow the layer's window share, while the votes of all
/// segments move it. Also run under ThreadSanitizer.
@Suite struct MemoryLayerAdaptiveConcurrencyTests {
  /// A limit that binds the layer.
  enum Limit: Sendable, CaseIterable, CustomTestStringConvertible {
    case count
    case cost

    var testDescription: String { self == .count ? "a count limit" : "a cost limit" }
  }

  static let countLimit = 1_200
  static let costLimit = 20_000

  static func layer(limit: Limit) throws -> MemoryLayer<Int, Int> {
    let configuration: MemoryLayer<Int, Int>.Configuration =
      switch limit {
      case .count:
        .init(countLimit: countLimit, segmentCount: 4)
      case .cost:
        // Without a count limit: the sketch and the ghosts grow with the segments as they fill.
        .init(countLimit: .max, costLimit: costLimit, cost: { $0 % 32 + 1 }, segmentCount: 4)
      }
    return try MemoryLayer<Int, Int>(configuration: configuration, admissionSeed: 7)
  }

  @Test(
    "writers, readers and removers on many tasks: the limits hold, the segments follow the share",
    arguments: Limit.allCases
  )
  func concurrentWriters(limit: Limit) async throws {
    let memory = try Self.layer(limit: limit)
    let tasks = 4
    let steps = 3_000
    // Each task replays recency-biased traffic on keys of its own (so that keys come back soon
    // after they left, and vote), with random reads, rewrites and removals of any task's keys.
    let traces = (0..<tasks).map { task in
      AdaptiveTrace.recency(
        accesses: steps, reads: 4, maximumGap: 300, firstKey: task << 32, seed: UInt64(0xC0 + task))
    }
    let overLimit = try await withThrowingTaskGroup(of: Int.self) { group in
      for task in 0..<tasks {
        let keys = traces[task]
        group.addTask {
          var random = SeededGenerator(seed: UInt64(task))
          var overLimit = 0
          for key in keys {
            switch Int.random(in: 0..<20, using: &random) {
            case 0..<16:
              if memory.value(for: key) == nil { try memory.insert(key, for: key) }
            case 16..<18:
              let other = Int.random(in: 0..<tasks, using: &random) << 32 | key & 0xFFFF
              try memory.insert(key ^ 1, for: other)
            default:
              memory.removeValue(for: Int.random(in: 0..<tasks, using: &random) << 32 | key & 0xFFFF)
            }
            // Limits are global: a writer on another task may stand above them for the time of
            // its own insert, never by more than one entry per writer.
            let over =
              switch limit {
              case .count: memory.count > Self.countLimit + tasks
              case .cost: memory.totalCost > Int64(Self.costLimit) + 32 * Int64(tasks)
              }
            if over { overLimit += 1 }
          }
          return overLimit
        }
      }
      return try await group.reduce(0, +)
    }
    #expect(overLimit == 0)
    switch limit {
    case .count: #expect(memory.count <= Self.countLimit && memory.count > Self.countLimit / 2)
    case .cost: #expect(memory.totalCost <= Int64(Self.costLimit) && memory.totalCost > Int64(Self.costLimit) / 2)
    }
    let problems = memory.invariantViolations
    #expect(problems.isEmpty, "\(problems)")
    let share = MemoryLayerAdaptiveTests.share(of: memory)
    #expect(share > WindowTarget.minimumShare, "the votes moved the window: \(share)")
    let segmentProblems = MemoryLayerAdaptiveTests.segmentProblems(of: memory)
    #expect(segmentProblems.isEmpty, "\(segmentProblems)")
    // Each segment takes the layer's latest share with its next new key.
    var untouched = Set(0..<memory.store.segments.count)
    var key = 1 << 48
    while !untouched.isEmpty {
      if untouched.remove(memory.store.segmentIndex(for: key.hashValue)) != nil { try memory.insert(1, for: key) }
      key += 1
    }
    let latest = MemoryLayerAdaptiveTests.share(of: memory)
    for index in 0..<memory.store.segments.count {
      #expect(memory.store.segments.withLock(index) { $0.admission.appliedShare } == latest, "segment \(index)")
    }
    #expect(MemoryLayerAdaptiveTests.segmentProblems(of: memory).isEmpty)
    #expect(memory.count <= memory.configuration.countLimit)
    #expect(memory.totalCost <= Int64(memory.configuration.costLimit))
    #expect(memory.invariantViolations.isEmpty)
    let statistics = memory.statistics
    #expect(statistics.evictions[limit == .count ? .countLimit : .costLimit] > 0)
  }

  /// Many tasks reading and writing a refereed layer at once: its one lock guards the shadows too.
  /// Under ThreadSanitizer in CI.
  @Test("tasks reading and writing a refereed layer at once leave it sound", .timeLimit(.minutes(3)))
  func concurrentTasksLeaveItSound() async throws {
    let memory = try MemoryLayerRefereeTests.layer(countLimit: 400)
    try await withThrowingTaskGroup(of: Void.self) { group in
      for task in 0..<4 {
        group.addTask {
          var random = SeededGenerator(seed: UInt64(task + 1))
          for step in 0..<8_000 {
            try Task.checkCancellation()
            let key = step % 3 == 0 ? Int(random.next() % 4_000) : Int(random.next() % 500)
            if memory.value(for: key) == nil { try memory.insert(key, for: key) }
          }
        }
      }
      try await group.waitForAll()
    }
    #expect(MemoryLayerRefereeTests.expert(of: memory) != nil, "the layer is refereed")
    #expect(memory.invariantViolations.isEmpty)
    #expect(memory.count <= 400)
  }
}
