import AsyncCache

/// The cost of composing layers with operators.
enum OperatorBenchmarks {
  /// A domain key in front of the memory layer's `Int` keys.
  struct UserID: Hashable, Sendable {
    var rawValue: Int
  }

  /// A domain value in front of the memory layer's `Int` values.
  struct Score: Sendable {
    var points: Int
  }

  /// `operators.overhead`: a memory hit through a key transform, a value transform and a
  /// condition, all synchronous, against the same hit in the bare memory layer. Both are called
  /// through the layer protocol's `entry(for:)`.
  static func overhead(_ run: RunConfiguration) async throws -> [ResultRow] {
    var generator = SplitMix64(seed: 5)
    let everyKey = Array(0..<run.hitKeyCount)
    let keys = [Int].uniformDraws(from: everyKey, count: run.hitOperations, using: &generator)
    let expected = keys.reduce(0, &+)
    let memory = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 2 * run.hitKeyCount))
    for key in everyKey { try memory.insert(key, for: key) }

    let composed =
      memory
      .mappingValues(ValueTransform(decode: { Score(points: $0) }, encode: { $0.points }))
      .mappingKeys { (id: UserID) in id.rawValue }
      .onlyIf { id in id.rawValue >= 0 }
    let capped = try composed.cappingRequests(at: 64)

    func contender(_ name: String, _ lookups: @escaping ([Int]) async throws -> Int) -> Contender {
      Contender(
        name: name,
        operations: keys.count,
        prepare: { checksumSink.wrappingAdd(try await lookups(everyKey), ordering: .relaxed) },
        run: { try await timed(expecting: expected) { try await lookups(keys) } }
      )
    }
    let measurements = try await measureInterleaved(
      [
        contender("key ∘ value ∘ condition") { try await sumOfScores(in: composed, for: $0) },
        contender("MemoryLayer (as a layer)") { try await sumOfEntries(in: memory, for: $0) },
        contender("the same + request cap") { try await sumOfScores(in: capped, for: $0) },
        contender("MemoryLayer.value(for:)") { sumOfValues(in: memory, for: $0) },
      ],
      repetitions: run.repetitions
    )
    var rows = ResultRow.rows(
      benchmark: Benchmark.operatorsOverhead.rawValue,
      measurements: measurements,
      baseline: "MemoryLayer (as a layer)",
      target: .ratioAtMost(1.5),
      notes: ["\(abbreviated(keys.count)) hits over \(abbreviated(everyKey.count)) keys; synchronous transforms"]
    )
    rows.annotate("the same + request cap", with: "informational: a cap of 64, never reached")
    rows.annotate("MemoryLayer.value(for:)", with: "informational: the synchronous peek, no async call")
    return rows
  }
}

@inline(never)
private func sumOfScores<Layer: AsyncCacheLayer<OperatorBenchmarks.UserID, OperatorBenchmarks.Score>>(
  in layer: Layer,
  for keys: [Int]
) async throws -> Int {
  var sum = 0
  for key in keys { sum &+= try await layer.entry(for: OperatorBenchmarks.UserID(rawValue: key))?.value.points ?? 0 }
  return sum
}

@inline(never)
private func sumOfEntries<Layer: AsyncCacheLayer<Int, Int>>(in layer: Layer, for keys: [Int]) async throws -> Int {
  var sum = 0
  for key in keys { sum &+= try await layer.entry(for: key)?.value ?? 0 }
  return sum
}

@inline(never)
private func sumOfValues(in layer: MemoryLayer<Int, Int>, for keys: [Int]) -> Int {
  var sum = 0
  for key in keys { sum &+= layer.value(for: key) ?? 0 }
  return sum
}
