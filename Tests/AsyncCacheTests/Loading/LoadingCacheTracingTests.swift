import AsyncCache
import AsyncCacheTesting
import TestSupport
import Testing

@Suite(.timeLimit(.minutes(3)))
struct LoadingCacheTracingTests {
  /// A cache over one memory layer, its origin gated, tracing to the tracer returned.
  private func gatedCache() throws -> (RecordingTracer, GatedFetcher<Int, Int>, LoadingCache<Int, Int>) {
    let tracer = RecordingTracer()
    let origin = GatedFetcher<Int, Int> { $0 }
    let cache = try LoadingCache(
      layers: [try MemoryLayer<Int, Int>()], origin: origin, configuration: .init(tracer: tracer))
    return (tracer, origin, cache)
  }

  @Test func aLoadIsASpanUnderItsRequestWithTheOriginCallUnderIt() async throws {
    let tracer = RecordingTracer()
    let origin = GatedFetcher<Int, Int> { $0 * 10 }
    origin.open()
    let cache = try LoadingCache(
      tiers: [.init(MemoryLayer<Int, Int>(), name: "memory")], origin: origin, configuration: .init(tracer: tracer))
    let value = try await tracer.withSpan("request") { _ in try await cache.value(for: 4) }
    #expect(value == 40)
    let load = try #require(await tracer.waitForEndedSpans(named: "cache.load").first)
    let request = try #require(tracer.spans(named: "request").first)
    #expect(load.parent == request.id, "the load's task inherits its request's context")
    #expect(load.attributes["cache.key"] == "4")
    #expect(load.attributes["cache.refresh"] == false)
    #expect(load.attributes["cache.outcome"] == "loaded")
    #expect(load.attributes["cache.source"] == "origin")
    #expect(load.attributes["cache.attempts"] == 1)
    #expect(load.errors.isEmpty)
    let fetch = try #require(tracer.children(of: load.id).first)
    #expect(fetch.name == "cache.origin.fetch")
    #expect(fetch.attributes == ["cache.key": "4", "cache.attempt": 1])
    #expect(fetch.isEnded)
    #expect(tracer.spans.count == 3, "no layer spans unless asked: \(tracer.spans)")

    // A hit is not a load: no span.
    #expect(try await cache.value(for: 4) == 40)
    #expect(tracer.spans.count == 3)
  }

