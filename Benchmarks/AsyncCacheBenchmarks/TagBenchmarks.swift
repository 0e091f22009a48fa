import AsyncCache

/// The benchmarks of tag invalidation.
enum TagBenchmarks {
  /// `tags.invalidate`: a loading cache over a memory layer of `tagEntryCount` entries, each
  /// filed under one of ten tags (a tenth of them under each), and one entry under a tag of its
  /// own. Times `invalidate(tag:)` of a tag carried by a tenth of the entries, by one entry and
  /// by none: the same, whatever the count (the invalidation records an instant; it looks for
  /// no entry). Then times hits on entries with tags while invalidated tags are on record (each
  /// hit checks the entry's tags), beside the `Mutex`-`Dictionary`.
  static func invalidate(_ run: RunConfiguration) async throws -> [ResultRow] {
    let count = run.tagEntryCount
    let unreachable = ClosureFetcher { (key: Int) async throws -> Int in
      throw BenchmarkFailure("the origin was asked for \(key): a hit was expected")
    }
    let memory = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 2 * count))
    let cache = try LoadingCache(layers: [memory], origin: unreachable)
    let produced = WallClock().now.advanced(by: .seconds(-1))
    let groups = (0..<10).map { EntryMetadata(producedAt: produced, tags: ["group:\($0)"]) }
    for key in 0..<count { try memory.insert(CacheEntry(key, expiresAt: nil, metadata: groups[key % 10]), for: key) }
    try memory.insert(
      CacheEntry(count, expiresAt: nil, metadata: EntryMetadata(producedAt: produced, tags: ["single"])), for: count)

    let invalidations = run.tagInvalidations
    func contender(_ name: String, tag: String) -> Contender {
      Contender(name: name, operations: invalidations) {
        try await timed {
          for _ in 0..<invalidations { try await cache.invalidate(tag: tag) }
          return invalidations
        }
      }
    }
    let onTenth = "a tag on \(abbreviated(count / 10)) entries"
    let onOne = "a tag on 1 entry"
    let onNone = "a tag on no entry"
    let measured = try await measureInterleaved(
      [contender(onTenth, tag: "group:1"), contender(onOne, tag: "single"), contender(onNone, tag: "unused")],
      repetitions: run.repetitions)
    var rows = ResultRow.rows(
      benchmark: Benchmark.tagsInvalidate.rawValue, measurements: measured, baseline: onNone, target: nil,
      notes: ["invalidate(tag:) in a cache of \(abbreviated(count)) entries with tags; ns per invalidation"])
    for index in rows.indices where rows[index].implementation == onTenth {
      // Independent of the count: within noise of a tag no entry carries.
      rows[index].target = .ratioAtMost(1.5)
    }
    // The invalidated entries are misses; the others are hits.
    guard cache.cachedValue(for: 1) == nil, cache.cachedValue(for: count) == nil, cache.cachedValue(for: 2) == 2
    else { throw BenchmarkFailure("an invalidated entry was served, or a live one was not") }

    // Hits on entries with tags, while invalidated tags are on record: a layer of `hitKeyCount`
    // entries, as memory.hit.1task's, each under one of the ten tags but those invalidated.
    var generator = SplitMix64(seed: 38)
    let live = Array(0..<run.hitKeyCount)
    let keys = Array.uniformDraws(from: live, count: run.hitOperations, using: &generator)
    let expected = keys.reduce(0, &+)
    let dictionary = MutexDictionary()
    for key in live { dictionary.insert(key, for: key) }
    let taggedMemory = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 2 * run.hitKeyCount))
    for key in live {
      try taggedMemory.insert(CacheEntry(key, expiresAt: nil, metadata: groups[2 + key % 8]), for: key)
    }
    let taggedCache = try LoadingCache(layers: [taggedMemory], origin: unreachable)
    for tag in ["group:0", "group:1", "single"] { try await taggedCache.invalidate(tag: tag) }
    let plainMemory = try MemoryLayer<Int, Int>(configuration: .init(countLimit: 2 * run.hitKeyCount))
    for key in live { try plainMemory.insert(key, for: key) }
    let plainCache = try LoadingCache(layers: [plainMemory], origin: unreachable)
    func hits(_ name: String, _ lookup: @escaping ([Int]) async throws -> Int) -> Contender {
      Contender(
        name: name, operations: keys.count,
        prepare: { checksumSink.wrappingAdd(try await lookup(live), ordering: .relaxed) },
        run: { try await timed(expecting: expected) { try await lookup(keys) } })
    }
    let tagged = "LoadingCache, entries with tags"
    let hitRows = try await measureInterleaved(
      [
        hits(tagged) { try await sumOfTaggedValues(in: taggedCache, for: $0) },
        hits("LoadingCache, entries without tags") { try await sumOfTaggedValues(in: plainCache, for: $0) },
        hits("Mutex-Dictionary") { sumOfTaggedValues(in: dictionary, for: $0) },
      ],
      repetitions: run.repetitions)
    var hitResults = ResultRow.rows(
      benchmark: Benchmark.tagsInvalidate.rawValue, measurements: hitRows, baseline: "Mutex-Dictionary", target: nil,
      notes: [
        "hits: \(abbreviated(keys.count)) over \(abbreviated(live.count)) keys, each with a tag; 3 other tags "
          + "invalidated; default policy"
      ])
    for index in hitResults.indices where hitResults[index].implementation == tagged {
      hitResults[index].target = .ratioAtMost(2.2)
    }
    rows += hitResults
    return rows
  }
}

@inline(never)
private func sumOfTaggedValues(in cache: LoadingCache<Int, Int>, for keys: [Int]) async throws -> Int {
  var sum = 0
  for key in keys { sum &+= try await cache.value(for: key) }
  return sum
}

@inline(never)
private func sumOfTaggedValues(in dictionary: MutexDictionary, for keys: [Int]) -> Int {
  var sum = 0
  for key in keys { sum &+= dictionary.value(for: key) ?? 0 }
  return sum
}
