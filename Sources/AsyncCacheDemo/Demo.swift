import AsyncCache
import AsyncCacheSQLite
import Foundation
import Synchronization

/// A slow catalogue service: the origin the demo caches.
final class CatalogueService: AsyncFetcher, Sendable {
  struct NotFound: Error, CustomStringConvertible {
    var id: Int
    var description: String { "product \(id) not found" }
  }

  let latency: Duration
  let calls = Atomic<Int>(0)

  init(latency: Duration) { self.latency = latency }

  func fetch(_ id: Int) async throws -> String {
    calls.wrappingAdd(1, ordering: .relaxed)
    try await Task.sleep(for: latency)
    if id == 404 { throw NotFound(id: id) }
    return "Product #\(id)"
  }

  var callCount: Int { calls.load(ordering: .relaxed) }
}

@main
struct Demo {
  /// `AsyncCacheDemo` runs the tour of the catalogue, then a short gallery;
  /// `AsyncCacheDemo gallery [photos]` runs the gallery alone, longer, with a progress bar.
  static func main() async throws {
    switch Mode(arguments: Array(CommandLine.arguments.dropFirst())) {
    case .tour:
      try await catalogueTour()
      print()
      try await Gallery(photoCount: 120).present(title: "Gallery")
      print("  (`swift run -c release AsyncCacheDemo gallery` walks 300 photos, with a progress bar on a terminal)")
    case .gallery(let photoCount):
      try await Gallery(photoCount: photoCount).present(title: "swift-async-cache gallery")
    case nil:
      FileHandle.standardError.write(Data("usage: AsyncCacheDemo [gallery [photos]]\n".utf8))
      exit(64)  // EX_USAGE
    }
  }

