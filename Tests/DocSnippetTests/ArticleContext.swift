// The names the articles' and the README's examples use without declaring them, for the examples
// that .ci/doc-snippets compiles (ArticleSnippets.swift); the symbols' examples share
// Context.swift. Nothing here runs.
import AsyncCache
import Foundation

/// A photo, by the articles that cache photos: its `id` keys the files, its `url` the network.
struct Photo: Codable, Hashable, Sendable {
  var id: String
  var url: URL
}

/// A decoded image, made from and saved as data.
struct Picture: Sendable {
  init(data: Data) {}
  var data: Data { Data() }
}

struct Session: Codable, Sendable {
  var user: String
}

struct Offline: Error {}
struct DiskDown: Error {}

extension API {
  func photo(_ id: String) async throws -> Photo { throw Offline() }
  func photos(_ ids: [String]) async throws -> [String: Photo] { [:] }
}

struct Exchange: Sendable {
  func price(of symbol: String) async throws -> Price { Price() }
}

struct Renderer: Sendable {
  func thumbnail(_ id: String) async throws -> Data { Data() }
}

struct HTTPClient: Sendable {
  func body(of url: URL, timeLimit: Duration, maximumBodySize: Int) async throws -> Data { Data() }
}

/// The shape of swift-log's `Logger` that the examples use.
struct ExampleLogger: Sendable {
  func info(_ message: @autoclosure () -> String) {}
  func notice(_ message: @autoclosure () -> String) {}
  func warning(_ message: @autoclosure () -> String) {}
}

/// swift-log's `Logger`, as far as the articles use it: its `log` method has swift-log's exact
/// signature, which ``CacheLogger/init(minimumLevel:forwardingTo:)`` must take as it is.
struct Logger: Sendable {
  enum Level: String, Codable, CaseIterable, Sendable {
    case trace, debug, info, notice, warning, error, critical
  }

  struct Message: ExpressibleByStringLiteral, Sendable {
    var value: String
    init(stringLiteral value: String) { self.value = value }
  }

  enum MetadataValue: ExpressibleByStringLiteral, Sendable {
    case string(String)
    init(stringLiteral value: String) { self = .string(value) }
  }

  typealias Metadata = [String: MetadataValue]

  var label: String
  var logLevel = Level.info

  init(label: String) { self.label = label }

  func log(
    level: Level, _ message: @autoclosure () -> Message, metadata: @autoclosure () -> Metadata? = nil,
    source: @autoclosure () -> String? = nil, file: String = #fileID, function: String = #function, line: UInt = #line
  ) {}
}

/// Hummingbird's types that the "In a server" article's routes use: a router, a request's
/// context with its path's parameters, response statuses, and `PersistError` (a struct, as
/// Hummingbird's, so that only matching by equality compiles).
struct Router: Sendable {
  struct Request: Sendable {}

  struct Context: Sendable {
    struct Parameters: Sendable {
      func require(_ name: String) throws -> String { name }
    }

    var parameters = Parameters()
  }

  func post(_ path: String, use handler: @escaping @Sendable (Request, Context) async throws -> HTTPResponse.Status) {}
}

enum HTTPResponse {
  struct Status: Sendable {
    static let created = Status()
    static let conflict = Status()

    private init() {}
  }
}

struct PersistError: Error, Equatable {
  static let duplicate = PersistError()

  private init() {}
}

/// swift-service-lifecycle's `Service` and graceful shutdown, as the "In a server" article's
/// metrics reporter uses them.
protocol Service: Sendable {
  func run() async throws
}

extension Task where Success == Never, Failure == Never {
  static var isShuttingDownGracefully: Bool { true }
}

func cancelWhenGracefulShutdown<T: Sendable>(
  _ operation: @escaping @Sendable () async throws -> T
) async rethrows -> T {
  try await operation()
}

/// swift-metrics' `Timer` and `Counter` (their initializers with dimensions and the methods the
/// reporter calls) and swift-prometheus' factory, with the properties the reporter sets.
final class Timer: Sendable {
  init(label: String, dimensions: [(String, String)] = []) {}
  func record(duration: Duration) {}
}

final class Counter: Sendable {
  init(label: String, dimensions: [(String, String)] = []) {}
  func increment<Value: BinaryInteger>(by amount: Value) {}
}

struct PrometheusMetricsFactory: Sendable {
  typealias Sanitizer = @Sendable (_ name: String, _ labels: [(String, String)]) -> (String, [(String, String)])

  var nameAndLabelSanitizer: Sanitizer = { ($0, $1) }
  var defaultDurationHistogramBuckets: [Duration] = []
}

/// Vapor's `Application`, as far as the "In a Vapor app" article's `/stats` route uses it.
struct Application: Sendable {
  struct Request: Sendable {}

  func get(_ path: String, use handler: @escaping @Sendable (Request) async throws -> String) {}
}

/// The articles' origin: an actor that counts its calls.
actor Catalog {
  private(set) var calls = 0

  func item(_ id: String) async throws -> Data {
    calls += 1
    return Data("item \(id)".utf8)
  }
}

/// A progress bar of a user interface.
struct ProgressBar: Sendable {
  var fraction: Double {
    get { 0 }
    nonmutating set {}
  }
}

let exchange = Exchange()
let router = Router()
let app = Application()
let catalog = Catalog()
let renderer = Renderer()
let httpClient = HTTPClient()
let logger = ExampleLogger()
let progressBar = ProgressBar()
let caches = url
let databaseURL = url
let folder = url
let snapshotURL = url
let id = "photo 1"
let photoIDs = ["photo 1", "photo 2"]
let visibleIDs = ["photo 1"]
let albumIDs = ["photo 1", "photo 2"]

func showPlaceholder() {}

let visibleIndexChanges = AsyncStream<Int> { $0.finish() }
