import AsyncCache
import AsyncCacheTesting
import Synchronization
import TestSupport
import Testing

/// A coordinator that answers claims and completions as a test scripts them, and records them.
final class ScriptedCoordinator: LoadCoordinator, Sendable {
  typealias Key = String
  typealias Value = String

  struct Completion: Sendable {
    var key: String
    var token: UInt64
    var value: String?
    var error: (any Error)?
  }

  private let claimAnswer: @Sendable (String) throws -> LoadClaim<String>
  private let completionAnswer: LeaseCompletion
  private let recorded = Locked<(claims: [(String, CacheInstant?)], completions: [Completion])>(([], []))

  init(
    completion: LeaseCompletion = .stored, claim: @escaping @Sendable (String) throws -> LoadClaim<String>
  ) {
    self.claimAnswer = claim
    self.completionAnswer = completion
  }

  var claims: [(String, CacheInstant?)] { recorded.withLock { $0.claims } }
  var completions: [Completion] { recorded.withLock { $0.completions } }

  func claim(_ key: String, supersedes: CacheInstant?) async throws -> LoadClaim<String> {
    recorded.withLock { $0.claims.append((key, supersedes)) }
    return try claimAnswer(key)
  }

  func complete(_ key: String, token: UInt64, with result: Result<CacheEntry<String>, any Error>) async
    -> LeaseCompletion
  {
    let completion: Completion =
      switch result {
      case .success(let entry): Completion(key: key, token: token, value: entry.value)
      case .failure(let error): Completion(key: key, token: token, error: error)
      }
    recorded.withLock { $0.completions.append(completion) }
    return completionAnswer
  }
}

/// A memory layer that offers a coordinator: the shared tier of a fleet, in miniature.
actor CoordinatedLayer<Coordinator: LoadCoordinator<String, String>>: AsyncCacheLayer {
  let base = try! MemoryLayer<String, String>()
  nonisolated let coordinator: Coordinator

  init(_ coordinator: Coordinator) { self.coordinator = coordinator }

  nonisolated func entry(for key: String) async throws -> CacheEntry<String>? { base.entry(for: key) }
  nonisolated func insert(_ entry: CacheEntry<String>, for key: String) async throws {
    try base.insert(entry, for: key)
  }
  nonisolated func removeValue(for key: String) async throws { base.removeValue(for: key) }
  nonisolated func removeAll() async throws { base.removeAll() }
  nonisolated var loadCoordinator: (any LoadCoordinator<String, String>)? { coordinator }
  nonisolated func follow(_ environment: CacheEnvironment) { base.follow(environment) }
}

@Suite("A LoadingCache over a layer that coordinates loads")
struct LoadCoordinatorTests {
  /// memory (top) → the coordinated layer → memory (bottom).
  struct Fixture {
    let top = try! MemoryLayer<String, String>()
    let shared: CoordinatedLayer<ScriptedCoordinator>
    let bottom = try! MemoryLayer<String, String>()
    let origin = GatedFetcher<String, String> { "origin \($0)" }
    let cache: LoadingCache<String, String>

    init(_ coordinator: ScriptedCoordinator) throws {
      shared = CoordinatedLayer(coordinator)
      cache = try LoadingCache(layers: [top, shared, bottom], origin: origin)
    }
  }

  @Test("a granted load is completed with its value; the coordinator stores it in its layer, the chain in the others")
  func granted() async throws {
    let fixture = try Fixture(ScriptedCoordinator { _ in .granted(token: 7) })
    fixture.origin.open()
    #expect(try await fixture.cache.value(for: "k") == "origin k")
    let completions = fixture.shared.coordinator.completions
    try #require(completions.count == 1)
    #expect(completions[0].token == 7 && completions[0].value == "origin k")
    #expect(fixture.top.value(for: "k") == "origin k")
    #expect(fixture.shared.base.value(for: "k") == nil)
    #expect(fixture.bottom.value(for: "k") == "origin k")
    #expect(fixture.shared.coordinator.claims.map(\.0) == ["k"])
  }

  @Test("a superseded load answers its requests and is stored nowhere")
  func superseded() async throws {
    let fixture = try Fixture(ScriptedCoordinator(completion: .superseded) { _ in .granted(token: 1) })
    fixture.origin.open()
    #expect(try await fixture.cache.value(for: "k") == "origin k")
    #expect(fixture.top.value(for: "k") == nil && fixture.bottom.value(for: "k") == nil)
  }

