import AsyncCache
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCacheRedis

/// A Redis Cluster of the test's own: three masters (`redis-server --cluster-enabled yes`) on
/// loopback ports, joined with `redis-cli --cluster create … --cluster-yes`, stopped by their
/// pids.
final class RedisClusterServers: Sendable {
  let servers: [RedisServer]
  private let directory: URL

  private init(servers: [RedisServer], directory: URL) {
    self.servers = servers
    self.directory = directory
  }

  deinit {
    for server in servers { server.stop() }
    try? FileManager.default.removeItem(at: directory)
  }

  /// The nodes, as seeds for a layer.
  var seeds: [RedisEndpoint] { servers.map(\.endpoint) }

  /// Starts three masters, creates the cluster and returns once every node says
  /// `cluster_state:ok`.
  static func start() async throws -> RedisClusterServers {
    guard let serverPath = RedisServer.executable else {
      throw RedisServer.ServerError("redis-server is not installed. \(RedisServer.skipMessage)")
    }
    let cli = URL(fileURLWithPath: serverPath).deletingLastPathComponent().appendingPathComponent("redis-cli")
    let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
      "redis-cluster-\(UUID().uuidString)", isDirectory: true)
    try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    var servers: [RedisServer] = []
    for index in 0..<3 {
      servers.append(try await startNode(configFile: directory.appendingPathComponent("nodes-\(index).conf").path))
    }
    let cluster = RedisClusterServers(servers: servers, directory: directory)
    let output = Pipe()
    let create = try ChildProcess(
      cli,
      arguments: ["--cluster", "create"] + servers.map { "127.0.0.1:\($0.port)" } + [
        "--cluster-replicas", "0", "--cluster-yes",
      ],
      standardInput: .null, standardOutput: .pipe(output), standardError: .pipe(output))
    let (log, status) = await create.outputAndExit(reading: output.fileHandleForReading)
    guard status == 0 else {
      throw RedisServer.ServerError(
        "redis-cli --cluster create failed (\(status)):\n\(String(decoding: log, as: UTF8.self))")
    }
    // Every node learns the others' slots by gossip; ask until each says the cluster is ok.
    let deadline = ContinuousClock.now.advanced(by: .seconds(30))
    for server in servers {
      while true {
        let reply = try await server.command("CLUSTER", "INFO")
        if case .bulkString(let text?) = reply, String(decoding: text, as: UTF8.self).contains("cluster_state:ok") {
          break
        }
        guard ContinuousClock.now < deadline else {
          throw RedisServer.ServerError("the cluster on port \(server.port) did not reach cluster_state:ok: \(reply)")
        }
        await Task.yield()
      }
    }
    return cluster
  }

  /// A node with cluster support, on a port whose cluster bus port (+10000) is free too.
  private static func startNode(configFile: String) async throws -> RedisServer {
    var lastError: (any Error)?
    for _ in 0..<10 {
      // Below 22768, so that the bus port stays under Linux's ephemeral range (32768 on),
      // where the other tests' free ports come from.
      let port = Int.random(in: 20000..<22768)
      guard RedisServer.isFree(port), RedisServer.isFree(port + 10000) else { continue }
      do {
        return try await RedisServer.start(
          [
            "--cluster-enabled", "yes", "--cluster-config-file", configFile, "--cluster-node-timeout", "5000",
            // A master that a test kills leaves the others serving their slots.
            "--cluster-require-full-coverage", "no",
          ],
          port: port)
      } catch {
        lastError = error
      }
    }
    throw lastError ?? RedisServer.ServerError("found no free pair of ports for a cluster node")
  }

  /// The node's id in the cluster.
  func id(of server: RedisServer) async throws -> String {
    try await server.text("CLUSTER", "MYID")
  }

  /// The master that serves `slot`, as the first node sees it.
  func master(ofSlot slot: Int) async throws -> RedisServer {
    let reply = try await servers[0].command("CLUSTER", "SLOTS")
    let topology = try ClusterTopology(slotsReply: reply, askedHost: "127.0.0.1", server: "test")
    guard let range = topology.ranges.first(where: { $0.slots.contains(slot) }),
      let server = servers.first(where: { $0.port == range.master.port })
    else { throw RedisServer.ServerError("no master serves slot \(slot)") }
    return server
  }

  /// Starts moving `slot` from `source` to `target`: the slot is `MIGRATING` on the source
  /// and `IMPORTING` on the target, and keys stay where they are.
  func beginMigration(of slot: Int, from source: RedisServer, to target: RedisServer) async throws {
    try await target.expectOK("CLUSTER", "SETSLOT", String(slot), "IMPORTING", try await id(of: source))
    try await source.expectOK("CLUSTER", "SETSLOT", String(slot), "MIGRATING", try await id(of: target))
  }

  /// Moves the slot's keys to `target` (`MIGRATE`) and assigns the slot to it on every node.
  func finishMigration(of slot: Int, from source: RedisServer, to target: RedisServer) async throws {
    while true {
      let reply = try await source.command("CLUSTER", "GETKEYSINSLOT", String(slot), "100")
      guard case .array(let keys?) = reply, !keys.isEmpty else { break }
      var words = ["MIGRATE", "127.0.0.1", String(target.port), "", "0", "5000", "KEYS"]
      for key in keys {
        guard case .bulkString(let bytes?) = key else { throw RedisServer.ServerError("GETKEYSINSLOT: \(reply)") }
        words.append(String(decoding: bytes, as: UTF8.self))
      }
      try await source.expectOK(words)
    }
    let targetID = try await id(of: target)
    // The target first, as redis-cli does, so that it serves the slot before others point at it.
    for server in [target] + servers.filter({ $0 !== target }) {
      try await server.expectOK("CLUSTER", "SETSLOT", String(slot), "NODE", targetID)
    }
  }

  /// Moves `slot` from `source` to `target`, keys and all.
  func move(slot: Int, from source: RedisServer, to target: RedisServer) async throws {
    try await beginMigration(of: slot, from: source, to: target)
    try await finishMigration(of: slot, from: source, to: target)
  }
}

extension RedisServer {
  /// Whether `port` on 127.0.0.1 can be bound now.
  static func isFree(_ port: Int) -> Bool {
    (try? bindable(port)) != nil
  }

  /// Sends a command and expects `OK`.
  func expectOK(_ words: String...) async throws {
    try await expectOK(words)
  }

  func expectOK(_ words: [String]) async throws {
    let reply = try await Self.command(RESPCommand(words.map { Array($0.utf8) }), port: port)
    guard case .simpleString(let text) = reply, text == "OK" else {
      throw ServerError("\(words.joined(separator: " ")) on port \(port) answered \(reply)")
    }
  }

  /// Sends a command whose reply is text.
  func text(_ words: String...) async throws -> String {
    let reply = try await Self.command(RESPCommand(words.map { Array($0.utf8) }), port: port)
    switch reply {
    case .bulkString(let bytes?): return String(decoding: bytes, as: UTF8.self)
    case .simpleString(let text): return text
    default: throw ServerError("\(words.joined(separator: " ")) on port \(port) answered \(reply)")
    }
  }
}
