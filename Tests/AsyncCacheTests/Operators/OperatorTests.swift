import AsyncCacheTesting
import Foundation
import TestSupport
import Testing

@testable import AsyncCache

@Suite("Operators", .timeLimit(.minutes(3)))
struct OperatorTests {
  struct User: Hashable, Sendable, Codable {
    var id: String
    var name: String
  }

  // MARK: Key transforms

  @Test("mappingKeys asks the base layer with the transformed key, for every operation")
  func mappingKeys() async throws {
    let base = try MemoryLayer<String, Int>()
    let byUser = base.mappingKeys { (user: User) in "user-\(user.id)" }
    let ada = User(id: "1", name: "Ada")
    try await byUser.insert(CacheEntry(36), for: ada)
    #expect(base.value(for: "user-1") == 36)
    #expect(try await byUser.entry(for: ada)?.value == 36)
    try await byUser.removeValue(for: ada)
    #expect(base.value(for: "user-1") == nil)
  }

  @Test("a failed key transform is a typed error naming the key; the chain records it and skips the layer")
  func failedKeyTransformSkipsTheLayer() async throws {
    let skipped = RecordingLayer(
      try MemoryLayer<String, Int>().mappingKeys { (key: String) -> String in
        guard key != "bad" else { throw TestError("refused") }
        return key
      })
    let lower = try MemoryLayer<String, Int>()
    try lower.insert(7, for: "bad")
    let chain = try CacheChain([skipped, lower], failurePolicy: .propagate)

    let error = await #expect(throws: AsyncCacheError.self) { try await skipped.base.entry(for: "bad") }
    #expect(error?.code == .transformFailed)
    #expect(error?.message.contains("bad") == true && error?.underlying is TestError)

    #expect(try await chain.value(for: "bad") == 7, "skipped although the policy is .propagate")
    try #require(chain.statistics.tiers.count == 2)
    #expect(chain.statistics.tiers[0].failures >= 1)
    #expect(chain.statistics.tiers[0].lastFailure?.error is AsyncCacheError)
  }

  @Test("an origin's failed key transform reaches the caller as a typed error")
  func failedFetcherKeyTransform() async throws {
    let origin = ClosureFetcher<URL, String> { url in url.lastPathComponent }
      .mappingKeys { (id: Int) -> URL in
        guard id > 0 else { throw TestError("refused") }
        return URL(string: "https://example.com/users/\(id)")!
      }
    let cache = try LoadingCache(layers: [MemoryLayer<Int, String>()], origin: origin)
    #expect(try await cache.value(for: 42) == "42")
    let error = await #expect(throws: AsyncCacheError.self) { try await cache.value(for: -1) }
    #expect(error?.code == .transformFailed && error?.underlying is TestError)
  }

  // MARK: Value transforms

  @Test("JSON: a Data layer seen as a layer of models, with expiry kept both ways")
  func json() async throws {
    let clock = ManualClock()
    let data = try MemoryLayer<String, Data>(configuration: .init(clock: clock))
    let users = data.mappingValues(.json(User.self))
    let ada = User(id: "1", name: "Ada")
    let expiry = clock.now.advanced(by: .seconds(60))
    try await users.insert(CacheEntry(ada, expiresAt: expiry), for: "1")
    #expect(data.value(for: "1") == Data(#"{"id":"1","name":"Ada"}"#.utf8), "sorted keys, stable bytes")
    let entry = try #require(try await users.entry(for: "1"))
    #expect(entry.value == ada && entry.expiresAt == expiry)

    try data.insert(Data("not json".utf8), for: "2")
    let error = await #expect(throws: AsyncCacheError.self) { try await users.entry(for: "2") }
    #expect(error?.code == .transformFailed && error?.message.contains("2") == true)
  }

