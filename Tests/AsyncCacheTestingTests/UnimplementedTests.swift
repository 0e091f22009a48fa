import AsyncCache
import AsyncCacheTesting
import Testing

@Suite struct UnimplementedTests {
  @Test func anUnimplementedFetcherRecordsAnIssueAndThrows() async {
    await withKnownIssue {
      let origin = UnimplementedFetcher<String, Int>()
      await #expect(throws: UnimplementedError.self) { try await origin.fetch("a") }
    } matching: { issue in
      issue.description.contains("UnimplementedFetcher.fetch(a)")
    }
  }

  @Test func anUnimplementedLayerRecordsAnIssueForEveryCall() async {
    await withKnownIssue {
      let layer = UnimplementedLayer<String, Int>("disk")
      _ = try? await layer.entry(for: "a")
      _ = try? await layer.insert(CacheEntry(1), for: "a")
      _ = try? await layer.removeValue(for: "a")
      _ = try? await layer.removeAll()
      await layer.handleMemoryPressure(.critical)
    } matching: { issue in
      issue.description.contains("disk.")
    }
  }

  /// Regression: loads ran in detached tasks, without the current test, so the issue of an
  /// unimplemented origin behind a loading cache was recorded against no test at all.
  @Test func anUnimplementedOriginBehindALoadingCacheRecordsItsIssueInTheTest() async throws {
    let cache = try LoadingCache(layers: [try MemoryLayer<String, Int>()], origin: UnimplementedFetcher<String, Int>())
    await withKnownIssue {
      await #expect(throws: UnimplementedError.self) { try await cache.value(for: "a") }
    } matching: { issue in
      issue.description.contains("UnimplementedFetcher.fetch(a)")
    }
  }

  @Test func aCacheServedFromItsLayersNeverReachesAnUnimplementedOrigin() async throws {
    let memory = try MemoryLayer<String, Int>()
    try memory.insert(1, for: "cached")
    let cache = try LoadingCache(layers: [memory], origin: UnimplementedFetcher<String, Int>())
    #expect(try await cache.value(for: "cached") == 1)
  }
}
