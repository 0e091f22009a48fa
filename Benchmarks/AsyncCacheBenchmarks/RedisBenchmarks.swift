import AsyncCache
import AsyncCacheRedis
import Foundation

/// The Redis layer against `redis-benchmark` on the same server in the same run: the server's
/// own C client, one connection, the same key and the same reply size. Each benchmark starts a
/// `redis-server` of its own on a free loopback port, without persistence, and stops it by pid.
/// Without `redis-server` (and `redis-benchmark`) on the `PATH`, the benchmarks are skipped
/// with a message.
enum RedisBenchmarks {
  /// The bytes Redis stores per key, the layer's 3-byte header included: a small cached item.
  static let storedSize = 256
  static let payload = Data(repeating: 0x5A, count: storedSize - 3)

  /// `redis.get.hit`: one task reading one key again and again through `RedisLayer.value(for:)`
  /// (each read a round trip), against `redis-benchmark -t get -c 1 -P 1` reading the same key:
  /// per request, both waiting for each reply before sending the next request.
  static func getHit(_ run: RunConfiguration) async throws -> [ResultRow] {
    guard let server = try RedisProcess.startIfInstalled(Benchmark.redisGetHit) else { return [] }
    defer { server.stop() }
    // `redis-benchmark -t get` reads the key `key:__rand_int__`: the namespace `key` and the key
    // `__rand_int__` of the layer name the same one.
    let layer = try RedisLayer<String, Data>(configuration: .init(endpoint: server.endpoint), namespace: "key")
    try await layer.insert(payload, for: "__rand_int__")
    let reads = run.redisReads
    let contenders = [
      Contender(name: "RedisLayer.value(for:)", operations: reads) {
        try await timed(expecting: reads * payload.count) {
          var bytes = 0
          for _ in 0..<reads { bytes += try await layer.value(for: "__rand_int__")?.count ?? 0 }
          return bytes
        }
      },
      Contender(name: "redis-benchmark -P 1", operations: reads) {
        try server.redisBenchmark(requests: reads, pipeline: 1)
      },
    ]
    let measurements = try await measureInterleaved(contenders, repetitions: run.repetitions)
    return ResultRow.rows(
      benchmark: Benchmark.redisGetHit.rawValue, measurements: measurements, baseline: "redis-benchmark -P 1",
      target: .ratioAtMost(1.2),
      notes: ["GET of one \(storedSize) B value over loopback, one connection, one request at a time; ns per request"])
  }

  /// `redis.mget.100`: `RedisLayer.entries(for:)` of 100 keys (one `MGET`), against
  /// `redis-benchmark -t get -c 1 -P 100` (100 pipelined `GET`s per round trip); per 100 keys.
  static func mget100(_ run: RunConfiguration) async throws -> [ResultRow] {
    guard let server = try RedisProcess.startIfInstalled(Benchmark.redisMGet100) else { return [] }
    defer { server.stop() }
    let layer = try RedisLayer<String, Data>(configuration: .init(endpoint: server.endpoint), namespace: "key")
    try await layer.insert(payload, for: "__rand_int__")
    let keys = (0..<100).map { "bulk-\($0)" }
    for key in keys { try await layer.insert(payload, for: key) }
    let reads = run.redisBulkReads
    let contenders = [
      Contender(name: "RedisLayer.entries(for:), 100 keys", operations: reads) {
        try await timed(expecting: reads * 100 * payload.count) {
          var bytes = 0
          for _ in 0..<reads {
            for entry in try await layer.entries(for: keys).values { bytes += entry.value.count }
          }
          return bytes
        }
      },
      Contender(name: "redis-benchmark -P 100", operations: reads) {
        // 100 GETs per bulk read.
        try server.redisBenchmark(requests: reads * 100, pipeline: 100)
      },
    ]
    let measurements = try await measureInterleaved(contenders, repetitions: run.repetitions)
    return ResultRow.rows(
      benchmark: Benchmark.redisMGet100.rawValue, measurements: measurements, baseline: "redis-benchmark -P 100",
      target: .ratioAtMost(1.3),
      notes: ["100 values of \(storedSize) B per round trip, one connection; ns per 100 keys"])
  }

  /// `chain.memoryOverRedis.hit`: a `LoadingCache` over memory → Redis answering from its memory
  /// layer, against the same value read from Redis alone: why each instance keeps a memory layer.
  static func memoryOverRedisHit(_ run: RunConfiguration) async throws -> [ResultRow] {
    guard let server = try RedisProcess.startIfInstalled(Benchmark.chainMemoryOverRedisHit) else { return [] }
    defer { server.stop() }
    let redis = try RedisLayer<String, Data>(configuration: .init(endpoint: server.endpoint), namespace: "chain")
    let keys = (0..<100).map { "item-\($0)" }
    for key in keys { try await redis.insert(payload, for: key) }
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, Data>(), redis], origin: ClosureFetcher<String, Data> { _ in Data() })
    for key in keys { _ = try await cache.value(for: key) }
    let reads = run.redisReads
    let contenders = [
      Contender(name: "LoadingCache, memory over Redis", operations: reads) {
        try await timed(expecting: reads * payload.count) {
          var bytes = 0
          for index in 0..<reads { bytes += try await cache.value(for: keys[index % keys.count]).count }
          return bytes
        }
      },
      Contender(name: "RedisLayer alone", operations: reads) {
        try await timed(expecting: reads * payload.count) {
          var bytes = 0
          for index in 0..<reads { bytes += try await redis.value(for: keys[index % keys.count])?.count ?? 0 }
          return bytes
        }
      },
    ]
    let measurements = try await measureInterleaved(contenders, repetitions: run.repetitions)
    return ResultRow.rows(
      benchmark: Benchmark.chainMemoryOverRedisHit.rawValue, measurements: measurements,
      baseline: "RedisLayer alone", target: nil,
      notes: ["informational: 100 keys of \(storedSize) B, all in the memory layer; ns per read"])
  }
}