  @Test("String ↔ Data: invalid bytes and unencodable strings are typed errors")
  func string() async throws {
    let data = try MemoryLayer<Int, Data>()
    let text = data.mappingValues(.string())
    try await text.insert(CacheEntry("héllo"), for: 1)
    #expect(data.value(for: 1) == Data("héllo".utf8))
    #expect(try await text.entry(for: 1)?.value == "héllo")

    try data.insert(Data([0xFF, 0xFE, 0xFD]), for: 2)
    await #expect(throws: AsyncCacheError.self) { try await text.entry(for: 2) }

    let ascii = data.mappingValues(.string(encoding: .ascii))
    let error = await #expect(throws: AsyncCacheError.self) { try await ascii.insert(CacheEntry("héllo"), for: 3) }
    #expect(error?.code == .transformFailed)
    #expect(data.value(for: 3) == nil, "nothing stored")
  }

  @Test("a damaged value in a transformed layer is skipped: the value is loaded and written back whole")
  func damagedValueInAChain() async throws {
    let memory = try MemoryLayer<String, User>()
    let disk = try MemoryLayer<String, Data>()
    try disk.insert(Data("{ torn".utf8), for: "1")
    let origin = GatedFetcher<String, User> { User(id: $0, name: "from the origin") }
    origin.open()
    let cache = try LoadingCache(layers: [memory, disk.mappingValues(.json(User.self))], origin: origin)
    #expect(try await cache.value(for: "1").name == "from the origin")
    #expect(try JSONDecoder().decode(User.self, from: try #require(disk.value(for: "1"))).name == "from the origin")
  }

  @Test("a fetcher's values are converted one way, and a failed conversion is a typed error")
  func fetcherValues() async throws {
    let origin = ClosureFetcher<String, Data> { key in Data(key.utf8) }
      .mappingValues { data -> Int in
        guard let number = Int(String(decoding: data, as: UTF8.self)) else { throw TestError("refused") }
        return number
      }
    #expect(try await origin.fetch("12") == 12)
    let error = await #expect(throws: AsyncCacheError.self) { try await origin.fetch("twelve") }
    #expect(error?.code == .transformFailed && error?.underlying is TestError)
  }

  // MARK: Conditions

  @Test("onlyIf: refused keys miss and are not written; accepted keys reach the layer")
  func condition() async throws {
    let base = RecordingLayer(try MemoryLayer<Int, String>())
    let evens = base.onlyIf { $0.isMultiple(of: 2) }
    try await evens.insert(CacheEntry("two"), for: 2)
    try await evens.insert(CacheEntry("three"), for: 3)
    #expect(try await evens.entry(for: 2)?.value == "two")
    #expect(try await evens.entry(for: 3) == nil)
    #expect(base.calls == [.insert(2, expiresAt: nil), .entry(2)], "3 never reached the layer")
    try await evens.removeAll()
    #expect(base.calls.last == .removeAll)
  }

  @Test("a failed condition reaches the caller even when the layer's failures are skipped")
  func failedCondition() async throws {
    let guarded = try MemoryLayer<Int, String>().onlyIf { _ in throw TestError("refused") }
    let origin = GatedFetcher<Int, String> { "\($0)" }
    origin.open()
    let chain = try CacheChain([guarded], failurePolicy: .skip)
    let cache = try LoadingCache(chain: chain, origin: origin)
    let error = await #expect(throws: AsyncCacheError.self) { try await cache.value(for: 1) }
    #expect(error?.code == .conditionFailed && error?.underlying is TestError)
    #expect(origin.callCount == 0)
  }

  // MARK: Post-processing and lanes

