import AsyncCache
import AsyncCacheRedis
import Foundation

/// The probe's commands that run an instance of a service over a shared Redis.
enum RedisProbe {
  static let commands: [String: @Sendable ([String]) async -> Int32] = [
    "fleet-load": fleetLoad
  ]

  /// `fleet-load <port> <namespace> <key> <requests> <lease milliseconds> <name>`: one instance
  /// of a fleet. Builds a `LoadingCache` over a memory layer and a `RedisLayer` with single
  /// flight on `127.0.0.1:<port>`, prints `ready`, and makes `<requests>` concurrent requests
  /// for `<key>`. Its origin prints `origin <key>` when called and answers `<name> <key>` once
  /// it reads a line on its standard input. Prints `pending` once every request waits for the
  /// load, then, when they are answered, `done <the distinct values, joined by |> <failures>`
  /// and `origin-calls <count>`, and exits.
  @Sendable static func fleetLoad(_ arguments: [String]) async -> Int32 {
    guard arguments.count == 6, let port = Int(arguments[0]), let requests = Int(arguments[3]),
      let lease = Int64(arguments[4])
    else {
      FileHandle.standardError.write(
        Data("usage: fleet-load <port> <namespace> <key> <requests> <lease milliseconds> <name>\n".utf8))
      return 64
    }
    let (namespace, key, name) = (arguments[1], arguments[2], arguments[5])
    do {
      var configuration = RedisLayer<String, Data>.Configuration(endpoint: RedisEndpoint(host: "127.0.0.1", port: port))
      configuration.operationTimeout = .seconds(2)
      configuration.singleFlight = RedisSingleFlight(leaseTime: .milliseconds(lease))
      let redis = try RedisLayer<String, Data>(configuration: configuration, namespace: namespace)
      let calls = Locked(0)
      let cache = try LoadingCache(
        tiers: [.init(MemoryLayer<String, Data>()), .init(redis, failurePolicy: .skip)],
        origin: ClosureFetcher { (key: String) in
          calls.withLock { $0 += 1 }
          emit("origin \(key)")
          _ = await DiskProbe.nextInputLine()
          return Data("\(name) \(key)".utf8)
        })
      emit("ready")
      let results = await withTaskGroup(of: Result<Data, any Error>.self) { group in
        for _ in 0..<requests {
          group.addTask { await Result(catching: { try await cache.value(for: key) }) }
        }
        while cache.waitingRequestCount(for: key) < requests { await Task.yield() }
        emit("pending")
        var results: [Result<Data, any Error>] = []
        for await result in group { results.append(result) }
        return results
      }
      let values = Set(results.compactMap { try? String(decoding: $0.get(), as: UTF8.self) })
      let failures = results.count { if case .failure = $0 { true } else { false } }
      emit("done \(values.sorted().joined(separator: "|")) \(failures)")
      emit("origin-calls \(calls.withLock { $0 })")
      return 0
    } catch {
      emit("error \(error)")
      return 1
    }
  }
}

extension Result where Failure == any Error {
  init(catching body: () async throws -> Success) async {
    do { self = .success(try await body()) } catch { self = .failure(error) }
  }
}
