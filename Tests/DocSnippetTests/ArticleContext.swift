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

/// A progress bar of a user interface.
struct ProgressBar: Sendable {
  var fraction: Double {
    get { 0 }
    nonmutating set {}
  }
}

let exchange = Exchange()
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
