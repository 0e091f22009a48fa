import AsyncCache
import AsyncCacheRedis
import Foundation
import Synchronization

/// `fleet.coalescing`: instances of a service that share a Redis, all asking for one cold key at
/// once, with and without single flight (`RedisSingleFlight`).
enum FleetBenchmark {
  static let instances = 8
  static let waitersPerInstance = 100
  static let originLatency = Duration.milliseconds(50)
  /// The followers' extra latency the benchmark allows at p99, in milliseconds.
  static let extraLatencyTarget = 2.0

  /// What one configuration measured over its rounds.
  struct Outcome {
    /// Origin calls, per round.
    var originCalls: [Int] = []
    /// Every request's latency, from the round's start to its value, in milliseconds.
    var latencies: [Double] = []
    /// Per round, per request of an instance that did not load: how long after the last request
    /// of the loading instance it got its value, in milliseconds (single flight only).
    var followerExtraByRound: [[Double]] = []

    /// ``followerExtraByRound``, all rounds together.
    var followerExtra: [Double] { followerExtraByRound.flatMap { $0 } }
  }

  /// The p99 of each round's values (the rows' samples): whether a percentile over all rounds
  /// comes from every round or from a few slow ones.
  static func roundP99s(_ rounds: [[Double]]) -> [Double] {
    rounds.filter { !$0.isEmpty }.map { percentile(99, of: $0) }
  }

  /// ``roundP99s(_:)`` in words: "per round p99 lowest-highest ms, k of n rounds above the target".
  static func perRound(_ rounds: [[Double]]) -> String {
    let p99s = roundP99s(rounds)
    guard let lowest = p99s.min(), let highest = p99s.max() else { return "no rounds" }
    let above = p99s.filter { $0 > extraLatencyTarget }.count
    return "per round p99 \(format(lowest, decimals: 2))-\(format(highest, decimals: 2)) ms, "
      + "\(above) of \(p99s.count) rounds above \(format(extraLatencyTarget, decimals: 0)) ms"
  }

  /// 8 instances (each a memory layer over one Redis, in this process, each with its own
  /// connections) × 100 concurrent requests for one cold key, whose origin takes 50 ms; a fresh
  /// key per round. Reports the origin calls per round (single flight must make 1) and the
  /// followers' extra latency over the holder at p99 (target 2 ms on loopback), beside the same
  /// fleet without single flight, and beside what the runtime alone takes to run a round's 800
  /// requests once they are resumed (``runtimeAlone(rounds:)``).
  static func coalescing(_ run: RunConfiguration) async throws -> [ResultRow] {
    guard let server = try RedisProcess.startIfInstalled(Benchmark.fleetCoalescing) else { return [] }
    defer { server.stop() }
    let rounds = run.isQuick ? 5 : 20
    let single = try await measure(server.endpoint, singleFlight: true, rounds: rounds)
    let plain = try await measure(server.endpoint, singleFlight: false, rounds: rounds)
    let runtime = await runtimeAlone(rounds: rounds)
    guard single.originCalls.allSatisfy({ $0 == 1 }) else {
      throw BenchmarkFailure("single flight made \(single.originCalls) origin calls per round, not 1 each")
    }
    let benchmark = Benchmark.fleetCoalescing.rawValue
    let shape = "\(instances) instances × \(waitersPerInstance) requests, one cold key, origin \(originLatency)"
    func mean(_ values: [Int]) -> Double { values.isEmpty ? 0 : Double(values.reduce(0, +)) / Double(values.count) }
    return [
      ResultRow(
        benchmark: benchmark, implementation: "single flight: origin calls per round", value: mean(single.originCalls),
        unit: .count, target: .valueAtMost(1), samples: single.originCalls.map(Double.init),
        notes: [shape + ", \(rounds) rounds"]),
      ResultRow(
        benchmark: benchmark, implementation: "single flight: followers' extra latency p99",
        value: percentile(99, of: single.followerExtra), unit: .milliseconds,
        target: .valueAtMost(extraLatencyTarget), samples: roundP99s(single.followerExtraByRound),
        notes: [
          "after the holder's last request (0 for a request that ended before it); p50 "
            + "\(format(percentile(50, of: single.followerExtra), decimals: 2)) ms; "
            + perRound(single.followerExtraByRound)
        ]),
      ResultRow(
        benchmark: benchmark, implementation: "runtime alone: 800 tasks resumed at once, p99",
        value: percentile(99, of: runtime.flatMap { $0 }), unit: .milliseconds, samples: roundP99s(runtime),
        notes: [
          "informational: no cache, no Redis; each task's end after the first resumption; p50 "
            + "\(format(percentile(50, of: runtime.flatMap { $0 }), decimals: 2)) ms; " + perRound(runtime)
        ]),
      ResultRow(
        benchmark: benchmark, implementation: "single flight: request latency p99",
        value: percentile(99, of: single.latencies), unit: .milliseconds, baseline: "without: request latency p99",
        ratio: percentile(99, of: single.latencies) / max(percentile(99, of: plain.latencies), 0.001),
        notes: ["informational"]),
      ResultRow(
        benchmark: benchmark, implementation: "without: origin calls per round", value: mean(plain.originCalls),
        unit: .count, samples: plain.originCalls.map(Double.init), notes: ["informational: one per instance"]),
      ResultRow(
        benchmark: benchmark, implementation: "without: request latency p99",
        value: percentile(99, of: plain.latencies),
        unit: .milliseconds, notes: ["informational"]),
    ]
  }

