import AsyncCache
import TestSupport
import Testing

/// A layer that records what reaches it besides entries: memory pressure, environments, closing.
actor PlumbingRecorder: AsyncCacheLayer {
  nonisolated let coordinator: ScriptedCoordinator
  private nonisolated let log = Locked<[String]>([])

  init(coordinator: ScriptedCoordinator) { self.coordinator = coordinator }

  nonisolated var received: [String] { log.withLock { $0 } }

  nonisolated func entry(for key: String) async throws -> CacheEntry<String>? { nil }
  nonisolated func insert(_ entry: CacheEntry<String>, for key: String) async throws {}
  nonisolated func removeValue(for key: String) async throws {}
  nonisolated func removeAll() async throws {}
  nonisolated func handleMemoryPressure(_ level: MemoryPressureLevel) async { log.withLock { $0.append("pressure") } }
  nonisolated func follow(_ environment: CacheEnvironment) { log.withLock { $0.append("follow") } }
  nonisolated func close() async throws { log.withLock { $0.append("close") } }
  nonisolated var loadCoordinator: (any LoadCoordinator<String, String>)? { coordinator }
}

/// A user's wrapper: one line of plumbing.
actor CountingLayer<Base: AsyncCacheLayer>: WrappingCacheLayer {
  nonisolated let base: Base
  init(_ base: Base) { self.base = base }
  nonisolated var wrappedLayer: any AsyncCacheLayer { base }

  nonisolated func entry(for key: Base.Key) async throws -> CacheEntry<Base.Value>? { try await base.entry(for: key) }
  nonisolated func insert(_ entry: CacheEntry<Base.Value>, for key: Base.Key) async throws {
    try await base.insert(entry, for: key)
  }
  nonisolated func removeValue(for key: Base.Key) async throws { try await base.removeValue(for: key) }
  nonisolated func removeAll() async throws { try await base.removeAll() }
}

@Suite("Layers that wrap a layer pass it what is not about entries")
struct WrappingCacheLayerTests {
  typealias Wrapper = @Sendable (PlumbingRecorder) throws -> any AsyncCacheLayer<String, String>

  /// Every wrapper of the library, and a user's, by name.
  static let wrappers: [(name: String, passesCoordinator: Bool, make: Wrapper)] = [
    ("mappingKeys", false, { $0.mappingKeys { (key: String) in key } }),
    (
      "mappingValues", false,
      { $0.mappingValues(ValueTransform<String, String>(decode: { $0 }, encode: { $0 })) }
    ),
    ("onlyIf", false, { $0.onlyIf { _ in true } }),
    ("postProcessing", false, { $0.postProcessing { _, value in value } }),
    ("a user's WrappingCacheLayer", false, { CountingLayer($0) }),
    ("coalescingLookups", true, { $0.coalescingLookups() }),
    ("cappingRequests", true, { try $0.cappingRequests(at: 2) }),
    ("eraseToAnyLayer", true, { $0.eraseToAnyLayer() }),
  ]

  @Test(
    "memory pressure, the environment and closing reach the wrapped layer",
    arguments: wrappers.indices)
  func plumbingReachesTheWrappedLayer(index: Int) async throws {
    let wrapper = Self.wrappers[index]
    let recorder = PlumbingRecorder(coordinator: ScriptedCoordinator { _ in .uncoordinated })
    // Called through the protocol, as a chain calls them.
    let layer = try wrapper.make(recorder)
    await layer.handleMemoryPressure(.critical)
    layer.follow(CacheEnvironment())
    try await layer.close()
    #expect(recorder.received == ["pressure", "follow", "close"], "\(wrapper.name)")
  }

  @Test(
    "the wrapped layer's load coordinator is passed on only by wrappers that store what they are given",
    arguments: wrappers.indices)
  func loadCoordinatorOnlyThroughPassThroughLayers(index: Int) throws {
    let wrapper = Self.wrappers[index]
    let recorder = PlumbingRecorder(coordinator: ScriptedCoordinator { _ in .uncoordinated })
    let offered = try wrapper.make(recorder).loadCoordinator
    if wrapper.passesCoordinator {
      #expect((offered as? ScriptedCoordinator) === recorder.coordinator, "\(wrapper.name)")
    } else {
      #expect(offered == nil, "\(wrapper.name)")
    }
  }
}
