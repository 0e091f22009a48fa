import AsyncCacheTesting
import Foundation
import TestSupport
import Testing

@testable import AsyncCache

@Suite("SynchronousLookupLayer", .timeLimit(.minutes(3)))
struct SynchronousLookupLayerTests {
  struct UserID: Hashable, Sendable {
    var rawValue: Int
  }

  /// Memory keyed by `Int` holding `Int`, seen as `UserID → String` through synchronous
  /// operators.
  static func composedMemory() throws -> (
    memory: MemoryLayer<Int, Int>,
    layer: PostProcessedLayer<ConditionalLayer<KeyMappedLayer<UserID, ValueMappedLayer<String, MemoryLayer<Int, Int>>>>>
  ) {
    let memory = try MemoryLayer<Int, Int>()
    let layer =
      memory
      .mappingValues(ValueTransform(decode: { "\($0)" }, encode: { Int($0) ?? 0 }))
      .mappingKeys { (id: UserID) in
        guard id.rawValue != 13 else { throw TestError("refused") }
        return id.rawValue
      }
      .onlyIf { $0.rawValue >= 0 }
      .postProcessing { id, name in "\(id.rawValue):\(name)" }
    return (memory, layer)
  }

  @Test("a loading cache over synchronous operators on a memory layer answers hits without suspending")
  func loadingCacheHitsSynchronously() async throws {
    let (memory, top) = try Self.composedMemory()
    let lower = RecordingLayer(try MemoryLayer<UserID, String>())
    let origin = GatedFetcher<UserID, String> { "\($0.rawValue * 10)" }
    origin.open()
    let cache = try LoadingCache(layers: [top, lower], origin: origin)

    #expect(cache.cachedValue(for: UserID(rawValue: 4)) == nil)
    #expect(
      try await cache.value(for: UserID(rawValue: 4)) == "40", "the origin's value; post-processing is for lookups")
    #expect(memory.value(for: 4) == 40, "stored through the operators")
    lower.clearCalls()
    #expect(cache.cachedValue(for: UserID(rawValue: 4)) == "4:40", "synchronous, through every operator")
    #expect(try await cache.value(for: UserID(rawValue: 4)) == "4:40")
    #expect(lower.calls.isEmpty && origin.callCount(for: UserID(rawValue: 4)) == 1, "hits never went below the top")
  }

  @Test("the synchronous answer agrees with entry(for:) for hits, misses and refusals")
  func agreesWithEntry() async throws {
    let (memory, layer) = try Self.composedMemory()
    for key in stride(from: 0, to: 20, by: 2) { try memory.insert(key * 3, for: key) }
    for raw in -2..<22 where raw != 13 {
      let id = UserID(rawValue: raw)
      let expected = try await layer.entry(for: id)?.value
      switch try layer.lookUpWithoutSuspending(id) {
      case .found(let value): #expect(value == expected, "key \(raw)")
      case .missing: #expect(expected == nil, "key \(raw)")
      case .unavailable: Issue.record("every function is synchronous, key \(raw)")
      }
    }
  }

  @Test("a failing transform falls back to the chain, which records it and skips the layer")
  func failureFallsBackToTheChain() async throws {
    let (_, top) = try Self.composedMemory()
    let origin = GatedFetcher<UserID, String> { "origin \($0.rawValue)" }
    origin.open()
    let cache = try LoadingCache(layers: [top], origin: origin)
    #expect(throws: AsyncCacheError.self) { try top.lookUpWithoutSuspending(UserID(rawValue: 13)) }
    #expect(cache.cachedValue(for: UserID(rawValue: 13)) == nil)
    #expect(try await cache.value(for: UserID(rawValue: 13)) == "origin 13")
    try #require(cache.chain.statistics.tiers.count == 1)
    #expect(cache.chain.statistics.tiers[0].failures >= 1)
  }

  @Test("an async function makes the answer unavailable; requests still hit through the chain")
  func asyncFunctionsAreUnavailable() async throws {
    let memory = try MemoryLayer<Int, Int>()
    let setting = Setting()
    let top = memory.onlyIf { _ in await setting.enabled }
    try memory.insert(7, for: 1)
    let unavailable: Bool
    if case .unavailable = try top.lookUpWithoutSuspending(1) { unavailable = true } else { unavailable = false }
    #expect(unavailable)
    let cache = try LoadingCache(layers: [top], origin: UnimplementedFetcher<Int, Int>())
    #expect(cache.cachedValue(for: 1) == nil)
    #expect(try await cache.value(for: 1) == 7, "a hit through the chain, never the origin")
  }

  @Test("a nested chain on top passes its synchronous front on")
  func nestedChain() async throws {
    let (memory, top) = try Self.composedMemory()
    let inner = try CacheChain([top])
    let cache = try LoadingCache(chain: try CacheChain([inner]), origin: GatedFetcher<UserID, String> { _ in "" })
    try memory.insert(5, for: 2)
    #expect(cache.cachedValue(for: UserID(rawValue: 2)) == "2:5")
  }

  /// Maps keys in code that does not know the layer answers synchronously.
  static func mapped<Layer: AsyncCacheLayer<Int, Int>>(_ layer: Layer) -> KeyMappedLayer<UserID, Layer> {
    layer.mappingKeys { (id: UserID) in id.rawValue }
  }

  @Test("an operator made in generic code still answers synchronously, through its conformance")
  func operatorMadeInGenericCode() async throws {
    let memory = try MemoryLayer<Int, Int>()
    let top = Self.mapped(memory)
    #expect(top.synchronousLookup == nil, "the generic overload builds no closure")
    try memory.insert(3, for: 1)
    let cache = try LoadingCache(layers: [top], origin: GatedFetcher<UserID, Int> { _ in 0 })
    #expect(cache.cachedValue(for: UserID(rawValue: 1)) == 3)
    #expect(cache.cachedValue(for: UserID(rawValue: 2)) == nil)
  }

  @Test("operators over a synchronous layer build their lookup when made")
  func operatorsBuildTheirLookup() throws {
    let (_, top) = try Self.composedMemory()
    #expect(top.synchronousLookup != nil)
    #expect(top.base.synchronousLookup != nil && top.base.base.synchronousLookup != nil)
  }

  actor Setting {
    var enabled = true
  }
}
