import AsyncCacheTesting
import Foundation
import Testing

@testable import AsyncCache

@Suite("Composition", .timeLimit(.minutes(3)))
struct CompositionTests {
  struct User: Hashable, Sendable, Codable {
    var id: String
    var name: String
  }

  // MARK: Type erasure

  @Test("an erased layer kept in a property goes on composing, which an existential cannot")
  func erasedLayerComposes() async throws {
    let disk = try MemoryLayer<String, Data>()
    let stored: AnyCacheLayer<String, User> = disk.mappingValues(.json(User.self)).eraseToAnyLayer()
    let byNumber = stored.mappingKeys { (id: Int) in "user-\(id)" }.onlyIf { $0 > 0 }
    try await byNumber.insert(CacheEntry(User(id: "7", name: "Grace")), for: 7)
    #expect(disk.value(for: "user-7") != nil)
    #expect(try await byNumber.entry(for: 7)?.value.name == "Grace")
    #expect(try await byNumber.entry(for: -7) == nil)

    let twice = stored.eraseToAnyLayer()
    #expect(twice.base is ValueMappedLayer<User, MemoryLayer<String, Data>>, "not wrapped twice")
    await byNumber.handleMemoryPressure(.critical)
    #expect(disk.count == 0, "pressure reaches the memory layer behind the erasure")
  }

  @Test("an erased origin goes on composing and serves a loading cache")
  func erasedFetcherComposes() async throws {
    let stored: AnyFetcher<String, Data> = ClosureFetcher { (key: String) in Data(key.utf8) }.eraseToAnyFetcher()
    let origin = stored.mappingValues { String(decoding: $0, as: UTF8.self) }.mappingKeys { (id: Int) in "n\(id)" }
    let cache = try LoadingCache(layers: [MemoryLayer<Int, String>()], origin: origin)
    #expect(try await cache.value(for: 3) == "n3")
    #expect(AnyFetcher(stored).base is ClosureFetcher<String, Data>, "not wrapped twice")
  }

  // MARK: Synchronous functions

  @Test("synchronous functions stay synchronous; async ones are kept as given")
  func synchronousFunctionsStaySynchronous() async throws {
    let memory = try MemoryLayer<String, Int>()
    func isSync<Input, Output>(_ function: OperatorFunction<Input, Output>) -> Bool {
      function.isSynchronous
    }
    #expect(isSync(memory.mappingKeys { (id: Int) in "\(id)" }.transform))
    #expect(isSync(memory.onlyIf { !$0.isEmpty }.predicate))
    #expect(isSync(memory.postProcessing { _, value in value + 1 }.transform))
    #expect(isSync(ValueTransform<Int, Int>(decode: { $0 }, encode: { $0 }).decoder))
    #expect(isSync(ValueTransform<Data, String>.string().encoder))

    let slow = SlowSetting()
    #expect(!isSync(memory.mappingKeys { (id: Int) in await slow.prefix + "\(id)" }.transform))
    #expect(!isSync(memory.onlyIf { _ in await slow.enabled }.predicate))
    let conditioned = memory.onlyIf { _ in await slow.enabled }
    try memory.insert(1, for: "k")
    #expect(try await conditioned.entry(for: "k")?.value == 1)
  }

  actor SlowSetting {
    var enabled = true
    var prefix = "id-"
  }

  // MARK: Origins

  /// An origin written as a type, as opposed to a closure.
  struct Directory: AsyncFetcher {
    let names: [String: String]
    func fetch(_ key: String) async throws -> String {
      guard let name = names[key] else { throw URLError(.fileDoesNotExist) }
      return name
    }
  }

  enum OriginKind: CaseIterable, Sendable {
    case closure, type

    func make() -> AnyFetcher<String, String> {
      let names = ["1": "ada", "2": "grace"]
      switch self {
      case .closure:
        return ClosureFetcher { key in
          guard let name = names[key] else { throw URLError(.fileDoesNotExist) }
          return name
        }.eraseToAnyFetcher()
      case .type:
        return Directory(names: names).eraseToAnyFetcher()
      }
    }
  }

