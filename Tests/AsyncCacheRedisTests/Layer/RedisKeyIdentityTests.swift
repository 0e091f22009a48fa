import AsyncCache
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCacheRedis

/// RELIABILITY.md row 17 for the Redis layer: namespaces that extend each other never meet, and
/// keys are equal exactly when Swift calls them equal.
@Suite("RedisLayer key identity")
struct RedisKeyIdentityTests {
  @Test("no namespace's prefix starts another's, whatever characters they hold")
  func prefixesArePrefixFree() {
    let namespaces = HostileKeys.namespaces + ["a\\b", "\\", ":", "::", "a::b", "a\\\\:b", "a:", "a\\:"]
    for first in namespaces {
      for second in namespaces where first != second {
        let (one, other) = (
          RedisLayer<String, Data>.keyPrefix(of: first), RedisLayer<String, Data>.keyPrefix(of: second)
        )
        #expect(!other.starts(with: one), "\(first.debugDescription) and \(second.debugDescription)")
      }
    }
    #expect(RedisLayer<String, Data>.keyPrefix(of: "thumbnails") == Array("thumbnails:".utf8))
    #expect(RedisLayer<String, Data>.keyPrefix(of: "app:v2") == Array("app\\:v2:".utf8))
    #expect(RedisLayer<String, Data>.keyPrefix(of: "a\\") == Array("a\\\\:".utf8))
  }
}

@Suite("RedisLayer key identity against a real redis-server", .redisServer)
struct RedisKeyIdentityServerTests {
  @Test("namespace a with key b:c and namespace a:b with key c stay apart, and removeAll stays in its namespace")
  func namespacesThatExtendEachOther() async throws {
    let server = try await RedisServer.start()
    let a = try makeLayer(server, namespace: "a")
    let ab = try makeLayer(server, namespace: "a:b")
    try await a.insert(Data("a/b:c".utf8), for: "b:c")
    try await ab.insert(Data("a:b/c".utf8), for: "c")
    #expect(try await a.value(for: "b:c") == Data("a/b:c".utf8))
    #expect(try await ab.value(for: "c") == Data("a:b/c".utf8))
    #expect(try await a.value(for: "b\\:c") == nil)
    // Stored as `a:b:c` and `a\:b:c`.
    #expect(integer(try await server.command("EXISTS", "a:b:c")) == 1)
    #expect(integer(try await server.command("EXISTS", "a\\:b:c")) == 1)
    try await a.removeAll()
    #expect(try await a.value(for: "b:c") == nil)
    #expect(try await ab.value(for: "c") == Data("a:b/c".utf8))
    try await ab.insert(Data("again".utf8), for: "c")
    try await ab.removeAll()
    #expect(integer(try await server.command("DBSIZE")) == 0)
  }

  @Test(
    "hostile keys in neighbouring namespaces keep their values, and removeAll of one leaves the others",
    arguments: [31, 32] as [UInt64])
  func hostileKeys(seed: UInt64) async throws {
    let server = try await RedisServer.start()
    var generator = HostileKeys(seed: seed)
    let keys = generator.keys(120)
    var models: [String: KeyIdentityModel] = [:]
    for namespace in HostileKeys.namespaces {
      var model = KeyIdentityModel()
      try await model.write(
        keys.shuffled(using: &generator.random), to: try makeLayer(server, namespace: namespace), tag: namespace)
      models[namespace] = model
    }
    try await makeLayer(server, namespace: "a").removeAll()
    models["a"] = KeyIdentityModel()
    for namespace in HostileKeys.namespaces {
      // A new layer object, as another instance would have.
      let layer = try makeLayer(server, namespace: namespace)
      #expect(try await models[namespace]!.mismatches(in: layer, probing: keys).isEmpty, "\(namespace)")
      #expect(layer.statistics.failures == 0)
    }
    let total = models.values.reduce(0) { $0 + $1.keys.count }
    #expect(integer(try await server.command("DBSIZE")) == Int64(total))
  }

  @Test("namespaces and keys Swift calls equal are one namespace and one key")
  func equalNamespacesAndKeys() async throws {
    let server = try await RedisServer.start()
    for (first, second) in HostileKeys.equalNamespaces {
      try await makeLayer(server, namespace: first).insert(Data("v".utf8), for: "caf\u{E9}")
      #expect(try await makeLayer(server, namespace: second).value(for: "cafe\u{301}") == Data("v".utf8))
    }
    #expect(integer(try await server.command("DBSIZE")) == Int64(HostileKeys.equalNamespaces.count))
  }
}
