/// Every benchmark, in the order a run performs them.
enum Benchmark: String, CaseIterable {
  case memoryHitOneTask = "memory.hit.1task"
  case memoryHitTwoTasks = "memory.hit.2tasks"
  case memoryPolicyHit = "memory.policy.hit"
  case memoryPolicySmallHit = "memory.policy.smallHit"
  case memoryZipfMixed = "memory.zipf.mixed"
  case memoryScale = "memory.scale"
  case memoryBytesPerEntry = "memory.bytesPerEntry"
  case memoryChurn = "memory.churn"
  case memoryCurve = "memory.curve"
  case coalescingFanIn = "coalescing.fanIn"
  case sqliteReadHit = "sqlite.read.hit"
  case sqliteWrite = "sqlite.write"
  case chainColdStart = "chain.coldStart"
  case diskReadHit = "disk.read.hit"
  case prefetchGallery = "prefetch.gallery"
  case prefetchCancelOnMove = "prefetch.cancelOnMove"
  case prefetchUrgentLatency = "prefetch.urgentLatency"
  case operatorsOverhead = "operators.overhead"
  case loggingOff = "logging.off"
  case cacheHitRatio = "cache.hitRatio"
  case redisGetHit = "redis.get.hit"
  case redisMGet100 = "redis.mget.100"
  case chainMemoryOverRedisHit = "chain.memoryOverRedis.hit"
  case redisOutage = "redis.outage"
  case fleetCoalescing = "fleet.coalescing"
  case httpRevalidate = "http.revalidate"
  case tagsInvalidate = "tags.invalidate"

  /// Runs the benchmark and returns its rows, the project's first.
  ///
  /// - Throws: ``BenchmarkFailure`` when the benchmark's own correctness check fails.
  func run(_ configuration: RunConfiguration) async throws -> [ResultRow] {
    switch self {
    case .memoryHitOneTask: try await MemoryBenchmarks.hitOneTask(configuration)
    case .memoryHitTwoTasks: try await MemoryBenchmarks.hitTwoTasks(configuration)
    case .memoryPolicyHit: try await MemoryBenchmarks.policyHit(configuration)
    case .memoryPolicySmallHit: try await MemoryBenchmarks.policySmallHit(configuration)
    case .memoryZipfMixed: try await MemoryBenchmarks.zipfMixed(configuration)
    case .memoryScale: try await MemoryBenchmarks.scale(configuration)
    case .memoryBytesPerEntry: try FootprintBenchmark.bytesPerEntry(configuration)
    case .memoryChurn: try MemoryBenchmarks.churn(configuration)
    case .memoryCurve: try await CurveBenchmark.run(configuration)
    case .coalescingFanIn: try await CoalescingBenchmarks.fanIn(configuration)
    case .sqliteReadHit: try await SQLiteBenchmarks.readHit(configuration)
    case .sqliteWrite: try await SQLiteBenchmarks.write(configuration)
    case .chainColdStart: try await SQLiteBenchmarks.coldStart(configuration)
    case .diskReadHit: try await DiskBenchmarks.readHit(configuration)
    case .prefetchGallery: try await PrefetchBenchmarks.gallery(configuration)
    case .prefetchCancelOnMove: try await PrefetchBenchmarks.cancelOnMove(configuration)
    case .prefetchUrgentLatency: try await PrefetchBenchmarks.urgentLatency(configuration)
    case .operatorsOverhead: try await OperatorBenchmarks.overhead(configuration)
    case .loggingOff: try await LoggingBenchmarks.off(configuration)
    case .cacheHitRatio: try await HitRatioBenchmark.run(configuration)
    case .redisGetHit: try await RedisBenchmarks.getHit(configuration)
    case .redisMGet100: try await RedisBenchmarks.mget100(configuration)
    case .chainMemoryOverRedisHit: try await RedisBenchmarks.memoryOverRedisHit(configuration)
    case .redisOutage: try await RedisOutageBenchmark.run(configuration)
    case .fleetCoalescing: try await FleetBenchmark.coalescing(configuration)
    case .httpRevalidate: try await HTTPBenchmarks.revalidate(configuration)
    case .tagsInvalidate: try await TagBenchmarks.invalidate(configuration)
    }
  }
}