  private static func measure(_ endpoint: RedisEndpoint, singleFlight: Bool, rounds: Int) async throws -> Outcome {
    let calls = Mutex<[Int]>([])
    var caches: [LoadingCache<String, Data>] = []
    for index in 0..<instances {
      var configuration = RedisLayer<String, Data>.Configuration(endpoint: endpoint)
      if singleFlight { configuration.singleFlight = RedisSingleFlight() }
      let redis = try RedisLayer<String, Data>(configuration: configuration, namespace: "fleet")
      caches.append(
        try LoadingCache(
          tiers: [.init(MemoryLayer<String, Data>()), .init(redis, failurePolicy: .skip)],
          origin: ClosureFetcher { (key: String) in
            calls.withLock { $0.append(index) }
            try await Task.sleep(for: originLatency)
            return Data(key.utf8)
          }))
    }
    // Connections opened (and the subscriptions made) before the rounds.
    _ = try await withThrowingTaskGroup(of: Data.self) { group in
      for cache in caches { group.addTask { try await cache.value(for: "warm-up \(singleFlight)") } }
      return try await group.reduce(into: [Data]()) { $0.append($1) }
    }
    var outcome = Outcome()
    for round in 0..<rounds {
      calls.withLock { $0 = [] }
      let key = "cold \(singleFlight) \(round)"
      let start = ContinuousClock.now
      // Requests are independent, as a server's are: they note when they got their value, and
      // nothing wakes for each as it ends (a group collecting results would add one turn on the
      // executor per request, on the cores the instances share). A group per instance: a group
      // finds a finished child in the list of its children, which 800 would make long.
      let finished = Finished()
      try await withThrowingDiscardingTaskGroup { fleet in
        for (index, cache) in caches.enumerated() {
          fleet.addTask {
            try await withThrowingDiscardingTaskGroup { group in
              for request in 0..<waitersPerInstance {
                group.addTask {
                  _ = try await cache.value(for: key)
                  finished.note(index * waitersPerInstance + request, after: start.duration(to: .now))
                }
              }
            }
          }
        }
      }
      let requests = finished.all
      let loaders = calls.withLock { $0 }
      outcome.originCalls.append(loaders.count)
      outcome.latencies += requests.map { $0.after / .milliseconds(1) }
      if singleFlight, let holder = loaders.first {
        let holderDone = requests.filter { $0.instance == holder }.map(\.after).max() ?? .zero
        outcome.followerExtraByRound.append(
          requests.filter { $0.instance != holder }.map { max(0, ($0.after - holderDone) / .milliseconds(1)) })
      }
    }
    for cache in caches { try await cache.close() }
    return outcome
  }

  /// What the runtime alone takes to run a round's requests once they are resumed: 800 tasks
  /// in groups of the same shape as the fleet's requests, each waiting on a continuation, all
  /// resumed at once, with no cache and no Redis. Returns, per round, for every task, how long
  /// after the first resumption it ended, in milliseconds: taken over all requests, as the
  /// followers' extra latency is, so that their percentiles compare.
  private static func runtimeAlone(rounds: Int) async -> [[Double]] {
    var ends: [[Double]] = []
    for _ in 0..<rounds {
      let waiting = Waiting()
      let origin = ContinuousClock.now
      let finished = Finished()
      await withDiscardingTaskGroup { fleet in
        for index in 0..<instances {
          fleet.addTask {
            await withDiscardingTaskGroup { group in
              for request in 0..<waitersPerInstance {
                group.addTask {
                  await withUnsafeContinuation { continuation in waiting.add(continuation) }
                  finished.note(index * waitersPerInstance + request, after: origin.duration(to: .now))
                }
              }
            }
          }
        }
        fleet.addTask {
          // Every request waits (a benchmark may poll: nothing else runs meanwhile).
          while waiting.continuations.withLock({ $0.count }) < instances * waitersPerInstance { await Task.yield() }
          let continuations = waiting.continuations.withLock { $0 }
          waiting.resumedAfter.withLock { $0 = origin.duration(to: .now) }
          for continuation in continuations { continuation.resume() }
        }
      }
      let resumedAfter = waiting.resumedAfter.withLock { $0 }
      ends.append(finished.all.map { ($0.after - resumedAfter) / .milliseconds(1) })
    }
    return ends
  }

  /// The requests of a round of ``runtimeAlone(rounds:)``, and when they were resumed.
  private final class Waiting: Sendable {
    let continuations = Mutex<[UnsafeContinuation<Void, Never>]>([])
    /// When the first was resumed, after the round's start.
    let resumedAfter = Mutex(Duration.zero)

    func add(_ continuation: UnsafeContinuation<Void, Never>) { continuations.withLock { $0.append(continuation) } }
  }

  /// When each request of a round got its value, by instance: a slot per request, which only
  /// that request writes (no lock for the 800 requests of a round to contend for, as they finish
  /// on the cores whose time is measured).
  private final class Finished: Sendable {
    private final class Slot: Sendable {
      let nanoseconds = Atomic<Int64>(-1)
    }

    private let slots = (0..<instances * waitersPerInstance).map { _ in Slot() }

    func note(_ request: Int, after duration: Duration) {
      let nanoseconds = duration.components.seconds * 1_000_000_000 + duration.components.attoseconds / 1_000_000_000
      slots[request].nanoseconds.store(nanoseconds, ordering: .relaxed)
    }

    /// The requests that got their value (all of them, once the round's tasks ended).
    var all: [(instance: Int, after: Duration)] {
      slots.enumerated().compactMap { request, slot in
        let nanoseconds = slot.nanoseconds.load(ordering: .relaxed)
        return nanoseconds < 0 ? nil : (request / waitersPerInstance, .nanoseconds(nanoseconds))
      }
    }
  }
}