  @Test("closure and type origins compose with every fetcher operator", arguments: OriginKind.allCases)
  func originsCompose(kind: OriginKind) async throws {
    let origin = kind.make()
      .mappingKeys { (user: Int) in "\(user)" }
      .mappingValues { User(id: "?", name: $0) }
      .postProcessing { id, user in User(id: "\(id)", name: user.name.capitalized) }
    let cache = try LoadingCache(layers: [MemoryLayer<Int, User>()], origin: origin)
    #expect(try await cache.value(for: 1) == User(id: "1", name: "Ada"))
    #expect(try await cache.value(for: 2) == User(id: "2", name: "Grace"))
    await #expect(throws: URLError.self) { try await cache.value(for: 3) }
  }

  // MARK: The whole algebra

  @Test("transform ∘ condition ∘ cap ∘ coalescing ∘ chain: a model cache over a slow, capped store of JSON")
  func everythingTogether() async throws {
    let store = FakeLayer<String, Data>()
    let lower =
      try store
      .coalescingLookups()
      .cappingRequests(at: 1)
      .mappingValues(.json(User.self))
      .mappingKeys { (id: Int) in "user-\(id)" }
      .onlyIf { id in id < 100 }  // ids from 100 up are never stored
    let memory = try MemoryLayer<Int, User>()
    let origin = GatedFetcher<Int, User> { User(id: "\($0)", name: "user \($0)") }
    let cache = try LoadingCache(layers: [memory, lower], origin: origin)

    // A miss goes through every operator down to the store, then to the origin.
    origin.open()
    #expect(try await cache.value(for: 1).name == "user 1")
    #expect(
      store.storedEntries["user-1"].map { String(decoding: $0.value, as: UTF8.self) } == #"{"id":"1","name":"user 1"}"#)
    #expect(try await cache.value(for: 100).name == "user 100")
    #expect(store.storedEntries["user-100"] == nil, "the condition kept it out")

    // A fresh cache over the same lower layers: hits come from the store, decoded.
    let restarted = try LoadingCache(layers: [MemoryLayer<Int, User>(), lower], origin: origin)
    #expect(try await restarted.value(for: 1).name == "user 1")
    #expect(origin.callCount(for: 1) == 1)

    // The cap lets one lookup reach the store; a request cancelled behind it leaves unwrapped.
    store.seed(CacheEntry(Data(#"{"id":"2","name":"two"}"#.utf8)), for: "user-2")
    store.seed(CacheEntry(Data(#"{"id":"3","name":"three"}"#.utf8)), for: "user-3")
    store.hold(.lookup)
    let first = Task { try await restarted.value(for: 2) }
    await store.waitForHeld(1, .lookup)
    let queued = Task { try await restarted.value(for: 3) }
    let capped = try #require(findCap(in: lower))
    await capped.waitForWaitingRequests(1)
    queued.cancel()
    await #expect(throws: CancellationError.self) { try await queued.value }
    store.release(.lookup)
    #expect(try await first.value.name == "two")
    #expect(store.callCount(.lookup) == 3, "1, then 1 again, then 2; 100 was refused and 3 never reached the store")
  }

  private func findCap(
    in layer: ConditionalLayer<
      KeyMappedLayer<Int, ValueMappedLayer<User, RequestCappedLayer<CoalescingLayer<FakeLayer<String, Data>>>>>
    >
  ) -> RequestCappedLayer<CoalescingLayer<FakeLayer<String, Data>>>? {
    layer.base.base.base
  }

  @Test("memory pressure reaches the layer behind every operator of a composed chain")
  func pressureReachesEveryLayer() async throws {
    let bottoms = (0..<7).map { _ in FakeLayer<String, String>() }
    let layers: [any AsyncCacheLayer<String, String>] = [
      bottoms[0].mappingKeys { (key: String) in key },
      bottoms[1].mappingValues(ValueTransform(decode: { $0 }, encode: { $0 })),
      bottoms[2].onlyIf { _ in false },
      bottoms[3].postProcessing { _, value in value }.lane(bottoms[4]) { _ in true },
      try bottoms[5].cappingRequests(at: 1).coalescingLookups(),
      bottoms[6].eraseToAnyLayer(),
    ]
    let cache = try LoadingCache(layers: layers, origin: ClosureFetcher { $0 })
    await cache.chain.handleMemoryPressure(.critical)
    for (index, bottom) in bottoms.enumerated() {
      #expect(bottom.memoryPressureLevels == [.critical], "layer \(index)")
    }
  }
}
