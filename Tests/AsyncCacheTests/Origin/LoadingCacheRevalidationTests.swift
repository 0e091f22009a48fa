import AsyncCacheTesting
import Synchronization
import TestSupport
import Testing

@testable import AsyncCache

/// An origin of versioned values: each key's value is its version, and its entity tag says so.
/// It answers `notModified` to a current entry whose tag is the version's, and counts what it
/// was asked and what it sent.
final class VersionedOrigin: EntryFetcher, Sendable {
  struct Call: Equatable {
    var key: String
    var currentTag: String?
  }

  private let state = Locked<(versions: [String: Int], calls: [Call], valuesSent: Int)>(([:], [], 0))
  let timeToLive: Duration?
  let tags: Set<String>

  init(timeToLive: Duration? = nil, tags: Set<String> = []) {
    self.timeToLive = timeToLive
    self.tags = tags
  }

  /// Makes the value of `key` change.
  func bump(_ key: String) { state.withLock { $0.versions[key, default: 1] += 1 } }

  var calls: [Call] { state.withLock { $0.calls } }
  var valuesSent: Int { state.withLock { $0.valuesSent } }

  func fetchEntry(_ key: String, current: CacheEntry<Int>?) async throws -> FetchedEntry<Int> {
    state.withLock { state in
      let version = state.versions[key, default: 1]
      state.calls.append(Call(key: key, currentTag: current?.metadata.entityTag))
      if current?.metadata.entityTag == "\"\(version)\"" { return .notModified(timeToLive: timeToLive) }
      state.valuesSent += 1
      return .value(version, metadata: EntryMetadata(entityTag: "\"\(version)\"", tags: tags), timeToLive: timeToLive)
    }
  }
}

@Suite("LoadingCache: revalidation with an EntryFetcher", .timeLimit(.minutes(3)))
struct LoadingCacheRevalidationTests {
  let clock = ManualClock()
  let memory: MemoryLayer<String, Int>
  let below = FakeLayer<String, Int>()
  let reports = Locked<[LoadReport<String>]>([])

  init() throws {
    memory = try MemoryLayer(configuration: .init(clock: clock))
  }

  func cache(
    _ origin: some AsyncFetcher<String, Int>,
    configure: (inout LoadingCache<String, Int>.Configuration) -> Void = { _ in }
  ) throws -> LoadingCache<String, Int> {
    var configuration = LoadingCache<String, Int>.Configuration(clock: clock)
    configuration.onLoadEnded = { [reports] report in reports.withLock { $0.append(report) } }
    configure(&configuration)
    return try LoadingCache(layers: [memory, below], origin: origin, configuration: configuration)
  }