  /// The catalogue: persistence, coalescing, hits, cancellation and errors, each timed.
  static func catalogueTour() async throws {
    let service = CatalogueService(latency: .milliseconds(150))
    let memory = try MemoryLayer<Int, String>(configuration: .init(countLimit: 1_000))
    // The embedded default store: SQLite in a local folder, behind the memory layer.
    let folder = URL(fileURLWithPath: FileManager.default.currentDirectoryPath).appendingPathComponent("demo-cache")
    let disk = try await SQLiteLayer<Int, String>(
      url: folder.appendingPathComponent("catalogue.sqlite"), namespace: "products",
      configuration: .init(sizeLimit: 10 << 20), keyEncoding: .description, valueCoder: .utf8)
    let catalogue = try LoadingCache(layers: [memory, disk], origin: service)
    let clock = ContinuousClock()

    print(
      """
      swift-async-cache demo: memory → SQLite (demo-cache/catalogue.sqlite) in front of an origin \
      that takes 150 ms per call

      """)

    // 0. Persistence: the catalogue's first page survives a restart of the process.
    let firstPage = Array(1...20)
    let storedBefore = try await disk.usage.count
    var elapsed = try await clock.measure {
      try await withThrowingTaskGroup(of: String.self) { group in
        for id in firstPage { group.addTask { try await catalogue.value(for: id) } }
        try await group.waitForAll()
      }
    }
    try await disk.flush()
    if service.callCount == 0 {
      report("launch: the first page (20 products) came from disk, written by an earlier run", elapsed, calls: 0)
    } else {
      report(
        "launch: the first page (20 products) came from the origin and is now on disk; run the demo again "
          + "to see it served from there", elapsed, calls: service.callCount)
    }
    print("  (\(storedBefore) rows were on disk at launch)")

    // 1. Coalescing: many concurrent requests for one key, one origin call.
    var before = service.callCount
    elapsed = try await clock.measure {
      try await withThrowingTaskGroup(of: String.self) { group in
        for _ in 0..<100 { group.addTask { try await catalogue.value(for: 500) } }
        try await group.waitForAll()
      }
    }
    report("100 concurrent requests for product 500", elapsed, calls: service.callCount - before)

    // 2. Hits: served from memory, synchronously, without the origin.
    before = service.callCount
    elapsed = try await clock.measure {
      for _ in 0..<100_000 { _ = try await catalogue.value(for: 500) }
    }
    report("100,000 more requests for product 500", elapsed, calls: service.callCount - before)

    // 3. Many tasks, many keys: one load per key, more keys than the memory layer holds.
    before = service.callCount
    elapsed = try await clock.measure {
      try await withThrowingTaskGroup(of: Void.self) { group in
        for task in 0..<8 {
          group.addTask {
            for request in 0..<125 { _ = try await catalogue.value(for: 1_000 + (task * 7 + request) % 50) }
          }
        }
        try await group.waitForAll()
      }
    }
    report("1,000 requests from 8 tasks over 50 products", elapsed, calls: service.callCount - before)

    // 4. Cancellation: the cancelled request leaves at once and alone.
    before = service.callCount
    let requests = (0..<3).map { _ in Task { try await catalogue.value(for: 999) } }
    try await Task.sleep(for: .milliseconds(20))  // let them join the load
    let cancelledAt = clock.now
    requests[0].cancel()
    let cancelled = await requests[0].result
    let cancelledAfter = cancelledAt.duration(to: clock.now)
    let others = try await [requests[1].value, requests[2].value]
    print(
      "  3 requests for product 999, the first cancelled: it ended after \(format(cancelledAfter)) with "
        + "\(cancelled.errorDescription); the others got \"\(others[0])\"; origin calls: \(service.callCount - before)"
    )

    // 5. Errors reach every waiter and are not stored: the next request tries again.
    before = service.callCount
    let failures = await withTaskGroup(of: Bool.self) { group in
      for _ in 0..<5 { group.addTask { (try? await catalogue.value(for: 404)) == nil } }
      var failed = 0
      for await didFail in group where didFail { failed += 1 }
      return failed
    }
    let retried = (try? await catalogue.value(for: 404)) == nil
    print(
      "  5 concurrent requests for missing product 404: \(failures) failed with the origin's error; "
        + "a later request failed again: \(retried); origin calls: \(service.callCount - before)"
    )

    // The scratch products of sections 1 to 5 leave the cache, so that every run shows the same.
    for id in [500, 999] + Array(1_000..<1_050) { try await catalogue.removeValue(for: id) }
    try await disk.close()

    let layer = memory.statistics
    let loads = catalogue.statistics
    let stored = await disk.statistics
    print(
      """

      Statistics
        memory layer: \(layer.count) entries, \(layer.hits) hits, \(layer.misses) misses, \
      \(layer.evictions.total) evictions
        loads: \(loads.loads) started, \(loads.coalescedRequests) requests joined one in flight, \
      \(loads.loadFailures) failed, \(loads.cancelledRequests) requests cancelled
        SQLite layer: \(stored.hits) hits, \(stored.misses) misses, \(stored.rowsWritten) rows written in \
      \(stored.transactions) transactions
        origin calls in all: \(service.callCount)
      """
    )
    try await CurveSection.present()
  }

  static func report(_ what: String, _ elapsed: Duration, calls: Int) {
    print("  \(what): \(format(elapsed)), origin calls: \(calls)")
  }

  static func format(_ duration: Duration) -> String {
    let milliseconds = Double(duration.components.seconds) * 1e3 + Double(duration.components.attoseconds) / 1e15
    if milliseconds < 1 { return "\((milliseconds * 1000).rounded() / 1000) ms" }
    return "\(Int(milliseconds.rounded())) ms"
  }
}

/// What the command line asks for.
enum Mode {
  /// No argument: the tour of the catalogue, then a short gallery.
  case tour
  /// `gallery [photos]`: the gallery alone, 300 photos unless told.
  case gallery(photoCount: Int)

  /// `nil` when the arguments make no sense.
  init?(arguments: [String]) {
    switch arguments.first {
    case nil:
      self = .tour
    case "gallery" where arguments.count == 1:
      self = .gallery(photoCount: 300)
    case "gallery" where arguments.count == 2:
      guard let count = Int(arguments[1]), count > 0 else { return nil }
      self = .gallery(photoCount: count)
    default:
      return nil
    }
  }
}

extension Result {
  var errorDescription: String {
    switch self {
    case .success: "no error"
    case .failure(let error): error is CancellationError ? "CancellationError" : "\(error)"
    }
  }
}
