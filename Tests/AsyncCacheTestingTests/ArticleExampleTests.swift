import AsyncCache
import AsyncCacheTesting
import Testing

/// The examples of the "Testing with AsyncCacheTesting" article, verbatim, so that they keep
/// compiling and passing.
@Suite(.timeLimit(.minutes(3))) struct ArticleExampleTests {
  struct Session: Sendable, Equatable {
    var user: String
  }

  struct DiskError: Error {}

  @Test func sessionsExpireAfterFiveMinutes() async throws {
    let clock = ManualClock()
    let sessions = try LoadingCache(
      layers: [MemoryLayer<String, Session>()],  // follows the cache's clock
      origin: UnimplementedFetcher<String, Session>(),
      configuration: .init(timeToLive: .seconds(300), clock: clock)
    )

    try await sessions.insert(Session(user: "ada"), for: "token")
    clock.advance(by: .seconds(299))
    #expect(sessions.cachedValue(for: "token") != nil)
    clock.advance(by: .seconds(1))
    #expect(sessions.cachedValue(for: "token") == nil)
  }

  @Test func aCancelledRequestLeavesTheOthersWaiting() async throws {
    let origin = GatedFetcher<Int, String> { "user \($0)" }
    let users = try LoadingCache(layers: [MemoryLayer<Int, String>()], origin: origin)

    let first = Task { try await users.value(for: 1) }
    let second = Task { try await users.value(for: 1) }
    await users.waitForRequests(2, for: 1)  // both joined the one load
    await origin.waitForFetches(1, for: 1)  // which reached the origin

    first.cancel()
    await #expect(throws: CancellationError.self) { try await first.value }

    origin.release(1)
    #expect(try await second.value == "user 1")
    #expect(origin.callCount(for: 1) == 1)
    #expect(!origin.wasCancelled(1))
  }

  @Test func aBrokenDiskIsSkipped() async throws {
    let disk = FakeLayer<String, String>()
    disk.fail(.lookup, with: DiskError())
    let chain = try CacheChain<String, String>([
      .init(try MemoryLayer<String, String>()),
      .init(disk, failurePolicy: .skip),
    ])
    let origin = GatedFetcher<String, String> { $0 }
    origin.open()  // this test is not about timing
    let cache = try LoadingCache(chain: chain, origin: origin)
    _ = try await cache.value(for: "a")
    try #require(chain.statistics.tiers.count == 2)
    #expect(chain.statistics.tiers[1].failures == 1)
  }
}