/// A `redis-server` for one benchmark.
final class RedisProcess {
  let port: Int
  private let process: Process
  private let serverPath: String
  private let benchmarkTool: String

  var endpoint: RedisEndpoint { RedisEndpoint(host: "127.0.0.1", port: port) }

  /// Starts a server, or prints why the benchmark is skipped and returns `nil`.
  static func startIfInstalled(_ benchmark: Benchmark) throws -> RedisProcess? {
    let path = ProcessInfo.processInfo.environment["PATH"] ?? ""
    let directories = path.split(separator: ":").map(String.init) + ["/usr/bin", "/usr/local/bin", "/opt/homebrew/bin"]
    func find(_ name: String) -> String? {
      directories.map { "\($0)/\(name)" }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }
    guard let server = find("redis-server"), let tool = find("redis-benchmark") else {
      print(
        "\(benchmark.rawValue) skipped: redis-server and redis-benchmark are not installed "
          + "(Debian/Ubuntu: apt-get install redis-server; macOS: brew install redis)")
      return nil
    }
    return try RedisProcess(server: server, benchmarkTool: tool)
  }

  /// A new server on this one's port (stop this one first): a restart.
  func restarted() throws -> RedisProcess {
    try RedisProcess(server: serverPath, benchmarkTool: benchmarkTool, port: port)
  }

  private init(server: String, benchmarkTool: String, port: Int? = nil) throws {
    self.benchmarkTool = benchmarkTool
    self.serverPath = server
    self.port = try port ?? freeLoopbackPort()
    process = Process()
    process.executableURL = URL(fileURLWithPath: server)
    process.arguments = [
      "--port", String(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no",
      "--logfile", "", "--protected-mode", "no",
    ]
    let pipe = Pipe()
    process.standardOutput = pipe
    process.standardError = pipe
    try process.run()
    var log = Data()
    let handle = pipe.fileHandleForReading
    while log.range(of: Data("Ready to accept connections".utf8)) == nil {
      let chunk = handle.availableData
      guard !chunk.isEmpty else {
        throw BenchmarkFailure("redis-server exited before it was ready: \(String(decoding: log, as: UTF8.self))")
      }
      log.append(chunk)
    }
    // Keeps reading the log, so that the server never blocks on a full pipe.
    Thread.detachNewThread { while !handle.availableData.isEmpty {} }
  }

  /// Stops the server by its pid.
  func stop() {
    kill(process.processIdentifier, SIGKILL)
    process.waitUntilExit()
  }

  /// Runs `redis-benchmark -t get` with one connection and returns the time `requests` took at
  /// the rate it reports.
  func redisBenchmark(requests: Int, pipeline: Int) throws -> Duration {
    let tool = Process()
    tool.executableURL = URL(fileURLWithPath: benchmarkTool)
    tool.arguments = [
      "-h", "127.0.0.1", "-p", String(port), "-t", "get", "-c", "1", "-P", String(pipeline), "-n", String(requests),
      "--csv",
    ]
    let pipe = Pipe()
    tool.standardOutput = pipe
    try tool.run()
    let output = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
    tool.waitUntilExit()
    // "GET","48543.69",... : the test, then requests per second.
    guard let line = output.split(separator: "\n").first(where: { $0.hasPrefix("\"GET\"") }),
      let rate = Double(line.split(separator: ",")[1].trimmingCharacters(in: CharacterSet(charactersIn: "\""))),
      rate > 0
    else { throw BenchmarkFailure("cannot read redis-benchmark's output: \(output)") }
    return .nanoseconds(Int64((Double(requests) / rate * 1e9).rounded()))
  }
}

/// A loopback port that was free a moment ago.
private func freeLoopbackPort() throws -> Int {
  #if canImport(Darwin)
    let fd = socket(AF_INET, SOCK_STREAM, 0)
  #else
    let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
  #endif
  guard fd >= 0 else { throw BenchmarkFailure("socket() failed") }
  defer { close(fd) }
  var address = sockaddr_in()
  address.sin_family = sa_family_t(AF_INET)
  address.sin_addr.s_addr = inet_addr("127.0.0.1")
  var length = socklen_t(MemoryLayout<sockaddr_in>.size)
  let bound = withUnsafeMutablePointer(to: &address) {
    $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
      bind(fd, $0, length) == 0 && getsockname(fd, $0, &length) == 0
    }
  }
  guard bound else { throw BenchmarkFailure("cannot bind a loopback port") }
  return Int(UInt16(bigEndian: address.sin_port))
}
