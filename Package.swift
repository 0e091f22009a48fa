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
    .library(name: "AsyncCacheTesting", targets: ["AsyncCacheTesting"]),
    .executable(name: "AsyncCacheDemo", targets: ["AsyncCacheDemo"]),
    .executable(name: "AsyncCacheBenchmarks", targets: ["AsyncCacheBenchmarks"]),
  ],
  // No package dependencies, now or later: the toolchain and the system only.
  targets: [
    .target(name: "AsyncCache", swiftSettings: strict),
    .target(name: "AsyncCacheTesting", dependencies: ["AsyncCache"], swiftSettings: strict),
    .executableTarget(name: "AsyncCacheDemo", dependencies: ["AsyncCache"], swiftSettings: strict),
    .executableTarget(
      name: "AsyncCacheBenchmarks",
      dependencies: ["AsyncCache"],
      path: "Benchmarks/AsyncCacheBenchmarks",
      swiftSettings: strict
    ),
    .testTarget(
      name: "AsyncCacheTests",
      dependencies: ["AsyncCache", "AsyncCacheTesting"],
      swiftSettings: strict
    ),
    .testTarget(
      name: "AsyncCacheTestingTests",
      dependencies: ["AsyncCache", "AsyncCacheTesting"],
      swiftSettings: strict
    ),
  ],
  swiftLanguageModes: [.v6]
)
