import AsyncCache
import AsyncCacheRedis
import Foundation

/// `redis.outage`: what an operator sees of a Redis outage. A service's traffic (one request
/// about every millisecond through a `LoadingCache` whose Redis tier is skipped on failure)
/// runs while its `redis-server` is killed, kept down for `run.redisOutage` (5 s; 1 s quick),
/// and started again on the same port. Counts the lines the `RedisLayer` logged by level (the
/// chain's own warning about the skipped tier is not counted: it is the chain's promise), and
/// times the restart to the first request Redis answers. Each outage is a repetition; rows
/// report the worst.
enum RedisOutageBenchmark {
  static func run(_ run: RunConfiguration) async throws -> [ResultRow] {
    guard var server = try RedisProcess.startIfInstalled(Benchmark.redisOutage) else { return [] }
    defer { server.stop() }
    var loud: [Double] = []
    var notices: [Double] = []
    var recoveries: [Double] = []
    for _ in 0..<run.redisOutages {
      let logs = Locked<[CacheLogRecord]>([])
      var configuration = RedisLayer<String, Data>.Configuration(endpoint: server.endpoint)
      configuration.logger = CacheLogger(minimumLevel: .debug) { record in logs.withLock { $0.append(record) } }
      let redis = try RedisLayer<String, Data>(configuration: configuration, namespace: "outage")
      let cache = try LoadingCache(
        tiers: [.init(redis, failurePolicy: .skip)], origin: ClosureFetcher { Data("origin \($0)".utf8) })
      // Warm: the pool's connections open as the traffic asks for them.
      try await traffic(cache, requests: 2_000, tasks: 4)
      logs.withLock { $0.removeAll() }

      server.stop()
      let outageEnds = ContinuousClock.now.advanced(by: run.redisOutage)
      while ContinuousClock.now < outageEnds { try await traffic(cache, requests: 10, tasks: 1) }
      server = try server.restarted()
      let restarted = ContinuousClock.now
      let answeredBefore = redis.statistics.hits + redis.statistics.misses
      while redis.statistics.hits + redis.statistics.misses == answeredBefore {
        try await traffic(cache, requests: 1, tasks: 1)
        if ContinuousClock.now - restarted > .seconds(30) {
          throw BenchmarkFailure("Redis was not used again within 30 s of its restart")
        }
      }
      let recovery = ContinuousClock.now - restarted
      // What the layer logged from the kill to the first request after its return.
      try await traffic(cache, requests: 100, tasks: 1)
      let records = logs.withLock { $0 }.filter { $0.source == "RedisLayer" }
      loud.append(Double(records.count { $0.level >= .warning }))
      notices.append(Double(records.count { $0.level == .notice }))
      recoveries.append(Double(recovery.components.seconds) * 1e3 + Double(recovery.components.attoseconds) / 1e15)
      try await cache.close()
    }
    func row(_ name: String, _ samples: [Double], unit: Unit, target: Target, note: String) -> ResultRow {
      ResultRow(
        benchmark: Benchmark.redisOutage.rawValue, implementation: name, value: samples.max() ?? 0, unit: unit,
        target: target, samples: samples, notes: [note])
    }
    let outage = run.redisOutage.components.seconds
    return [
      row(
        "warnings and errors logged", loud, unit: .count, target: .valueAtMost(1),
        note: "a \(outage) s outage under traffic, by the RedisLayer (the chain's warning not counted); worst of "
          + "\(loud.count)"),
      row("notices logged", notices, unit: .count, target: .valueAtMost(1), note: "the server is back"),
      row(
        "restart to the first request Redis answers", recoveries, unit: .milliseconds, target: .valueAtMost(1_000),
        note: "the breaker probes at most a second apart; worst of \(recoveries.count)"),
    ]
  }

  /// `requests` requests, about a millisecond apart, from each of `tasks` tasks.
  private static func traffic(_ cache: LoadingCache<String, Data>, requests: Int, tasks: Int) async throws {
    try await withThrowingTaskGroup(of: Void.self) { group in
      for task in 0..<tasks {
        group.addTask {
          for request in 0..<requests {
            _ = try await cache.value(for: "key-\((task * requests + request) % 200)")
            try await Task.sleep(for: .milliseconds(1))
          }
        }
      }
      try await group.waitForAll()
    }
  }
}