  @Test("a value's metadata from the origin is stored in every layer")
  func metadataFromTheOrigin() async throws {
    let origin = VersionedOrigin(tags: ["tenant:7"])
    let cache = try cache(origin) { $0.timeToLive = .seconds(60) }
    #expect(try await cache.value(for: "k") == 1)
    // Tagged, so stamped as produced when the load started.
    // (no earlier than the clock says: stamps never go back in a process; see TagStamps).
    let stamp = try #require(memory.entry(for: "k")?.metadata.producedAt)
    #expect(stamp >= clock.now)
    let expected = EntryMetadata(entityTag: #""1""#, producedAt: stamp, tags: ["tenant:7"])
    #expect(memory.entry(for: "k")?.metadata == expected)
    #expect(below.storedEntries["k"]?.metadata == expected)
    #expect(origin.calls == [.init(key: "k", currentTag: nil)])
  }

  @Test("a stale-while-revalidate refresh that the origin answers notModified keeps the entry for a new lifetime")
  func staleWhileRevalidate() async throws {
    let origin = VersionedOrigin()
    let cache = try cache(origin) {
      $0.timeToLive = .seconds(60)
      $0.staleWhileRevalidate = .seconds(30)
    }
    let stream = cache.events()
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(by: .seconds(70))
    #expect(try await cache.value(for: "k") == 1, "served stale at once")
    await cache.waitUntilIdle()
    #expect(origin.calls.map(\.currentTag) == [nil, #""1""#], "the refresh sent the entity tag it held")
    #expect(origin.valuesSent == 1, "the value was not sent again")
    let kept = CacheEntry(
      1, expiresAt: clock.now.advanced(by: .seconds(90)), metadata: EntryMetadata(entityTag: #""1""#))
    #expect(memory.entry(for: "k") == kept)
    #expect(below.storedEntries["k"] == kept, "every layer keeps it for the new lifetime")
    let statistics = cache.statistics
    #expect(statistics.revalidations == 1)
    #expect(statistics.refreshes == 1 && statistics.loads == 2)
    #expect(
      reports.withLock { $0.map(\.outcome.description) } == ["loaded from origin", "loaded from origin (not modified)"])
    #expect(reports.withLock { $0.last?.source?.name } == "revalidated")
    let finished = await stream.drained().compactMap { event -> LoadSource? in
      guard case .loadFinished(_, let source, _) = event else { return nil }
      return source
    }
    #expect(finished == [.origin, .revalidated])
    // Changed at the origin: the next refresh brings the new value.
    origin.bump("k")
    clock.advance(by: .seconds(70))
    #expect(try await cache.value(for: "k") == 1)
    await cache.waitUntilIdle()
    #expect(try await cache.value(for: "k") == 2)
    #expect(memory.entry(for: "k")?.metadata.entityTag == #""2""#)
    #expect(cache.statistics.revalidations == 1)
  }

  @Test("a refresh ahead is a revalidation too")
  func refreshAhead() async throws {
    let origin = VersionedOrigin()
    let cache = try cache(origin) {
      $0.timeToLive = .seconds(100)
      $0.refreshAhead = 0.5
    }
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(by: .seconds(60))
    #expect(try await cache.value(for: "k") == 1)
    await cache.waitUntilIdle()
    #expect(origin.calls.map(\.currentTag) == [nil, #""1""#])
    #expect(cache.statistics.revalidations == 1)
    #expect(memory.entry(for: "k")?.expiresAt == clock.now.advanced(by: .seconds(100)))
  }

  @Test("a load that passes over a stale entry (kept for errors only) revalidates it")
  func passedOverStaleEntry() async throws {
    let origin = VersionedOrigin()
    let cache = try cache(origin) {
      $0.timeToLive = .seconds(60)
      $0.staleIfError = .seconds(300)
    }
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(by: .seconds(100))
    #expect(try await cache.value(for: "k") == 1)
    #expect(origin.calls.map(\.currentTag) == [nil, #""1""#])
    #expect(origin.valuesSent == 1)
    #expect(cache.statistics.revalidations == 1)
    #expect(memory.entry(for: "k")?.expiresAt == clock.now.advanced(by: .seconds(360)))
  }

  @Test("an origin's lifetime is used, bounded by the cache's; without a cache lifetime it is the lifetime")
  func originLifetime() async throws {
    let short = VersionedOrigin(timeToLive: .seconds(5))
    let bounded = try cache(short) { $0.timeToLive = .seconds(60) }
    #expect(try await bounded.value(for: "a") == 1)
    #expect(memory.entry(for: "a")?.expiresAt == clock.now.advanced(by: .seconds(5)))

    let long = VersionedOrigin(timeToLive: .seconds(3_600))
    let capped = try cache(long) { $0.timeToLive = .seconds(60) }
    #expect(try await capped.value(for: "b") == 1)
    #expect(memory.entry(for: "b")?.expiresAt == clock.now.advanced(by: .seconds(60)), "the cache's bound")

    let unbounded = try cache(long)
    #expect(try await unbounded.value(for: "c") == 1)
    #expect(memory.entry(for: "c")?.expiresAt == clock.now.advanced(by: .seconds(3_600)))
  }

  @Test("notModified keeps the entry's metadata unless the origin gives new metadata")
  func notModifiedMetadata() async throws {
    let newer = EntryMetadata(entityTag: #""1b""#, tags: ["t"])
    let answers = Locked<[FetchedEntry<Int>]>([
      .value(1, metadata: EntryMetadata(entityTag: #""1""#)), .notModified(), .notModified(metadata: newer),
    ])
    let origin = ClosureEntryFetcher<String, Int> { _, _ in answers.withLock { $0.removeFirst() } }
    let cache = try cache(origin) {
      $0.timeToLive = .seconds(10)
      $0.staleWhileRevalidate = .seconds(10)
    }
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(by: .seconds(15))
    _ = try await cache.value(for: "k")
    await cache.waitUntilIdle()
    #expect(memory.entry(for: "k")?.metadata == EntryMetadata(entityTag: #""1""#))
    clock.advance(by: .seconds(15))
    _ = try await cache.value(for: "k")
    await cache.waitUntilIdle()
    var stamped = newer
    stamped.producedAt = try #require(memory.entry(for: "k")?.metadata.producedAt)
    #expect(try #require(stamped.producedAt) >= clock.now)
    #expect(memory.entry(for: "k")?.metadata == stamped, "tagged: stamped as produced when the refresh started")
    #expect(below.storedEntries["k"]?.metadata == stamped)
    #expect(cache.statistics.revalidations == 2)
  }

  @Test("notModified without an entry to keep fails the load with a typed error naming the key")
  func notModifiedWithoutEntry() async throws {
    let origin = ClosureEntryFetcher<String, Int> { _, _ in .notModified() }
    let cache = try cache(origin)
    let error = await #expect(throws: AsyncCacheError.self) { try await cache.value(for: "lost") }
    #expect(error?.code == .invalidState)
    #expect(error?.message.contains("\"lost\"") == true)
    #expect(memory.entry(for: "lost") == nil)
    // `fetch(_:)` of an EntryFetcher says the same.
    await #expect(throws: AsyncCacheError.self) { try await origin.fetch("lost") }
  }

  @Test("metadata over a limit from the origin fails the load; nothing is stored")
  func originMetadataOverLimit() async throws {
    let origin = ClosureEntryFetcher<String, Int> { _, _ in .value(1, metadata: EntryMetadata(tags: [""])) }
    let cache = try cache(origin)
    await #expect(throws: EntryMetadataError.emptyTag) { try await cache.value(for: "k") }
    #expect(memory.entry(for: "k") == nil && below.storedEntries["k"] == nil)
  }

  @Test("a write with metadata stores it in every layer; metadata over a limit stores nothing")
  func writeWithMetadata() async throws {
    let cache = try cache(ClosureFetcher<String, Int> { _ in 0 }) { $0.timeToLive = .seconds(60) }
    let metadata = EntryMetadata(entityTag: "e", tags: ["t"])
    try await cache.insert(5, for: "k", metadata: metadata)
    var stamped = metadata
    stamped.producedAt = try #require(memory.entry(for: "k")?.metadata.producedAt)
    #expect(try #require(stamped.producedAt) >= clock.now)
    let expected = CacheEntry(5, expiresAt: clock.now.advanced(by: .seconds(60)), metadata: stamped)
    #expect(memory.entry(for: "k") == expected)
    #expect(below.storedEntries["k"] == expected)
    await #expect(throws: EntryMetadataError.emptyTag) {
      try await cache.insert(6, for: "k", metadata: EntryMetadata(tags: [""]))
    }
    #expect(memory.entry(for: "k") == expected)
  }

  @Test(
    "key mapping, post-processing and type erasure keep an EntryFetcher's revalidation",
    arguments: ["mappingKeys", "postProcessing", "eraseToAnyFetcher"])
  func operatorsKeepRevalidation(operator: String) async throws {
    let versioned = VersionedOrigin()
    let origin: AnyFetcher<String, Int> =
      switch `operator` {
      case "mappingKeys": versioned.mappingKeys { (key: String) in key.uppercased() }.eraseToAnyFetcher()
      case "postProcessing": versioned.postProcessing { _, value in value * 1 }.eraseToAnyFetcher()
      default: versioned.eraseToAnyFetcher()
      }
    let cache = try cache(origin) {
      $0.timeToLive = .seconds(60)
      $0.staleWhileRevalidate = .seconds(60)
    }
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(by: .seconds(70))
    #expect(try await cache.value(for: "k") == 1)
    await cache.waitUntilIdle()
    #expect(versioned.calls.map(\.currentTag) == [nil, #""1""#])
    #expect(cache.statistics.revalidations == 1)
  }

  @Test("an origin's zero lifetime answers the load and stores nothing; notModified with it keeps the entry as it was")
  func zeroLifetime() async throws {
    let answers = Locked<[FetchedEntry<Int>]>([
      .value(1, timeToLive: .zero), .value(2, metadata: EntryMetadata(entityTag: "e")), .notModified(timeToLive: .zero),
    ])
    let origin = ClosureEntryFetcher<String, Int> { _, _ in answers.withLock { $0.removeFirst() } }
    let cache = try cache(origin) {
      $0.timeToLive = .seconds(10)
      $0.staleWhileRevalidate = .seconds(10)
    }
    #expect(try await cache.value(for: "k") == 1)
    #expect(memory.entry(for: "k") == nil && below.storedEntries["k"] == nil)
    #expect(memory.statistics.evictions[.expiredOnArrival] == 0)
    #expect(try await cache.value(for: "k") == 2)
    let stored = try #require(memory.entry(for: "k"))
    clock.advance(by: .seconds(15))
    #expect(try await cache.value(for: "k") == 2)
    await cache.waitUntilIdle()
    #expect(memory.entry(for: "k") == stored, "the entry held stays as it was")
    #expect(cache.statistics.revalidations == 1)
  }

  @Test("a layer holding another version with the same expiry is not given the revalidated entry's validators")
  func sameExpiryOtherVersion() async throws {
    let upper = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let lower = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let cache = try LoadingCache(
      layers: [upper, lower], origin: VersionedOrigin(),
      configuration: .init(timeToLive: .seconds(60), staleWhileRevalidate: .seconds(30), clock: clock))
    #expect(try await cache.value(for: "k") == 1)
    let held = try #require(upper.entry(for: "k"))
    // Another version, written below with the same deadline.
    try lower.insert(CacheEntry(2, expiresAt: held.expiresAt, metadata: EntryMetadata(entityTag: #""2""#)), for: "k")
    clock.advance(by: .seconds(70))
    _ = try await cache.value(for: "k")
    await cache.waitUntilIdle()
    #expect(cache.statistics.revalidations == 1)
    // The lower layer gets the revalidated entry whole, not its own value under version 1's tag.
    let kept = CacheEntry(
      1, expiresAt: clock.now.advanced(by: .seconds(90)), metadata: EntryMetadata(entityTag: #""1""#))
    #expect(upper.entry(for: "k") == kept)
    #expect(lower.entry(for: "k") == kept)
  }

  @Test("a value not to be kept that replaces a stale entry removes it, so that the stale one is not served instead")
  func unstoredValueReplacesTheStaleEntry() async throws {
    let answers = Locked<[FetchedEntry<Int>]>([
      .value(1, metadata: EntryMetadata(entityTag: "1")), .value(2, timeToLive: .zero), .value(2, timeToLive: .zero),
      .value(2, timeToLive: .zero),
    ])
    let origin = ClosureEntryFetcher<String, Int> { _, _ in answers.withLock { $0.removeFirst() } }
    let cache = try cache(origin) {
      $0.timeToLive = .seconds(60)
      $0.staleWhileRevalidate = .seconds(60)
    }
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(by: .seconds(70))
    var served: [Int] = []
    for _ in 0..<3 {
      served.append(try await cache.value(for: "k"))
      await cache.waitUntilIdle()
    }
    #expect(served == [1, 2, 2], "the stale value once, at once; then the origin's")
    #expect(memory.entry(for: "k") == nil && below.storedEntries["k"] == nil)
    #expect(answers.withLock { $0.isEmpty })
  }

  /// A cache over two memory layers whose origin answers 1 (tag "1"), then, held at `gate`,
  /// notModified with new metadata.
  func twoLayerCache(_ gate: GatedFetcher<String, Int>) throws -> (
    cache: LoadingCache<String, Int>, upper: MemoryLayer<String, Int>, lower: MemoryLayer<String, Int>
  ) {
    let upper = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let lower = try MemoryLayer<String, Int>(configuration: .init(clock: clock))
    let origin = ClosureEntryFetcher<String, Int> { key, current in
      if current == nil { return .value(1, metadata: EntryMetadata(entityTag: "1")) }
      _ = try await gate.fetch(key)
      return .notModified(metadata: EntryMetadata(entityTag: "1", tags: ["late"]))
    }
    let cache = try LoadingCache(
      layers: [upper, lower], origin: origin,
      configuration: .init(timeToLive: .seconds(60), staleWhileRevalidate: .seconds(60), clock: clock))
    return (cache, upper, lower)
  }

  @Test(
    "a write or a removal during a revalidation wins in every layer (RELIABILITY: writes win over loads)",
    arguments: [true, false])
  func writesWinOverRevalidations(removing: Bool) async throws {
    let gate = GatedFetcher<String, Int> { _ in 0 }
    let (cache, upper, lower) = try twoLayerCache(gate)
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(by: .seconds(70))
    #expect(try await cache.value(for: "k") == 1, "served stale; the revalidation is held")
    await gate.waitForFetches(1, for: "k")
    if removing {
      try await cache.removeValue(for: "k")
    } else {
      try await cache.insert(5, for: "k", metadata: EntryMetadata(entityTag: "5"))
    }
    let written = upper.entry(for: "k")
    #expect(gate.release("k") == 1)
    await cache.waitUntilIdle()
    #expect(upper.entry(for: "k") == written)
    #expect(lower.entry(for: "k") == written)
  }
}