  @Test("post-processing sees the key asked for; writes pass unchanged; expiry is kept")
  func postProcessing() async throws {
    let clock = ManualClock()
    let base = try MemoryLayer<String, String>(configuration: .init(clock: clock))
    let stamped = base.postProcessing { key, value in "\(value) for \(key)" }
    let expiry = clock.now.advanced(by: .seconds(5))
    try await stamped.insert(CacheEntry("hello", expiresAt: expiry), for: "ada")
    #expect(base.value(for: "ada") == "hello")
    let entry = try #require(try await stamped.entry(for: "ada"))
    #expect(entry.value == "hello for ada" && entry.expiresAt == expiry)

    let failing = base.postProcessing { _, _ -> String in throw TestError("refused") }
    let error = await #expect(throws: AsyncCacheError.self) { try await failing.entry(for: "ada") }
    #expect(error?.code == .transformFailed)

    let origin = ClosureFetcher<Int, Int> { $0 * 10 }.postProcessing { key, value in value + key }
    #expect(try await origin.fetch(4) == 44)
  }

  @Test("lanes send each key to one of two layers; removeAll and memory pressure reach both")
  func lanes() async throws {
    let network = RecordingLayer(try MemoryLayer<String, String>())
    let files = RecordingLayer(try MemoryLayer<String, String>())
    let images = network.lane(files) { $0.hasPrefix("file:") }
    try await images.insert(CacheEntry("remote"), for: "https://a")
    try await images.insert(CacheEntry("local"), for: "file:///b")
    #expect(try await images.entry(for: "https://a")?.value == "remote")
    #expect(try await images.entry(for: "file:///b")?.value == "local")
    #expect(network.calls == [.insert("https://a", expiresAt: nil), .entry("https://a")])
    #expect(files.calls == [.insert("file:///b", expiresAt: nil), .entry("file:///b")])
    try await images.removeValue(for: "file:///b")
    #expect(files.calls.last == .removeValue("file:///b") && network.calls.count == 2)
    try await images.removeAll()
    await images.handleMemoryPressure(.warning)
    #expect(network.calls.suffix(2) == [.removeAll, .memoryPressure(.warning)])
    #expect(files.calls.suffix(2) == [.removeAll, .memoryPressure(.warning)])
  }

  // MARK: Composition

  @Test("transform ∘ condition ∘ chain: a model cache keyed by users over JSON on a lower layer, only for some users")
  func composed() async throws {
    let disk = try MemoryLayer<String, Data>()
    let lower =
      disk
      .mappingValues(.json(User.self))
      .mappingKeys { (user: User) in user.id }
      .onlyIf { user in !user.name.isEmpty }
    let memory = try MemoryLayer<User, User>()
    let origin = GatedFetcher<User, User> { User(id: $0.id, name: $0.name.uppercased()) }
    origin.open()
    let cache = try LoadingCache(layers: [memory, lower], origin: origin)

    let ada = User(id: "1", name: "Ada")
    #expect(try await cache.value(for: ada).name == "ADA")
    #expect(disk.value(for: "1") != nil, "stored in the lower layer as JSON under the user's id")
    let anonymous = User(id: "2", name: "")
    #expect(try await cache.value(for: anonymous).name == "")
    #expect(disk.value(for: "2") == nil, "the condition kept it out of the lower layer")

    // A fresh memory layer over the same lower layer: served from disk, decoded.
    let restarted = try LoadingCache(layers: [MemoryLayer<User, User>(), lower], origin: origin)
    #expect(try await restarted.value(for: ada).name == "ADA")
    #expect(origin.callCount(for: ada) == 1)
  }

  @Test("cancellation passes through transforms and conditions unwrapped")
  func cancellation() async throws {
    let layer = try MemoryLayer<String, Int>()
      .mappingKeys { (key: String) -> String in throw CancellationError() }
    await #expect(throws: CancellationError.self) { try await layer.entry(for: "k") }
    let condition = try MemoryLayer<String, Int>().onlyIf { _ in throw CancellationError() }
    await #expect(throws: CancellationError.self) { try await condition.entry(for: "k") }
    let fetcher = ClosureFetcher<String, Int> { _ in 1 }.mappingValues { _ -> Int in throw CancellationError() }
    await #expect(throws: CancellationError.self) { try await fetcher.fetch("k") }
  }