  @Test func coalescedRequestsShareOneLoadSpan() async throws {
    let (tracer, origin, cache) = try gatedCache()
    let requests = (0..<3).map { _ in Task { try await cache.value(for: 1) } }
    await cache.waitForRequests(3, for: 1)
    await origin.waitForFetches(1, for: 1)
    #expect(origin.release(1) == 1)
    for request in requests { #expect(try await request.value == 1) }
    await tracer.waitForEndedSpans(named: "cache.load")
    #expect(tracer.spans(named: "cache.load").count == 1)
    #expect(tracer.spans(named: "cache.origin.fetch").count == 1)
  }

  @Test func aFailedLoadRecordsItsErrorAndItsType() async throws {
    let (tracer, origin, cache) = try gatedCache()
    let request = Task { try await cache.value(for: 1) }
    await origin.waitForFetches(1, for: 1)
    #expect(origin.release(1, throwing: TestError("down")) == 1)
    await #expect(throws: TestError.self) { try await request.value }
    let load = try #require(await tracer.waitForEndedSpans(named: "cache.load").first)
    #expect(load.attributes["cache.outcome"] == "failed")
    #expect(load.attributes["cache.source"] == nil)
    #expect(load.attributes["error.type"] == "TestError")
    #expect(load.errors.count == 1)
    #expect(load.errors.first is TestError)
    let fetch = try #require(tracer.spans(named: "cache.origin.fetch").first)
    #expect(fetch.attributes["error.type"] == "TestError")
    #expect(fetch.errors.first is TestError)
  }

  @Test func aLoadItsRequestsLeftIsCancelledNotFailed() async throws {
    let (tracer, origin, cache) = try gatedCache()
    let request = Task { try await cache.value(for: 1) }
    await origin.waitForFetches(1, for: 1)
    request.cancel()
    await #expect(throws: CancellationError.self) { try await request.value }
    let load = try #require(await tracer.waitForEndedSpans(named: "cache.load").first)
    #expect(load.attributes["cache.outcome"] == "cancelled")
    #expect(load.errors.isEmpty)
    #expect(load.attributes["error.type"] == nil)
    let fetch = try #require(tracer.spans(named: "cache.origin.fetch").first)
    #expect(fetch.attributes["error.type"] == nil, "a cancelled origin call did not fail")
    #expect(fetch.errors.allSatisfy { $0 is CancellationError }, "\(fetch.errors)")
  }

  @Test func retriesAreOneOriginSpanEach() async throws {
    let tracer = RecordingTracer()
    let clock = ManualClock()
    let origin = GatedFetcher<Int, Int> { $0 }
    let cache = try LoadingCache(
      layers: [try MemoryLayer<Int, Int>()], origin: origin,
      configuration: .init(
        clock: clock, retryPolicy: RetryPolicy(maximumAttempts: 2, initialDelay: .seconds(1), jitter: 0),
        tracer: tracer))
    let request = Task { try await cache.value(for: 1) }
    await origin.waitForFetches(1, for: 1)
    #expect(origin.release(1, throwing: TestError("flaky")) == 1)
    await clock.waitForSleepers(1)
    clock.advance(by: .seconds(1))
    await origin.waitForFetches(1, for: 1)
    #expect(origin.release(1) == 1)
    #expect(try await request.value == 1)
    let load = try #require(await tracer.waitForEndedSpans(named: "cache.load").first)
    #expect(load.attributes["cache.attempts"] == 2)
    #expect(load.errors.isEmpty, "the load succeeded")
    let fetches = tracer.children(of: load.id)
    try #require(fetches.count == 2)
    #expect(fetches.map { $0.attributes["cache.attempt"] } == [1, 2])
    #expect(fetches[0].errors.first is TestError)
    #expect(fetches[1].errors.isEmpty)
  }

  @Test func layerOperationsAreSpansWhenTheTracerAsks() async throws {
    let tracer = RecordingTracer(tracesLayerOperations: true)
    let disk = FakeLayer<Int, Int>()
    disk.seed(CacheEntry(7), for: 1)
    let cache = try LoadingCache(
      tiers: [.init(MemoryLayer<Int, Int>(), name: "memory"), .init(disk, name: "disk")],
      origin: UnimplementedFetcher<Int, Int>(), configuration: .init(tracer: tracer))
    #expect(try await cache.value(for: 1) == 7)
    let load = try #require(await tracer.waitForEndedSpans(named: "cache.load").first)
    #expect(load.attributes["cache.source"] == "disk")
    #expect(load.attributes["cache.attempts"] == 0)
    let children = tracer.children(of: load.id)
    #expect(children.map(\.name) == ["cache.layer.lookup", "cache.layer.lookup", "cache.layer.write"])
    try #require(children.count == 3)
    #expect(children[0].attributes == ["cache.layer": "memory", "cache.key": "1", "cache.hit": false])
    #expect(children[1].attributes == ["cache.layer": "disk", "cache.key": "1", "cache.hit": true])
    #expect(children[2].attributes == ["cache.layer": "memory", "cache.key": "1"], "the copy up")
    #expect(tracer.spans(named: "cache.origin.fetch").isEmpty)
  }

  @Test func aLayerFailureIsRecordedOnItsSpan() async throws {
    let tracer = RecordingTracer(tracesLayerOperations: true)
    let disk = FakeLayer<Int, Int>()
    disk.fail(.lookup, with: TestError("disk gone"))
    let origin = GatedFetcher<Int, Int> { $0 }
    origin.open()
    let cache = try LoadingCache(
      tiers: [.init(MemoryLayer<Int, Int>(), name: "memory"), .init(disk, failurePolicy: .skip, name: "disk")],
      origin: origin, configuration: .init(tracer: tracer))
    #expect(try await cache.value(for: 1) == 1)
    let load = try #require(await tracer.waitForEndedSpans(named: "cache.load").first)
    #expect(load.errors.isEmpty, "a skipped layer does not fail the load")
    let lookup = try #require(tracer.children(of: load.id).first { $0.attributes["cache.layer"] == "disk" })
    #expect(lookup.name == "cache.layer.lookup")
    #expect(lookup.attributes["error.type"] == "TestError")
    #expect(lookup.errors.first is TestError)
  }

  @Test func aBatchIsOneSpanWithItsOriginCallUnderIt() async throws {
    let tracer = RecordingTracer()
    let batches = ClosureBatchFetcher<Int, Int>(maximumBatchSize: 10) { keys in
      Dictionary(uniqueKeysWithValues: keys.map { ($0, $0 * 2) })
    }
    let cache = try LoadingCache(
      layers: [try MemoryLayer<Int, Int>()], origin: UnimplementedFetcher<Int, Int>(), batchOrigin: batches,
      configuration: .init(tracer: tracer))
    let outcome = await cache.values(for: [1, 2, 3])
    #expect(outcome.values == [1: 2, 2: 4, 3: 6])
    let batch = try #require(await tracer.waitForEndedSpans(named: "cache.load_batch").first)
    #expect(batch.attributes["cache.keys.count"] == 3)
    let fetch = try #require(tracer.children(of: batch.id).first)
    #expect(fetch.name == "cache.origin.fetch")
    #expect(fetch.attributes == ["cache.keys.count": 3, "cache.attempt": 1])
  }

  @Test func aChainGivenItsOwnTracerKeepsIt() async throws {
    let cacheTracer = RecordingTracer(tracesLayerOperations: true)
    let chainTracer = RecordingTracer(tracesLayerOperations: true)
    let chain = try CacheChain<Int, Int>(
      [.init(MemoryLayer<Int, Int>(), name: "memory")], configuration: .init(tracer: chainTracer))
    let origin = GatedFetcher<Int, Int> { $0 }
    origin.open()
    let cache = try LoadingCache(chain: chain, origin: origin, configuration: .init(tracer: cacheTracer))
    #expect(try await cache.value(for: 1) == 1)
    await cacheTracer.waitForEndedSpans(named: "cache.load")
    #expect(cacheTracer.spans(named: "cache.layer.lookup").isEmpty)
    #expect(chainTracer.spans(named: "cache.layer.lookup").count == 1)
    #expect(chainTracer.spans(named: "cache.layer.write").count == 1)
  }

  @Test func aChainFollowsTheTracerOfItsCache() async throws {
    let tracer = RecordingTracer(tracesLayerOperations: true)
    let chain = try CacheChain<Int, Int>([.init(MemoryLayer<Int, Int>(), name: "memory")])
    let origin = GatedFetcher<Int, Int> { $0 }
    origin.open()
    let cache = try LoadingCache(chain: chain, origin: origin, configuration: .init(tracer: tracer))
    #expect(try await cache.value(for: 1) == 1)
    let load = try #require(await tracer.waitForEndedSpans(named: "cache.load").first)
    #expect(
      tracer.children(of: load.id).map(\.name) == ["cache.layer.lookup", "cache.origin.fetch", "cache.layer.write"])
  }
}
