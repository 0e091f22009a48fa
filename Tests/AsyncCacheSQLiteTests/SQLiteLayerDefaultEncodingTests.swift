import AsyncCache
import AsyncCacheSQLite
import Foundation
import PersistenceTestSupport
import Testing

enum Region: String, CacheKeyEncodable {
  case eu, us
}

@Suite("Keys and values encoded by default", .timeLimit(.minutes(3)))
struct SQLiteLayerDefaultEncodingTests {
  struct Product: Codable, Hashable, Sendable {
    var name: String
    var price: Int
  }

  @Test("SQLiteLayer<Int, Product>(url:) needs no encoding: integer keys as text, Codable values as JSON")
  func intKeysCodableValues() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    do {
      let products = try await SQLiteLayer<Int, Product>(url: url)
      try await products.insert(Product(name: "tea", price: 3), for: 42)
      try await products.insert(Product(name: "pot", price: 30), for: -7)
      try await products.close()
    }
    let reopened = try await SQLiteLayer<Int, Product>(url: url)
    #expect(try await reopened.value(for: 42) == Product(name: "tea", price: 3))
    #expect(try await reopened.value(for: -7)?.name == "pot")
    #expect(try await reopened.value(for: 7) == nil)
    // Stored as text a person can read, and as JSON.
    let raw = try await SQLiteLayer<String, Data>(url: url)
    let json = try #require(try await raw.value(for: "42"))
    #expect(try JSONDecoder().decode(Product.self, from: json) == Product(name: "tea", price: 3))
  }

  @Test("UUID and RawRepresentable keys, and Data values, are stored without an encoding argument")
  func otherKeyTypes() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let id = UUID()
    let byID = try await SQLiteLayer<UUID, Data>(url: folder.appending("a.sqlite"))
    try await byID.insert(Data([1, 2]), for: id)
    #expect(try await byID.value(for: id) == Data([1, 2]))
    let byRegion = try await SQLiteLayer<Region, String>(url: folder.appending("b.sqlite"))
    try await byRegion.insert("Brussels", for: .eu)
    #expect(try await byRegion.value(for: .eu) == "Brussels")
    #expect(try await byRegion.value(for: .us) == nil)
    let raw = try await SQLiteLayer<String, Data>(url: folder.appending("b.sqlite"))
    #expect(try await raw.value(for: "eu") == Data("\"Brussels\"".utf8))
  }

  @Test("the default encodings are the documented ones, and decode what they encode")
  func encodings() throws {
    #expect(try Int.cacheKeyEncoding.encode(-12) == "-12")
    #expect(try Int.cacheKeyEncoding.decode("-12") == -12)
    #expect(throws: PersistenceError.self) { try Int.cacheKeyEncoding.decode("twelve") }
    #expect(try UInt8.cacheKeyEncoding.encode(255) == "255")
    let id = try #require(UUID(uuidString: "E621E1F8-C36C-495A-93FC-0C247A3E6E5F"))
    #expect(try UUID.cacheKeyEncoding.encode(id) == "E621E1F8-C36C-495A-93FC-0C247A3E6E5F")
    #expect(try Region.cacheKeyEncoding.encode(.us) == "us")
    #expect(try Region.cacheKeyEncoding.decode("eu") == .eu)
    #expect(throws: PersistenceError.self) { try Region.cacheKeyEncoding.decode("mars") }
    #expect(try String.cacheKeyEncoding.encode("cafe\u{301}") == "caf\u{E9}")
  }
}
