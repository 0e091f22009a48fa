import AsyncCache
import AsyncCacheURLSession
import Foundation
import HTTPTestSupport

#if canImport(FoundationNetworking)
  import FoundationNetworking
#endif

/// The benchmarks of the HTTP origin.
enum HTTPBenchmarks {
  /// `http.revalidate`: refreshing a 1 MB resource that did not change, from a loopback HTTP
  /// server, through `URLSessionFetcher.fetchEntry(_:current:)`: without the entry it holds
  /// (a download, answered 200 with the body) and with it (a conditional `GET`, answered 304).
  /// Reports the time per refresh, and the response bytes the server wrote per refresh (head
  /// and body): the revalidation's target is under 1% of the download's.
  static func revalidate(_ run: RunConfiguration) async throws -> [ResultRow] {
    let size = 1 << 20
    let body = Data((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 131) })
    let tag = "\"v1\""
    let full = LoopbackHTTPServer.response(status: 200, fields: ["ETag": tag], body: body)
    let notModified = LoopbackHTTPServer.response(status: 304, fields: ["ETag": tag])
    let written = Locked(0)
    let route: LoopbackHTTPServer.Route = { request in
      let response = request.headers["if-none-match"] == tag ? notModified : full
      written.withLock { $0 += response.count }
      return .raw(response)
    }
    let server = try LoopbackHTTPServer(routes: ["/resource": route])
    defer { Task { await server.stop() } }
    let configuration = URLSessionConfiguration.ephemeral
    configuration.requestCachePolicy = .reloadIgnoringLocalCacheData
    let fetcher = URLSessionFetcher(
      session: URLSession(configuration: configuration), configuration: .init(timeLimit: nil))
    let url = server.url("/resource")
    guard case .value(let first, let metadata, _) = try await fetcher.fetchEntry(url, current: nil) else {
      throw BenchmarkFailure("the first fetch of the resource was not a value")
    }
    let current = CacheEntry(first, expiresAt: nil, metadata: metadata)
    let refreshes = run.httpRefreshes
    var bytes: [String: [Double]] = [:]
    func contender(_ name: String, current: CacheEntry<Data>?, expectingBody: Bool) -> Contender {
      Contender(name: name, operations: refreshes) {
        let before = written.withLock { $0 }
        let elapsed = try await timed(expecting: expectingBody ? refreshes * size : 0) {
          var received = 0
          for _ in 0..<refreshes {
            switch try await fetcher.fetchEntry(url, current: current) {
            case .value(let data, _, _): received += data.count
            case .notModified: break
            }
          }
          return received
        }
        bytes[name, default: []].append(Double(written.withLock { $0 } - before) / Double(refreshes))
        return elapsed
      }
    }
    let download = "200 (download)"
    let revalidation = "304 (revalidation)"
    let measurements = try await measureInterleaved(
      [
        contender(download, current: nil, expectingBody: true),
        contender(revalidation, current: current, expectingBody: false),
      ],
      repetitions: run.repetitions)
    await server.stop()
    var rows = ResultRow.rows(
      benchmark: Benchmark.httpRevalidate.rawValue, measurements: measurements, baseline: download, target: nil,
      notes: ["a 1 MiB resource from a loopback HTTP/1.1 server; time per refresh, informational"])
    let median = { (name: String) -> Double in
      let sorted = (bytes[name] ?? [0]).sorted()
      return sorted[sorted.count / 2]
    }
    let downloadBytes = median(download)
    for name in [download, revalidation] {
      rows.append(
        ResultRow(
          benchmark: Benchmark.httpRevalidate.rawValue, implementation: "\(name), bytes", value: median(name),
          unit: .bytesPerOperation, baseline: "\(download), bytes",
          ratio: downloadBytes > 0 ? median(name) / downloadBytes : nil,
          target: name == revalidation ? .ratioAtMost(0.01) : nil, samples: bytes[name] ?? [],
          notes: name == revalidation ? ["response bytes the server wrote per refresh, head and body"] : []))
    }
    return rows
  }
}
