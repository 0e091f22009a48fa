import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

@Suite("Default key encodings in the disk and UserDefaults layers")
struct DefaultKeyEncodingTests {
  struct Product: Codable, Hashable, Sendable {
    var name: String
  }

  @Test("DiskLayer<Int, Product> and DiskLayer<UUID, Data> need no encoding, and keep their keys across a reopen")
  func disk() async throws {
    let directory = try TemporaryDirectory()
    defer { directory.remove() }
    let products = try await DiskLayer<Int, Product>(directory: directory.url.appendingPathComponent("p"))
    try await products.insert(Product(name: "tea"), for: 42)
    let reopened = try await DiskLayer<Int, Product>(directory: directory.url.appendingPathComponent("p"))
    #expect(try await reopened.entry(for: 42)?.value == Product(name: "tea"))
    #expect(await reopened.keys == [42])
    let id = UUID()
    let blobs = try await DiskLayer<UUID, Data>(directory: directory.url.appendingPathComponent("b"))
    try await blobs.insert(Data([7]), for: id)
    #expect(try await blobs.entry(for: id)?.value == Data([7]))
  }

  @Test("UserDefaultsLayer<Int, Product> and UserDefaultsLayer<UUID, Data> need no encoding")
  func userDefaults() async throws {
    let suite = UserDefaultsLayerTests.TestSuite()
    defer { suite.remove() }
    let products = try UserDefaultsLayer<Int, Product>(suiteName: suite.name)
    try await products.insert(Product(name: "tea"), for: 42)
    #expect(try await products.entry(for: 42)?.value == Product(name: "tea"))
    let id = UUID()
    let blobs = try UserDefaultsLayer<UUID, Data>(suiteName: suite.name, configuration: .init(namespace: "blobs"))
    try await blobs.insert(Data([7]), for: id)
    #expect(try await blobs.entry(for: id)?.value == Data([7]))
  }
}
