import AsyncCache
import Foundation
import Testing

@Suite("CacheKeyEncoding and CacheValueCoder")
struct CacheKeyEncodingTests {
  struct Compound: Codable, Hashable, Sendable {
    var user: Int
    var path: String
  }

  enum Kind: String, Sendable { case small, large }

  @Test("built-in key encodings round-trip")
  func roundTrips() throws {
    #expect(try CacheKeyEncoding<String>.string.encode("a/b") == "a/b")
    #expect(try CacheKeyEncoding<Int>.description.encode(-42) == "-42")
    #expect(try CacheKeyEncoding<Int>.description.decode("-42") == -42)
    #expect(try CacheKeyEncoding<Kind>.rawValue.decode("large") == .large)
    let uuid = UUID()
    #expect(try CacheKeyEncoding<UUID>.uuid.decode(CacheKeyEncoding<UUID>.uuid.encode(uuid)) == uuid)
    let compound = Compound(user: 7, path: "a/b")
    let json = CacheKeyEncoding<Compound>.json
    #expect(try json.encode(compound) == #"{"path":"a/b","user":7}"#)
    #expect(try json.decode(json.encode(compound)) == compound)
  }

  @Test("strings that no key encodes to are a typed decoding error")
  func undecodable() {
    #expect { try CacheKeyEncoding<Int>.description.decode("seven") } throws: { error in
      (error as? PersistenceError)?.code == .decodingFailed
    }
    #expect { try CacheKeyEncoding<Kind>.rawValue.decode("medium") } throws: { error in
      (error as? PersistenceError)?.code == .decodingFailed
    }
    #expect { try CacheKeyEncoding<Compound>.json.decode("{") } throws: { error in
      (error as? PersistenceError)?.code == .decodingFailed
    }
  }

  @Test("different compound keys never encode alike")
  func injective() throws {
    let json = CacheKeyEncoding<Compound>.json
    let keys = [
      Compound(user: 1, path: "1"), Compound(user: 11, path: ""), Compound(user: 1, path: "\"1"),
      Compound(user: 1, path: "a/b"), Compound(user: 1, path: "a_b"),
    ]
    let encoded = try Set(keys.map(json.encode))
    #expect(encoded.count == keys.count)
  }

  @Test("value coders round-trip")
  func valueCoders() throws {
    let compound = Compound(user: 3, path: "x")
    for coder in [CacheValueCoder<Compound>.json, .propertyList] {
      #expect(try coder.decode(coder.encode(compound)) == compound)
    }
    #expect(try CacheValueCoder<String>.utf8.decode(CacheValueCoder<String>.utf8.encode("héllo")) == "héllo")
    #expect(try CacheValueCoder<Data>.data.encode(Data([1, 2, 3])) == Data([1, 2, 3]))
    #expect { try CacheValueCoder<String>.utf8.decode(Data([0xFF, 0xFE])) } throws: { error in
      (error as? PersistenceError)?.code == .decodingFailed
    }
  }
}
