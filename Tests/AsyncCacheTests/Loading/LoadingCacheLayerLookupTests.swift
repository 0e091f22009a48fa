import AsyncCache
import AsyncCacheTesting
import TestSupport
import Testing

@Suite("Each layer lookup, reported", .timeLimit(.minutes(3)))
struct LoadingCacheLayerLookupTests {
  @Test("a load reports each layer it looked up: a miss, a hit, a failure, and how long each took")
  func eachLookup() async throws {
    let clock = ManualClock()
    let reports = Locked<[LayerLookupReport]>([])
    let disk = FakeLayer<Int, Int>()
    let origin = GatedFetcher<Int, Int> { $0 * 10 }
    origin.open()
    let cache = try LoadingCache(
      tiers: [.init(MemoryLayer<Int, Int>(), name: "memory"), .init(disk, failurePolicy: .skip, name: "disk")],
      origin: origin,
      configuration: .init(clock: clock, onLayerLookup: { report in reports.withLock { $0.append(report) } }))

    // A miss everywhere, the disk taking 5 ms.
    disk.hold(.lookup)
    let request = Task { try await cache.value(for: 1) }
    await disk.waitForHeld(1, .lookup)
    clock.advance(by: .milliseconds(5))
    disk.release(.lookup)
    #expect(try await request.value == 10)
    var seen = reports.withLock { $0 }
    #expect(seen.map(\.layerName) == ["memory", "disk"])
    #expect(seen.map(\.tierIndex) == [0, 1])
    #expect(seen.map(\.outcome.name) == ["miss", "miss"])
    #expect(seen.map(\.duration) == [.zero, .milliseconds(5)])

    // A hit of the top layer is not a lookup of the chain.
    #expect(try await cache.value(for: 1) == 10)
    #expect(reports.withLock { $0.count } == 2)

    // A hit lower down.
    disk.seed(CacheEntry(7), for: 2)
    #expect(try await cache.value(for: 2) == 7)
    seen = reports.withLock { $0 }
    #expect(seen.suffix(2).map(\.outcome.name) == ["miss", "hit"])

    // A failure, skipped.
    disk.fail(.lookup, with: TestError("disk gone"))
    #expect(try await cache.value(for: 3) == 30)
    let failed = try #require(reports.withLock { $0.last })
    #expect(failed.layerName == "disk")
    guard case .failed(let error) = failed.outcome else {
      Issue.record("expected a failure, got \(failed.outcome)")
      return
    }
    #expect(error is TestError)
  }

  @Test("a chain given its own observer keeps it; one given none follows its cache's")
  func chainsObserver() async throws {
    let cacheReports = Locked(0)
    let chainReports = Locked(0)
    let own = try CacheChain<Int, Int>(
      [.init(MemoryLayer<Int, Int>())], configuration: .init(onLookup: { _ in chainReports.withLock { $0 += 1 } }))
    let following = try CacheChain<Int, Int>([.init(MemoryLayer<Int, Int>())])
    for chain in [own, following] {
      let origin = GatedFetcher<Int, Int> { $0 }
      origin.open()
      let cache = try LoadingCache(
        chain: chain, origin: origin,
        configuration: .init(onLayerLookup: { _ in cacheReports.withLock { $0 += 1 } }))
      #expect(try await cache.value(for: 1) == 1)
    }
    #expect(chainReports.withLock { $0 } == 1)
    #expect(cacheReports.withLock { $0 } == 1)
  }

  @Test("a nested chain is one layer of its outer chain: each lookup is reported once")
  func nestedChain() async throws {
    let reports = Locked<[LayerLookupReport]>([])
    let inner = try CacheChain<Int, Int>([.init(FakeLayer<Int, Int>(), name: "disk")])
    let origin = GatedFetcher<Int, Int> { $0 }
    origin.open()
    let cache = try LoadingCache(
      tiers: [.init(MemoryLayer<Int, Int>(), name: "memory"), .init(inner, name: "inner")], origin: origin,
      configuration: .init(onLayerLookup: { report in reports.withLock { $0.append(report) } }))
    #expect(try await cache.value(for: 1) == 1)
    let seen = reports.withLock { $0 }.map { "\($0.tierIndex):\($0.layerName):\($0.outcome)" }
    #expect(seen == ["0:memory:miss", "1:inner:miss"])
  }

  @Test("a lookup cut short by a cancellation is not reported as a failure")
  func cancelledLookup() async throws {
    let reports = Locked<[LayerLookupReport]>([])
    let disk = FakeLayer<Int, Int>()
    let cache = try LoadingCache(
      tiers: [.init(MemoryLayer<Int, Int>(), name: "memory"), .init(disk, name: "disk")],
      origin: UnimplementedFetcher<Int, Int>(),
      configuration: .init(onLayerLookup: { report in reports.withLock { $0.append(report) } }))
    disk.hold(.lookup)
    let request = Task { try await cache.value(for: 1) }
    await disk.waitForHeld(1, .lookup)
    request.cancel()
    await #expect(throws: CancellationError.self) { try await request.value }
    try await cache.close()  // waits for the abandoned load
    let disks = reports.withLock { $0 }.filter { $0.layerName == "disk" }
    #expect(disks.allSatisfy { $0.outcome.name != "failed" }, "\(disks.map(\.outcome))")
  }
}