  @Test("a load the coordinator could not store is stored in the other layers")
  func notStored() async throws {
    let fixture = try Fixture(ScriptedCoordinator(completion: .notStored) { _ in .granted(token: 1) })
    fixture.origin.open()
    #expect(try await fixture.cache.value(for: "k") == "origin k")
    #expect(fixture.top.value(for: "k") == "origin k" && fixture.bottom.value(for: "k") == "origin k")
  }

  @Test("a value loaded elsewhere is served without asking the origin, and copied into the layers above only")
  func loadedElsewhere() async throws {
    let fixture = try Fixture(ScriptedCoordinator { _ in .loadedElsewhere(CacheEntry("remote")) })
    let reports = Mutex<[LoadReport<String>]>([])
    let cache = try LoadingCache(
      layers: [fixture.top, fixture.shared, fixture.bottom], origin: fixture.origin,
      configuration: .init(onLoadEnded: { report in reports.withLock { $0.append(report) } }))
    #expect(try await cache.value(for: "k") == "remote")
    #expect(fixture.origin.callCount == 0)
    #expect(fixture.top.value(for: "k") == "remote")
    #expect(fixture.bottom.value(for: "k") == nil)
    #expect(fixture.shared.coordinator.completions.isEmpty)
    let outcomes = reports.withLock { $0.map(\.outcome) }
    #expect(outcomes.count == 1)
    if case .loaded(from: .layer(let tier)) = outcomes.first { #expect(tier == 1) } else { Issue.record("\(outcomes)") }
  }

  @Test(
    "without coordination (its server is down) the load stores in every layer but the coordinator's: it is not fenced")
  func uncoordinated() async throws {
    let fixture = try Fixture(ScriptedCoordinator { _ in .uncoordinated })
    fixture.origin.open()
    #expect(try await fixture.cache.value(for: "k") == "origin k")
    #expect(fixture.top.value(for: "k") == "origin k")
    #expect(fixture.shared.base.value(for: "k") == nil)
    #expect(fixture.bottom.value(for: "k") == "origin k")
    #expect(fixture.shared.coordinator.completions.isEmpty)
  }

  @Test("an origin error completes the claim with it, and reaches the requests")
  func originError() async throws {
    let fixture = try Fixture(ScriptedCoordinator { _ in .granted(token: 3) })
    let request = Task { try await fixture.cache.value(for: "k") }
    await fixture.origin.waitForFetches(1, for: "k")
    _ = fixture.origin.release("k", throwing: TestError("down"))
    await #expect(throws: TestError("down")) { try await request.value }
    let completions = fixture.shared.coordinator.completions
    try #require(completions.count == 1)
    #expect((completions[0].error as? TestError) == TestError("down"))
  }

  @Test("a failure elsewhere reaches the requests, and the origin is not asked")
  func failedElsewhere() async throws {
    let fixture = try Fixture(
      ScriptedCoordinator { _ in throw AsyncCacheError(code: .failedElsewhere, message: "it failed over there") })
    let error = await #expect(throws: AsyncCacheError.self) { try await fixture.cache.value(for: "k") }
    #expect(error?.code == .failedElsewhere)
    #expect(fixture.origin.callCount == 0)
  }

  @Test("a load abandoned by its requests completes its claim with a cancellation")
  func cancelled() async throws {
    let fixture = try Fixture(ScriptedCoordinator { _ in .granted(token: 5) })
    let request = Task { try await fixture.cache.value(for: "k") }
    await fixture.origin.waitForFetches(1, for: "k")
    request.cancel()
    await #expect(throws: CancellationError.self) { try await request.value }
    await fixture.cache.waitUntilIdle()
    let completions = fixture.shared.coordinator.completions
    try #require(completions.count == 1)
    #expect(completions[0].error is CancellationError)
  }

  @Test("a refresh claims past the stale entry it declined")
  func refreshSupersedes() async throws {
    let clock = ManualClock()
    let coordinator = ScriptedCoordinator { _ in .granted(token: 1) }
    let shared = CoordinatedLayer(coordinator)
    let origin = GatedFetcher<String, String> { "origin \($0)" }
    let cache = try LoadingCache(
      layers: [shared], origin: origin,
      configuration: .init(timeToLive: .seconds(10), staleWhileRevalidate: .seconds(60), clock: clock))
    let stale = CacheEntry("old", expiresAt: clock.now.advanced(by: .seconds(70)))
    try shared.base.insert(stale, for: "k")
    clock.advance(by: .seconds(11))
    #expect(try await cache.value(for: "k") == "old")
    await origin.waitForFetches(1, for: "k")
    _ = origin.releaseAll()
    await cache.waitUntilIdle()
    let claims = coordinator.claims
    try #require(claims.count == 1)
    #expect(claims[0].1 == stale.expiresAt)
  }
}
