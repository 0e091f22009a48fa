import AsyncCache
import AsyncCacheSQLite
import Foundation
import PersistenceTestSupport
import Testing

/// RELIABILITY.md row 17 for the SQLite layer: keys are equal exactly when Swift calls them
/// equal, pending or written, before and after reopening; namespaces never meet.
///
/// Alone it takes about 3 s under ThreadSanitizer; in the whole suite under it on 2 cores, it
/// waits behind every other test's jobs and took over 2 minutes, so its limit (there to catch a
/// hang) is five.
@Suite("SQLiteLayer key identity", .timeLimit(.minutes(5)))
struct SQLiteLayerKeyIdentityTests {
  @Test("keys that differ only in normalization are one key: nothing lost, nothing counted as damage")
  func normalizationPairsAreOneKey() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    let layer = try await SQLiteLayer<String, Data>(url: url)
    for index in 0..<100 {
      try await layer.insert(Data("precomposed \(index)".utf8), for: "caf\u{E9} \(index)")
      try await layer.insert(Data("decomposed \(index)".utf8), for: "cafe\u{301} \(index)")
    }
    func check(_ layer: SQLiteLayer<String, Data>) async throws {
      for index in 0..<100 {
        for key in ["caf\u{E9} \(index)", "cafe\u{301} \(index)"] {
          #expect(try await layer.value(for: key) == Data("decomposed \(index)".utf8), "\(key.debugDescription)")
        }
      }
      #expect(Set(try await layer.keys) == Set((0..<100).map { "caf\u{E9} \($0)" }))
      #expect(await layer.statistics.damagedEntries == 0)
      #expect(await layer.recentEvents.isEmpty)
    }
    try await check(layer)
    try await layer.flush()
    try await check(layer)
    #expect(try await layer.usage.count == 100)
    try await layer.close()
    try await check(try await SQLiteLayer<String, Data>(url: url))
  }

  @Test(
    "hostile keys in neighbouring namespaces keep their values across flush, reopen and removeAll",
    arguments: [11, 12, 13] as [UInt64])
  func hostileKeys(seed: UInt64) async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    var generator = HostileKeys(seed: seed)
    let keys = generator.keys(150)
    var models: [String: KeyIdentityModel] = [:]
    var layers: [String: SQLiteLayer<String, Data>] = [:]
    for namespace in HostileKeys.namespaces {
      let layer = try await SQLiteLayer<String, Data>(url: url, namespace: namespace)
      var model = KeyIdentityModel()
      try await model.write(keys.shuffled(using: &generator.random), to: layer, tag: namespace)
      models[namespace] = model
      layers[namespace] = layer
    }
    for (namespace, layer) in layers {
      #expect(try await models[namespace]!.mismatches(in: layer, probing: keys).isEmpty, "\(namespace)")
      try await layer.flush()
      #expect(try await models[namespace]!.mismatches(in: layer, probing: keys).isEmpty, "\(namespace)")
      try await layer.close()
    }
    // Emptying one namespace leaves every neighbour as it was.
    let emptied = try await SQLiteLayer<String, Data>(url: url, namespace: "a")
    try await emptied.removeAll()
    try await emptied.flush()
    models["a"] = KeyIdentityModel()
    for namespace in HostileKeys.namespaces {
      let reopened = try await SQLiteLayer<String, Data>(url: url, namespace: namespace)
      #expect(try await models[namespace]!.mismatches(in: reopened, probing: keys).isEmpty, "\(namespace)")
      #expect(Set(try await reopened.keys) == models[namespace]!.keys, "\(namespace)")
      #expect(await reopened.statistics.damagedEntries == 0)
    }
  }

  @Test("a memory layer over a SQLite layer answers as the SQLite layer alone does, pending and written")
  func memoryOverSQLite() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    var generator = HostileKeys(seed: 21)
    let keys = generator.keys(150)
    var model = KeyIdentityModel()
    let sqlite = try await SQLiteLayer<String, Data>(url: url)
    let chain = try CacheChain<String, Data>([MemoryLayer<String, Data>(), sqlite])
    try await model.write(keys, to: chain, tag: "chain")
    #expect(try await model.mismatches(in: chain, probing: keys).isEmpty)
    #expect(try await model.mismatches(in: sqlite, probing: keys).isEmpty)
    try await sqlite.close()
    let reopened = try await SQLiteLayer<String, Data>(url: url)
    #expect(try await model.mismatches(in: reopened, probing: keys).isEmpty)
    let rebuilt = try CacheChain<String, Data>([MemoryLayer<String, Data>(), reopened])
    #expect(try await model.mismatches(in: rebuilt, probing: keys).isEmpty)
  }

  @Test("namespaces Swift calls equal are one namespace")
  func equalNamespaces() async throws {
    let folder = try TemporaryDirectory()
    defer { folder.remove() }
    let url = folder.appending("cache.sqlite")
    for (first, second) in HostileKeys.equalNamespaces {
      let one = try await SQLiteLayer<String, Data>(url: url, namespace: first)
      try await one.insert(Data("v".utf8), for: "k")
      try await one.flush()
      let other = try await SQLiteLayer<String, Data>(url: url, namespace: second)
      #expect(try await other.value(for: "k") == Data("v".utf8))
      #expect(one.namespace == other.namespace)
    }
  }
}
