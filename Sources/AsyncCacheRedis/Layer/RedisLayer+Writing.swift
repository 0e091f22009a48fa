public import AsyncCache
import Foundation

extension RedisLayer {
  /// Stores `entry` for `key` with one `SET`, replacing any previous entry; Redis expires it
  /// at the earlier of `entry.expiresAt` and the configured time to live (`PX`). An entry that
  /// has expired already removes the key instead.
  ///
  /// - Throws: `PersistenceError.Code.valueTooLarge` (nothing sent) when the encoded value is
  ///   over ``Configuration-swift.struct/maximumValueSize``; `PersistenceError.Code.encodingFailed`;
  ///   ``RedisError``, ``RedisError/Code/outOfMemory`` when the server is full.
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    let encodedKey = try self.encodedKey(key)
    guard let (stored, milliseconds) = try storable(entry, for: encodedKey) else {
      try await unlink(encodedKey)
      return
    }
    if let singleFlight {
      // Fenced: the key's version moves forward, so that no load in flight stores an older value.
      var arguments = [
        stored, milliseconds.map { Array($0.utf8) } ?? [],
        Array(String(singleFlight.settings.versionMilliseconds).utf8),
      ]
      arguments += invalidationArguments(for: encodedKey)
      arguments += [singleFlight.channel, singleFlight.sender, Array(encodedKey.utf8)]
      let keys = companionKeys(of: encodedKey)
      _ = try await runScript(
        SingleFlightScripts.write, keys: [keys.value, keys.version, keys.lease], arguments: arguments,
        key: encodedKey)
      counters.writes.add(1, ordering: .relaxed)
      countPublished()
      return
    }
    var writer = RESPCommandWriter(reservingCapacity: 64 + keyPrefix.count + encodedKey.utf8.count + stored.count)
    writer.beginCommand(argumentCount: milliseconds == nil ? 3 : 5)
    writer.argument("SET")
    writer.argument(keyPrefix, encodedKey)
    writer.argument(stored)
    if let milliseconds {
      writer.argument("PX")
      writer.argument(milliseconds.utf8)
    }
    announce(.key(encodedKey), in: &writer)
    let reply = try await run(writer, named: "SET", key: encodedKey)[0]
    guard case .simpleString = reply else { throw unexpected(reply, to: "SET") }
    counters.writes.add(1, ordering: .relaxed)
    countPublished()
  }

  /// The bytes to store for `entry` and its `PX` in milliseconds, or `nil` when it has expired
  /// already by the layer's clock (then reported).
  ///
  /// - Parameter version: The fencing token of the load that stores it, if any.
  nonisolated func storable(
    _ entry: CacheEntry<Value>, for encodedKey: String, version: UInt64? = nil
  ) throws -> (bytes: [UInt8], milliseconds: String?)? {
    let now = followedClock.now
    let expiresAt = entry.expiring(noLaterThan: configuration.timeToLive.map { now.advanced(by: $0) }).expiresAt
    if let expiresAt, expiresAt <= now {
      report(
        .expiredOnArrival(key: encodedKey, expiresAt: expiresAt, now: now),
        level: layerEnvironment.nextExpiredArrivalLevel())
      return nil
    }
    let payload: Data
    do {
      payload = try valueCoder.encode(entry.value)
    } catch {
      throw PersistenceError.unencodableValue(key: encodedKey, layer: "RedisLayer", underlying: error)
    }
    let metadata: [UInt8]
    do {
      metadata = try entry.metadata.encoded()
    } catch {
      throw PersistenceError.unstorableMetadata(key: encodedKey, layer: "RedisLayer", error)
    }
    // The metadata counts with the value: both are the entry's bytes.
    guard payload.count + metadata.count <= configuration.maximumValueSize else {
      throw PersistenceError.valueTooLarge(
        key: encodedKey, size: payload.count + metadata.count, limit: configuration.maximumValueSize,
        layer: "RedisLayer", limitName: "per-value limit (maximumValueSize)")
    }
    let stored = RedisEnvelope.encode(
      payload: payload, expiresAt: expiresAt?.nanosecondsSince1970, version: version, metadata: metadata)
    return (stored, expiresAt.map { Self.milliseconds(from: now, to: $0) })
  }

  /// The `PX` of an entry that expires at `expiresAt`, from `now`: whole milliseconds, rounded
  /// up, so that Redis never drops the key before the entry expires.
  static func milliseconds(from now: CacheInstant, to expiresAt: CacheInstant) -> String {
    let nanoseconds = now.duration(to: expiresAt).nanoseconds
    return String(nanoseconds / 1_000_000 + (nanoseconds % 1_000_000 == 0 ? 0 : 1))
  }

  /// Stores `value` for `key`, expiring after `timeToLive` (or the configured one).
  public nonisolated func insert(_ value: Value, for key: Key, timeToLive: Duration? = nil) async throws {
    try await insert(
      CacheEntry(value, expiresAt: timeToLive.map { followedClock.now.advanced(by: $0) }), for: key)
  }

  /// Removes the entry for `key` (`UNLINK`: the server frees a large value in the background).
  public nonisolated func removeValue(for key: Key) async throws {
    try await unlink(try encodedKey(key))
  }

  /// Removes a key; counts it when it was there.
  private nonisolated func unlink(_ encodedKey: String) async throws {
    if let singleFlight {
      // Fenced: the key's version moves forward, so that no load in flight stores it again.
      let keys = companionKeys(of: encodedKey)
      let arguments =
        [Array(String(singleFlight.settings.versionMilliseconds).utf8)] + invalidationArguments(for: encodedKey)
      countRemovals(
        try await runScript(
          SingleFlightScripts.remove, keys: [keys.value, keys.version], arguments: arguments, key: encodedKey))
      countPublished()
      return
    }
    var writer = RESPCommandWriter(reservingCapacity: 32 + keyPrefix.count + encodedKey.utf8.count)
    writer.beginCommand(argumentCount: 2)
    writer.argument("UNLINK")
    writer.argument(keyPrefix, encodedKey)
    announce(.key(encodedKey), in: &writer)
    countRemovals(try await run(writer, named: "UNLINK", key: encodedKey)[0])
    countPublished()
  }

  /// Counts the keys an `UNLINK` reply says it removed.
  private nonisolated func countRemovals(_ reply: RESPValue) {
    if case .integer(let removed) = reply, removed > 0 { counters.removals.add(Int(removed), ordering: .relaxed) }
  }

  /// Removes every entry of the namespace, and nothing else: the keys are found with `SCAN`
  /// (which does not block the server) and removed with `UNLINK`, a batch at a time; in a
  /// cluster, on every master, with an `UNLINK` per slot. Keys written while it runs may
  /// survive.
  public nonisolated func removeAll() async throws {
    let pools = try await servers()
    do {
      for pool in pools { try await removeAll(on: pool, cluster: backend.cluster) }
    } catch {
      // Some keys may be gone: the other instances empty their layers all the same.
      try? await announceRemoveAll(on: pools)
      throw error
    }
    try await announceRemoveAll(on: pools)
  }

  /// Publishes that the namespace was emptied, on the first of `pools` that takes it (a
  /// cluster passes a message on to every node).
  private nonisolated func announceRemoveAll(on pools: [RedisConnectionPool]) async throws {
    var writer = RESPCommandWriter()
    announce(.all, in: &writer)
    guard writer.commandCount > 0 else { return }
    var lastError: (any Error)?
    for pool in pools {
      do {
        _ = try await run(writer, named: "PUBLISH", on: pool)
        countPublished()
        return
      } catch {
        lastError = error
      }
    }
    if let lastError { throw lastError }
  }

  /// Scans one server for the namespace's keys and unlinks them.
  private nonisolated func removeAll(on pool: RedisConnectionPool, cluster: RedisClusterClient?) async throws {
    let pattern = Self.globEscaped(keyPrefix) + [UInt8(ascii: "*")]
    var cursor: [UInt8] = Array("0".utf8)
    repeat {
      let scan = RESPCommand(
        [Array("SCAN".utf8), cursor, Array("MATCH".utf8), pattern, Array("COUNT".utf8), Array("1000".utf8)])
      let reply = try await run(RESPCommandWriter([scan]), named: "SCAN", on: pool)[0]
      guard case .array(let parts?) = reply, parts.count == 2, case .bulkString(let next?) = parts[0],
        case .array(let keys?) = parts[1]
      else { throw unexpected(reply, to: "SCAN") }
      var keysBySlot: [Int: [[UInt8]]] = [:]
      for key in keys {
        guard case .bulkString(let bytes?) = key else { throw unexpected(reply, to: "SCAN") }
        keysBySlot[cluster == nil ? 0 : Int(ClusterSlot.of(bytes)), default: []].append(bytes)
      }
      let commands = keysBySlot.map { slot, keys in (slot, RESPCommand([Array("UNLINK".utf8)] + keys)) }
      // SCAN may return a key twice; UNLINK's count is of the keys it removed.
      if let cluster, !commands.isEmpty {
        let groups = commands.map { RedisClusterClient.Group(slot: $0.0, writer: RESPCommandWriter([$0.1])) }
        for replies in try await run(groups, named: "UNLINK", in: cluster) { countRemovals(replies[0]) }
      } else if let command = commands.first?.1 {
        countRemovals(try await run(RESPCommandWriter([command]), named: "UNLINK", on: pool)[0])
      }
      cursor = next
    } while cursor != Array("0".utf8)
  }
}