  @Test("memory pressure reaches the layer behind every operator")
  func memoryPressure() async throws {
    let base = RecordingLayer(try MemoryLayer<String, Data>())
    let composed = base.mappingValues(.string()).mappingKeys { (id: Int) in "\(id)" }.onlyIf { _ in true }
    await composed.handleMemoryPressure(.critical)
    #expect(base.calls == [.memoryPressure(.critical)])
  }

  @Test("value mapping and post-processing keep an entry's metadata both ways")
  func operatorsKeepMetadata() async throws {
    let metadata = EntryMetadata(entityTag: "e", tags: ["t"])
    let data = FakeLayer<String, Data>()
    let text = data.mappingValues(.string())
    try await text.insert(CacheEntry("hello", expiresAt: nil, metadata: metadata), for: "k")
    #expect(data.storedEntries["k"]?.metadata == metadata)
    #expect(try await text.entry(for: "k")?.metadata == metadata)
    let shouting = text.postProcessing { _, value in value.uppercased() }
    #expect(try await shouting.entry(for: "k") == CacheEntry("HELLO", expiresAt: nil, metadata: metadata))
  }

  @Test("a request-capped layer's revalidation waits for a slot, as its other requests do")
  func cappedRevalidationWaitsForASlot() async throws {
    let base = FakeLayer<String, Int>()
    let capped = try base.cappingRequests(at: 1)
    base.hold(.insert)
    let write = Task { try await capped.insert(CacheEntry(0), for: "other") }
    await base.waitForHeld(1, .insert)
    let revalidation = Task { try await capped.revalidate(CacheEntry(1), for: "k", replacing: CacheEntry(1)) }
    await capped.waitForWaitingRequests(1)
    #expect(capped.requestsWaiting == 1)
    base.release(.insert)
    try await write.value
    #expect(try await !revalidation.value, "the fake layer changes nothing in place")
  }

  @Test("a coalescing layer's revalidation detaches the lookup in flight, as a write does")
  func coalescingRevalidationDetachesTheLookup() async throws {
    let base = FakeLayer<String, Int>(entries: ["k": CacheEntry(1)])
    let coalescing = base.coalescingLookups()
    base.hold(.lookup)
    let before = Task { try await coalescing.entry(for: "k") }
    await base.waitForHeld(1, .lookup)
    _ = try await coalescing.revalidate(CacheEntry(1), for: "k", replacing: CacheEntry(1))
    let after = Task { try await coalescing.entry(for: "k") }
    await base.waitForHeld(2, .lookup)
    base.release(.lookup)
    _ = try await before.value
    _ = try await after.value
    #expect(base.callCount(.lookup) == 2, "the request after the revalidation started its own lookup")
  }

  @Test("key mapping, conditions, post-processing and lanes pass a revalidation on to their layers")
  func operatorsForwardRevalidation() async throws {
    let held = CacheEntry(
      1, expiresAt: CacheInstant(secondsSince1970: 4_000_000_000), metadata: EntryMetadata(entityTag: "a"))
    let kept = CacheEntry(
      1, expiresAt: CacheInstant(secondsSince1970: 4_100_000_000), metadata: EntryMetadata(entityTag: "b"))
    let base = FakeLayer<String, Int>()
    base.seed(held, for: "K")
    let mapped = base.mappingKeys { (key: String) in key.uppercased() }
    #expect(try await mapped.revalidate(kept, for: "k", replacing: held))
    #expect(base.storedEntries["K"] == kept)
    let conditional = base.onlyIf { $0 != "K" }
    #expect(try await !conditional.revalidate(held, for: "K", replacing: kept), "refused by the condition")
    #expect(try await base.postProcessing { _, value in value }.revalidate(held, for: "K", replacing: kept))
    let other = FakeLayer<String, Int>()
    let lanes = base.lane(other) { $0.hasPrefix("o") }
    other.seed(held, for: "o")
    #expect(try await lanes.revalidate(kept, for: "o", replacing: held))
    #expect(other.storedEntries["o"] == kept && base.storedEntries["K"] == held)
  }
}
