// swift-tools-version: 6.2
import PackageDescription

// Every target builds in Swift 6 language mode with all warnings treated as errors.
let strict: [SwiftSetting] = [
  .treatAllWarnings(as: .error),
  .enableUpcomingFeature("ExistentialAny"),
  .enableUpcomingFeature("InternalImportsByDefault"),
]

let package = Package(
  name: "swift-async-cache",
  platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
  products: [
    .library(name: "AsyncCache", targets: ["AsyncCache"]),
    .library(name: "AsyncCacheSQLite", targets: ["AsyncCacheSQLite"]),
    .library(name: "AsyncCacheRedis", targets: ["AsyncCacheRedis"]),
    .library(name: "AsyncCacheTesting", targets: ["AsyncCacheTesting"]),
    .library(name: "AsyncCacheURLSession", targets: ["AsyncCacheURLSession"]),
    .executable(name: "AsyncCacheDemo", targets: ["AsyncCacheDemo"]),
    .executable(name: "AsyncCacheBenchmarks", targets: ["AsyncCacheBenchmarks"]),
  ],
  // No package dependencies, now or later: the toolchain and the system only.
  targets: [
    .target(name: "AsyncCache", dependencies: ["CAsyncCacheShims"], swiftSettings: strict),
    // What Swift does not spell, as inline C (no library, no symbols): a prefetch hint, and for
    // the benchmarks `mach_task_self()` on Apple platforms.
    .target(name: "CAsyncCacheShims"),
    // The system's libsqlite3 (Debian: libsqlite3-dev), linked only by users of AsyncCacheSQLite.
    .systemLibrary(name: "CSQLite", path: "Sources/CSQLite"),
    // A VFS over the system's default one, in C: it lets a read that the page cache can answer run
    // on the caller's thread, and it holds reads for the tests of a slow device.
    .target(name: "CAsyncCacheSQLiteVFS", dependencies: ["CSQLite"]),
    .target(
      name: "AsyncCacheSQLite", dependencies: ["AsyncCache", "CSQLite", "CAsyncCacheSQLiteVFS"], swiftSettings: strict),
    .target(name: "AsyncCacheTesting", dependencies: ["AsyncCache"], swiftSettings: strict),
    // The shared tier: a Redis client of its own on POSIX sockets; tests and benchmarks need redis-server.
    .target(name: "AsyncCacheRedis", dependencies: ["AsyncCache", "CAsyncCacheShims"], swiftSettings: strict),
    // URLSession origin; links FoundationNetworking on Linux only for those who use it.
    .target(name: "AsyncCacheURLSession", dependencies: ["AsyncCache"], swiftSettings: strict),
    .executableTarget(
      name: "AsyncCacheDemo", dependencies: ["AsyncCache", "AsyncCacheSQLite"], swiftSettings: strict),
    .executableTarget(
      name: "AsyncCacheBenchmarks",
      dependencies: [
        "AsyncCache", "AsyncCacheSQLite", "AsyncCacheRedis", "AsyncCacheURLSession", "CAsyncCacheShims", "CSQLite",
        "HTTPTestSupport",
      ],
      path: "Benchmarks/AsyncCacheBenchmarks",
      swiftSettings: strict
    ),
    // A child process that tests start, block and kill to fault persistent layers for real.
    .executableTarget(
      name: "PersistenceProbe",
      dependencies: ["AsyncCache", "AsyncCacheRedis", "AsyncCacheSQLite", "CSQLite", "PersistenceTestSupport"],
      path: "Tests/PersistenceProbe",
      swiftSettings: strict
    ),
    // Fixtures shared by the tests: temporary directories, tmpfs mounts, probes, child processes.
    .target(
      name: "PersistenceTestSupport",
      dependencies: ["AsyncCache", "CChildProcess"],
      path: "Tests/PersistenceTestSupport",
      swiftSettings: strict
    ),
    // A small HTTP/1.1 server on a loopback port, honest or hostile, for the URLSessionFetcher
    // tests and the http benchmarks.
    .target(
      name: "HTTPTestSupport",
      dependencies: ["AsyncCache"],
      path: "Tests/HTTPTestSupport",
      swiftSettings: strict
    ),
    // What Swift's Glibc module does not declare for starting a child process (a GNU extension).
    .target(name: "CChildProcess", path: "Tests/CChildProcess"),
    // Helpers every test target shares: an event log, an error to throw on purpose.
    .target(
      name: "TestSupport",
      dependencies: ["AsyncCache"],
      path: "Tests/TestSupport",
      swiftSettings: strict
    ),
    .testTarget(
      name: "AsyncCacheTests",
      dependencies: ["AsyncCache", "AsyncCacheTesting", "PersistenceTestSupport", "PersistenceProbe", "TestSupport"],
      swiftSettings: strict
    ),
    .testTarget(
      name: "AsyncCacheSQLiteTests",
      dependencies: [
        "AsyncCache", "AsyncCacheSQLite", "AsyncCacheTesting", "CSQLite", "PersistenceTestSupport",
        "PersistenceProbe", "TestSupport",
      ],
      // Databases written by earlier versions, which newer ones must read.
      resources: [.copy("Fixtures")],
      swiftSettings: strict
    ),
    .testTarget(
      name: "AsyncCacheTestingTests",
      dependencies: ["AsyncCache", "AsyncCacheTesting", "TestSupport"],
      swiftSettings: strict
    ),
    // Starts redis-server processes of its own on loopback ports (skipped without one, outside CI).
    .testTarget(
      name: "AsyncCacheRedisTests",
      dependencies: [
        "AsyncCache", "AsyncCacheRedis", "AsyncCacheTesting", "PersistenceProbe", "PersistenceTestSupport",
        "TestSupport",
      ],
      swiftSettings: strict),
    // The ```swift blocks of the symbols' documentation, the articles and the README, generated
    // by .ci/doc-snippets: compiled by the test build, never run.
    .testTarget(
      name: "DocSnippetTests",
      dependencies: [
        "AsyncCache", "AsyncCacheRedis", "AsyncCacheSQLite", "AsyncCacheTesting", "AsyncCacheURLSession",
      ],
      swiftSettings: strict
    ),
    // Runs URLSessionFetcher against a small HTTP/1.1 server of its own on a loopback port.
    .testTarget(
      name: "AsyncCacheURLSessionTests",
      dependencies: ["AsyncCache", "AsyncCacheTesting", "AsyncCacheURLSession", "HTTPTestSupport", "TestSupport"],
      swiftSettings: strict
    ),
  ],
  swiftLanguageModes: [.v6]
)
