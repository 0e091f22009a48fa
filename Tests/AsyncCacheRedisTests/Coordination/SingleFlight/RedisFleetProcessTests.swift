import AsyncCache
import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCacheRedis

/// Single flight between instances in separate processes: `PersistenceProbe fleet-load` children
/// that the tests start, release and kill.
@Suite(
  "Single flight between processes", .redisServer, .timeLimit(.minutes(3)),
  .enabled(if: Probe.unavailableReason == nil, "child processes can only be started on macOS and Linux"))
struct RedisFleetProcessTests {
  /// Starts an instance in a process of its own and waits until it has made its requests.
  func startInstance(
    _ name: String, server: RedisServer, key: String, requests: Int = 50, leaseMilliseconds: Int = 5_000
  ) async throws -> Probe {
    let probe = try Probe([
      "fleet-load", String(server.port), "fleet", key, String(requests), String(leaseMilliseconds), name,
    ])
    #expect(await probe.waitForLine(startingWith: "ready") != nil)
    return probe
  }

  @Test("4 processes × 50 concurrent requests for one cold key make exactly 1 origin call")
  func separateProcesses() async throws {
    let server = try await RedisServer.start()
    let holder = try await startInstance("p0", server: server, key: "cold")
    #expect(await holder.waitForLine(startingWith: "origin") == "origin cold")
    var others: [Probe] = []
    for index in 1...3 {
      let probe = try await startInstance("p\(index)", server: server, key: "cold")
      // Its requests wait for a load that waits for p0's lease: its origin is not called.
      #expect(await probe.waitForLine(startingWith: "pending") == "pending")
      others.append(probe)
    }
    holder.send("release")
    var originCalls = 0
    for probe in [holder] + others {
      #expect(await probe.waitForLine(startingWith: "done") == "done p0 cold 0")
      let calls = try #require(await probe.waitForLine(startingWith: "origin-calls"))
      originCalls += Int(calls.split(separator: " ")[1]) ?? -1
      #expect(await probe.waitForExit() == 0)
    }
    #expect(originCalls == 1)
  }

  @Test("the holder's process killed with SIGKILL mid-load: another instance loads within the lease time")
  func killedHolder() async throws {
    let server = try await RedisServer.start()
    let holder = try await startInstance("p0", server: server, key: "k", requests: 5, leaseMilliseconds: 500)
    #expect(await holder.waitForLine(startingWith: "origin") == "origin k")
    let b = try FleetInstance("b", server: server)
    let waiting = requests(20, for: "k", to: b)
    await b.waitUntilWaiting()

    await holder.kill()
    // The lease runs out (it is no longer renewed) and B takes the load over.
    await b.origin.waitForFetches(1, for: "k")
    #expect(b.origin.release("k") == 1)
    for task in waiting { #expect(try await task.value == Data("b k".utf8)) }
    #expect(b.redis.statistics.leasesGranted == 1)
  }
}
