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
  /// condition, all synchronous, against the same hit in the bare memory layer, both through
  /// `lookUpWithoutSuspending(_:)`, the lookup that never suspends. The same hits through
  /// `LoadingCache.value(for:)` (which calls the stack through one stored closure) and through
  /// the layers' `entry(for:)` (the `async` path a chain takes) are informational rows.
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
    let loads = CallCounter()
    let plainCache = try LoadingCache(
      layers: [memory],
      origin: ClosureFetcher { (key: Int) in
        loads.record()
        return key
      })
    let composedCache = try LoadingCache(
      layers: [composed],
      origin: ClosureFetcher { (id: UserID) in
        loads.record()
        return Score(points: id.rawValue)
      })

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
        contender("key ∘ value ∘ condition") { try sumOfScoresNow(in: composed, for: $0) },
        contender("MemoryLayer") { try sumOfValuesNow(in: memory, for: $0) },
        contender("LoadingCache over key ∘ value ∘ condition") { try await sumOfScores(in: composedCache, for: $0) },
        contender("LoadingCache over MemoryLayer") { try await sumOfValues(in: plainCache, for: $0) },
        contender("key ∘ value ∘ condition, entry(for:)") { try await sumOfScores(in: composed, for: $0) },
        contender("MemoryLayer, entry(for:)") { try await sumOfEntries(in: memory, for: $0) },
      ],
      repetitions: run.repetitions
    )
    guard loads.count == 0 else {
      throw BenchmarkFailure("operators.overhead loaded \(loads.count) times: every lookup must hit memory")
    }
    var rows = ResultRow.rows(
      benchmark: Benchmark.operatorsOverhead.rawValue,
      measurements: measurements,
      baseline: "MemoryLayer",
      target: .ratioAtMost(1.5),
      notes: ["\(abbreviated(keys.count)) hits over \(abbreviated(everyKey.count)) keys; synchronous transforms"]
    )
    rows.annotate(
      "LoadingCache over key ∘ value ∘ condition",
      with: "informational: through LoadingCache.value(for:), one closure call into the stack")
    rows.annotate("LoadingCache over MemoryLayer", with: "informational: the loading cache's own hit path")
    rows.annotate("key ∘ value ∘ condition, entry(for:)", with: "informational: the async path a chain takes")
    rows.annotate("MemoryLayer, entry(for:)", with: "informational: the bare layer through the protocol")
    return rows
  }
}

@inline(never)
private func sumOfScoresNow<Layer: SynchronousLookupLayer<OperatorBenchmarks.UserID, OperatorBenchmarks.Score>>(
  in layer: Layer,
  for keys: [Int]
) throws -> Int {
  var sum = 0
  for key in keys {
    if case .found(let score) = try layer.lookUpWithoutSuspending(OperatorBenchmarks.UserID(rawValue: key)) {
      sum &+= score.points
    }
  }
  return sum
}

@inline(never)
private func sumOfValuesNow(in layer: MemoryLayer<Int, Int>, for keys: [Int]) throws -> Int {
  var sum = 0
  for key in keys {
    if case .found(let value) = layer.lookUpWithoutSuspending(key) { sum &+= value }
  }
  return sum
}

@inline(never)
private func sumOfScores(
  in cache: LoadingCache<OperatorBenchmarks.UserID, OperatorBenchmarks.Score>,
  for keys: [Int]
) async throws -> Int {
  var sum = 0
  for key in keys { sum &+= try await cache.value(for: OperatorBenchmarks.UserID(rawValue: key)).points }
  return sum
}

@inline(never)
private func sumOfValues(in cache: LoadingCache<Int, Int>, for keys: [Int]) async throws -> Int {
  var sum = 0
  for key in keys { sum &+= try await cache.value(for: key) }
  return sum
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
