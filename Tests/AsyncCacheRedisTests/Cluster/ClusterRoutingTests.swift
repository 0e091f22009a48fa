import Foundation
import Testing

@testable import AsyncCacheRedis

@Suite("Redis Cluster slots, topology and redirects")
struct ClusterRoutingTests {
  @Test("CRC16 slots match the reference values")
  func referenceSlots() {
    // The CRC16 check value of the cluster specification, and slots redis-cli reports.
    #expect(ClusterSlot.of(Array("123456789".utf8)) == 0x31C3)
    #expect(ClusterSlot.of(Array("foo".utf8)) == 12182)
    #expect(ClusterSlot.of(Array("bar".utf8)) == 5061)
    #expect(ClusterSlot.of(Array("hello".utf8)) == 866)
    #expect(ClusterSlot.of(Array("".utf8)) == 0)
  }

  @Test("hash tags: the first {…} with something inside decides the slot")
  func hashTags() {
    func slot(_ key: String) -> UInt16 { ClusterSlot.of(Array(key.utf8)) }
    #expect(slot("{user1000}.following") == slot("{user1000}.followers"))
    #expect(slot("{user1000}.following") == slot("user1000"))
    #expect(slot("foo{}{bar}") != slot("bar"), "an empty tag means the whole key")
    #expect(slot("foo{{bar}}zap") == slot("{bar"))
    #expect(slot("foo{bar}{zap}") == slot("bar"))
    #expect(slot("no-close{tag") != slot("tag"))
  }

  @Test("a prefix and a key give the slot of their concatenation")
  func prefixAndKey() {
    for (prefix, key) in [("ns:", "k"), ("{ns}:", "k"), ("ns:", "{k}"), ("n{", "s}x"), ("", ""), ("a", "")] {
      #expect(
        ClusterSlot.of(prefix: Array(prefix.utf8), key: key) == ClusterSlot.of(Array((prefix + key).utf8)),
        "\(prefix) + \(key)")
    }
  }

  @Test("CLUSTER SLOTS replies are read, and a host the node leaves out is the one asked")
  func topology() throws {
    func node(_ host: RESPValue, _ port: Int64) -> RESPValue {
      .array([host, .integer(port), .bulkString(Array("id".utf8))])
    }
    let reply = RESPValue.array([
      .array([.integer(0), .integer(5460), node(.bulkString(Array("10.0.0.1".utf8)), 7000)]),
      .array([.integer(5461), .integer(10922), node(.bulkString([]), 7001), node(.bulkString(Array("r".utf8)), 1)]),
      .array([.integer(10923), .integer(16383), node(.bulkString(Array("?".utf8)), 7002)]),
      .array([.integer(16000), .integer(16001), node(.null, 7000)]),
    ])
    let topology = try ClusterTopology(slotsReply: reply, askedHost: "seed", server: "seed:7000")
    #expect(
      topology.ranges == [
        .init(slots: 0...5460, master: RedisEndpoint(host: "10.0.0.1", port: 7000)),
        .init(slots: 5461...10922, master: RedisEndpoint(host: "seed", port: 7001)),
        .init(slots: 10923...16383, master: RedisEndpoint(host: "seed", port: 7002)),
        .init(slots: 16000...16001, master: RedisEndpoint(host: "seed", port: 7000)),
      ])
    #expect(topology.masters.count == 4)
  }

  @Test(
    "malformed CLUSTER SLOTS replies are protocol errors that say what is wrong",
    arguments: [
      (RESPValue.simpleString("OK"), "not an array"),
      (.array([.integer(1)]), "[start, end"),
      (.array([.array([.integer(5), .integer(4), .array([.bulkString([65]), .integer(1)])])]), "slot range"),
      (.array([.array([.integer(0), .integer(16384), .array([.bulkString([65]), .integer(1)])])]), "slot range"),
      (.array([.array([.integer(0), .integer(1), .array([.bulkString([65]), .integer(0)])])]), "port"),
      (.array([.array([.integer(0), .integer(1), .array([.integer(3), .integer(1)])])]), "host"),
    ])
  func malformedTopology(reply: RESPValue, naming: String) {
    #expect {
      try ClusterTopology(slotsReply: reply, askedHost: "h", server: "h:1")
    } throws: { error in
      let error = error as? RedisError
      return error?.code == .protocolError && error?.message.contains(naming) == true
    }
  }

  @Test("MOVED and ASK are read; anything else is not a redirect")
  func redirects() {
    #expect(
      ClusterRedirect(errorText: "MOVED 3999 127.0.0.1:6381", askedHost: "x")
        == ClusterRedirect(kind: .moved, slot: 3999, target: RedisEndpoint(host: "127.0.0.1", port: 6381)))
    #expect(
      ClusterRedirect(errorText: "ASK 0 cache-2.internal:7000", askedHost: "x")
        == ClusterRedirect(kind: .ask, slot: 0, target: RedisEndpoint(host: "cache-2.internal", port: 7000)))
    #expect(
      ClusterRedirect(errorText: "MOVED 1 :6380", askedHost: "seed")?.target == RedisEndpoint(host: "seed", port: 6380))
    #expect(
      ClusterRedirect(errorText: "MOVED 1 [::1]:6380", askedHost: "x")?.target == RedisEndpoint(host: "::1", port: 6380)
    )
    for text in [
      "ERR unknown command", "MOVED 16384 h:1", "MOVED -1 h:1", "MOVED 1 h:0", "MOVED 1 h", "ASK 1 h:1 extra",
      "MOVED x h:1", "TRYAGAIN Multiple keys request during rehashing of slot",
    ] {
      #expect(ClusterRedirect(errorText: text, askedHost: "x") == nil, "\(text)")
    }
  }

  @Test("cluster configurations are validated, and the error names what is wrong")
  func configuration() throws {
    func refuses(_ naming: String, _ configure: (inout RedisLayer<String, Data>.Configuration) -> Void) {
      var configuration = RedisLayer<String, Data>.Configuration(cluster: [RedisEndpoint(host: "127.0.0.1")])
      configure(&configuration)
      #expect {
        _ = try RedisLayer<String, Data>(configuration: configuration)
      } throws: { error in
        "\(error)".contains(naming)
      }
    }
    refuses("at least one seed") { $0.servers = .cluster(seeds: []) }
    refuses("database 0 only") { $0.database = 2 }
    refuses("1...65535") {
      $0.servers = .cluster(seeds: [RedisEndpoint(host: "a"), RedisEndpoint(host: "b", port: 0)])
    }
    refuses("empty host") { $0.servers = .cluster(seeds: [RedisEndpoint(host: "")]) }
    _ = try RedisLayer<String, Data>(
      configuration: .init(cluster: [RedisEndpoint(host: "a"), RedisEndpoint(host: "b")]))
  }
}
