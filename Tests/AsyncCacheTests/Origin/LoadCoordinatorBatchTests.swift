import AsyncCache
import AsyncCacheTesting
import Synchronization
import TestSupport
import Testing

@Suite("A bulk request through a batch origin, over a layer that coordinates loads", .timeLimit(.minutes(3)))
struct LoadCoordinatorBatchTests {
  /// memory (top) → the coordinated layer → memory (bottom), with a batch origin.
  struct Fixture {
    let top = try! MemoryLayer<String, String>()
    let shared: CoordinatedLayer<ScriptedCoordinator>
    let bottom = try! MemoryLayer<String, String>()
    let origin = GatedBatchOrigin<String, String> { _, key in "origin \(key)" }
    let cache: LoadingCache<String, String>

    init(_ coordinator: ScriptedCoordinator, omitting: Set<String> = []) throws {
      shared = CoordinatedLayer(coordinator)
      cache = try LoadingCache(
        layers: [top, shared, bottom],
        origin: ClosureFetcher { key in throw TestError("a batch's key reached the single origin: \(key)") },
        batchOrigin: origin.fetcher(omitting: omitting))
    }

    var coordinator: ScriptedCoordinator { shared.coordinator }
  }

  @Test(
    "each key is claimed; the granted and uncoordinated ones are fetched in one call, the one loaded elsewhere is not")
  func claimsDecideWhatIsFetchedAndWhereItGoes() async throws {
    let fixture = try Fixture(
      ScriptedCoordinator { key in
        switch key {
        case "granted": .granted(token: 7)
        case "elsewhere": .loadedElsewhere(CacheEntry("remote"))
        default: .uncoordinated
        }
      })
    fixture.origin.open()
    let bulk = try await fixture.cache.allValues(for: ["granted", "elsewhere", "alone"])
    #expect(bulk == ["granted": "origin granted", "elsewhere": "remote", "alone": "origin alone"])
    let calls = fixture.origin.calls
    try #require(calls.count == 1)
    #expect(Set(calls[0].keys) == ["granted", "alone"])
    #expect(Set(fixture.coordinator.claims.map(\.0)) == ["granted", "elsewhere", "alone"])
    // The granted key's claim is completed with its value; the coordinator stores it in its layer.
    let completions = fixture.coordinator.completions
    try #require(completions.count == 1)
    #expect(completions[0].key == "granted" && completions[0].token == 7 && completions[0].value == "origin granted")
    // The chain stores the loaded values in every layer but the coordinator's…
    for key in ["granted", "alone"] {
      #expect(fixture.top.value(for: key) == "origin \(key)")
      #expect(fixture.shared.base.value(for: key) == nil)
      #expect(fixture.bottom.value(for: key) == "origin \(key)")
    }
    // …and copies the one loaded elsewhere into the layers above the coordinator's only.
    #expect(fixture.top.value(for: "elsewhere") == "remote")
    #expect(fixture.bottom.value(for: "elsewhere") == nil)
  }

  @Test("a key whose claim is superseded answers the request and is stored nowhere")
  func superseded() async throws {
    let fixture = try Fixture(ScriptedCoordinator(completion: .superseded) { _ in .granted(token: 1) })
    fixture.origin.open()
    #expect(try await fixture.cache.allValues(for: ["a", "b"]) == ["a": "origin a", "b": "origin b"])
    for key in ["a", "b"] { #expect(fixture.top.value(for: key) == nil && fixture.bottom.value(for: key) == nil) }
  }

  @Test("a batch origin error completes every granted claim with it, and reaches the requests")
  func originError() async throws {
    let fixture = try Fixture(ScriptedCoordinator { _ in .granted(token: 3) })
    fixture.origin.open(throwing: TestError("down"))
    let bulk = await fixture.cache.values(for: ["a", "b"])
    #expect(bulk.values.isEmpty)
    #expect(Set(bulk.failures.keys) == ["a", "b"])
    #expect(bulk.failures.values.allSatisfy { ($0 as? TestError) == TestError("down") })
    let completions = fixture.coordinator.completions
    #expect(completions.map(\.key).sorted() == ["a", "b"])
    #expect(completions.allSatisfy { ($0.error as? TestError) == TestError("down") })
  }

  @Test("a key the batch origin leaves out completes its claim with notFound; the others are stored")
  func keyLeftOut() async throws {
    let fixture = try Fixture(ScriptedCoordinator { _ in .granted(token: 2) }, omitting: ["gone"])
    fixture.origin.open()
    let bulk = await fixture.cache.values(for: ["here", "gone"])
    #expect(bulk.values == ["here": "origin here"])
    #expect((bulk.failures["gone"] as? AsyncCacheError)?.code == .notFound)
    let completions = fixture.coordinator.completions
    let gone = try #require(completions.first { $0.key == "gone" })
    #expect((gone.error as? AsyncCacheError)?.code == .notFound)
    let here = try #require(completions.first { $0.key == "here" })
    #expect(here.value == "origin here")
  }

  @Test("a batch abandoned by its request gives its claims up at once, while its origin call has not ended")
  func abandonedBatchReleasesItsClaims() async throws {
    let fixture = try Fixture(ScriptedCoordinator { _ in .granted(token: 5) })
    let request = Task { await fixture.cache.values(for: ["a", "b"]) }
    await waitUntil { fixture.origin.calls.count == 1 }
    request.cancel()
    let bulk = await request.value
    #expect(bulk.failures.values.allSatisfy { $0 is CancellationError })
    // The origin still holds the call: the claims are given up without waiting for it.
    await waitUntil { fixture.coordinator.completions.count == 2 }
    let completions = fixture.coordinator.completions
    #expect(completions.map(\.key).sorted() == ["a", "b"])
    #expect(completions.allSatisfy { $0.error is CancellationError })
    fixture.origin.open()
    await fixture.cache.waitUntilIdle()
    #expect(fixture.coordinator.completions.count == 2, "each claim is completed once")
    #expect(fixture.top.value(for: "a") == nil)
  }

  /// Yields until `condition` holds, or the task is cancelled (by the suite's time limit).
  private func waitUntil(_ condition: () -> Bool) async {
    while !condition() && !Task.isCancelled { await Task.yield() }
  }
}
