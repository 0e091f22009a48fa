// The names the documentation's examples use without declaring them, shared by the examples that
// .ci/doc-snippets compiles (DocSnippets.swift). Nothing here runs.
import AsyncCache
import Foundation

struct User: Codable, Hashable, Sendable {
  var id: Int
  var avatarURL: URL
}

struct UserID: RawRepresentable, Hashable, Sendable {
  var rawValue: String
}

struct Price: Codable, Equatable, Sendable {}
struct Product: Codable, Sendable {}
struct Preferences: Codable, Sendable {}
struct Avatar: Sendable {}

struct HTTPError: Error {
  var status: Int
  var retryAfter: Duration?
}

struct QuotaError: Error {}

enum DiskError: Error {
  case gone
}

struct API: Sendable {
  func user(_ id: Int) async throws -> User { throw QuotaError() }
  func users(_ ids: [Int]) async throws -> [User] { [] }
}

struct Settings: Sendable {
  var offlineMode: Bool { get async { false } }
}

struct Image: Sendable {
  func fitted(to size: Int) -> Image { self }
}

struct ImageKey: Hashable, Sendable {
  var size: Int
}

let api = API()
let url = URL(fileURLWithPath: "/tmp/example")
let settings = Settings()
let secret = "secret"

func show<T>(_ value: T) {}
func render(_ key: String) async throws -> Data { Data() }
func download(_ url: URL) async throws -> Data { Data() }
