import AsyncCache
import AsyncCacheTesting
import Testing

/// The README's and the "Getting started" article's examples, compiled and run, so that the
/// documentation cannot drift from the API.
@Suite struct ReadmeExampleTests {
  struct User: Sendable, Equatable {
    var id: Int
  }

  struct API: Sendable {
    func user(_ id: Int) async throws -> User { User(id: id) }
  }

  @Test func theReadmeExampleWorks() async throws {
    let api = API()
    var shown: [User] = []
    func show(_ user: User) { shown.append(user) }

    // From README.md:
    let users = try LoadingCache(
      layers: [MemoryLayer<Int, User>(configuration: .init(countLimit: 10_000))],
      origin: ClosureFetcher { id in try await api.user(id) },
      configuration: .init(timeToLive: .seconds(300))
    )

    let user = try await users.value(for: 42)  // one API call however many tasks ask at once
    if let cached = users.cachedValue(for: 7) { show(cached) }  // synchronous, never suspends
    try await users.removeValue(for: 42)  // wins over a load of 42 in flight

    #expect(user == User(id: 42))
    #expect(shown.isEmpty)
    #expect(users.cachedValue(for: 42) == nil)
  }

  @Test func theGettingStartedChainWorks() async throws {
    let memory = try MemoryLayer<String, String>()
    let disk = FakeLayer<String, String>()
    let shared = FakeLayer<String, String>()
    let origin = ClosureFetcher<String, String> { $0.uppercased() }

    // From GettingStarted.md:
    let chain = try CacheChain<String, String>([
      .init(memory),
      .init(disk, failurePolicy: .skip),  // a broken disk: go on, record it
      .init(shared, failurePolicy: .propagate),
    ])
    let cache = try LoadingCache(chain: chain, origin: origin)

    #expect(try await cache.value(for: "a") == "A")
    #expect(disk.storedEntries["a"] == CacheEntry("A"))
  }
}
