public import AsyncCache
public import Foundation

extension RedisLayer {
  /// The entry stored for `key`, or `nil` when there is none, it expired, or the stored bytes
  /// are not a value this layer can read (then it is counted and reported).
  ///
  /// One `GET`, pipelined with the other tasks' commands on a shared connection.
  ///
  /// - Throws: ``RedisError`` when the server cannot be reached, does not answer in time or
  ///   the circuit breaker is open; `PersistenceError` when the key cannot be encoded.
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    let encodedKey = try self.encodedKey(key)
    var writer = RESPCommandWriter(reservingCapacity: 32 + keyPrefix.count + encodedKey.utf8.count)
    writer.beginCommand(argumentCount: 2)
    writer.argument("GET")
    writer.argument(keyPrefix, encodedKey)
    let reply = try await run(writer, named: "GET", key: encodedKey)[0]
    guard let stored = try storedValue(from: reply, key: encodedKey, command: "GET") else { return nil }
    if try await isDeadByTag(stored.metadata) {
      counters.misses.add(1, ordering: .relaxed)
      deadEntries.delete(CollectionOfOne((keyPrefix + Array(encodedKey.utf8), Array(stored.header))))
      return nil
    }
    do {
      let entry = CacheEntry(
        try valueCoder.decode(stored.payload), expiresAt: stored.expiresAt, metadata: stored.metadata)
      countHits(1)
      return entry
    } catch {
      discardUndecodable(encodedKey, error: error)
      return nil
    }
  }

  /// The value stored for `key`, or `nil`. See ``entry(for:)``.
  public nonisolated func value(for key: Key) async throws -> Value? {
    try await entry(for: key)?.value
  }

  /// The entries stored for `keys`, with one `MGET` per 512 keys, sent as one pipeline: one
  /// round trip for the lot. In a cluster, keys are grouped by slot, and each master gets one
  /// pipeline of `MGET`s, all masters at once. Keys with no entry are absent from the result.
  ///
  /// - Throws: See ``entry(for:)``.
  // Inlinable, so that the decoding and the dictionary are specialized for the caller's types.
  @inlinable
  public nonisolated func entries(for keys: some Sequence<Key>) async throws -> [Key: CacheEntry<Value>] {
    let keys = Array(keys)
    guard !keys.isEmpty else { return [:] }
    let encodedKeys = try keys.map { try encodedKey($0) }
    let stored = try await droppingDead(try await storedValues(for: encodedKeys), keys: encodedKeys)
    var found = [Key: CacheEntry<Value>](minimumCapacity: keys.count)
    var hits = 0
    for index in keys.indices {
      guard let value = stored[index] else { continue }
      do {
        found[keys[index]] = CacheEntry(
          try valueCoder.decode(value.payload), expiresAt: value.expiresAt, metadata: value.metadata)
        hits += 1
      } catch {
        discardUndecodable(encodedKeys[index], error: error)
      }
    }
    countHits(hits)
    return found
  }

  /// A value as stored. Not nested in the generic layer, so that a bulk read's hundreds of them
  /// need no generic metadata at run time.
  @usableFromInline
  typealias StoredValue = RedisStoredValue

  /// The stored values of `encodedKeys`, in order: `MGET`s of 512 keys, in one pipeline. Absent,
  /// expired and unreadable values are `nil`, counted as misses (and reported when unreadable).
  @usableFromInline
  nonisolated func storedValues(for encodedKeys: [String]) async throws -> [StoredValue?] {
    let pool: RedisConnectionPool
    switch backend {
    case .standalone(let standalone): pool = standalone
    case .cluster(let cluster): return try await storedValues(for: encodedKeys, in: cluster)
    }
    let batch = 512
    var writer = RESPCommandWriter(reservingCapacity: encodedKeys.count * (keyPrefix.count + 32) + 32)
    var start = 0
    while start < encodedKeys.count {
      let end = Swift.min(start + batch, encodedKeys.count)
      writer.beginCommand(argumentCount: end - start + 1)
      writer.argument("MGET")
      for key in encodedKeys[start..<end] { writer.argument(keyPrefix, key) }
      start = end
    }
    let replies = try await run(writer, named: "MGET", on: pool)
    var stored: [StoredValue?] = []
    stored.reserveCapacity(encodedKeys.count)
    for reply in replies {
      guard case .array(let values?) = reply, values.count == Swift.min(batch, encodedKeys.count - stored.count) else {
        throw unexpected(reply, to: "MGET")
      }
      for value in values {
        stored.append(try storedValue(from: value, key: encodedKeys[stored.count], command: "MGET"))
      }
    }
    return stored
  }

  /// ``storedValues(for:)`` in a cluster: an `MGET` per slot (and per 512 keys).
  private nonisolated func storedValues(
    for encodedKeys: [String], in cluster: RedisClusterClient
  ) async throws -> [StoredValue?] {
    var indicesBySlot: [Int: [Int]] = [:]
    for (index, key) in encodedKeys.enumerated() {
      indicesBySlot[Int(ClusterSlot.of(prefix: keyPrefix, key: key)), default: []].append(index)
    }
    var groups: [RedisClusterClient.Group] = []
    var groupIndices: [ArraySlice<Int>] = []
    for (slot, indices) in indicesBySlot {
      var start = 0
      while start < indices.count {
        let chunk = indices[start..<Swift.min(start + 512, indices.count)]
        var writer = RESPCommandWriter(reservingCapacity: chunk.count * (keyPrefix.count + 32) + 32)
        writer.beginCommand(argumentCount: chunk.count + 1)
        writer.argument("MGET")
        for index in chunk { writer.argument(keyPrefix, encodedKeys[index]) }
        groups.append(RedisClusterClient.Group(slot: slot, writer: writer))
        groupIndices.append(chunk)
        start = chunk.endIndex
      }
    }
    let replies = try await run(groups, named: "MGET", in: cluster)
    var stored = [StoredValue?](repeating: nil, count: encodedKeys.count)
    for (indices, groupReplies) in zip(groupIndices, replies) {
      guard case .array(let values?) = groupReplies[0], values.count == indices.count else {
        throw unexpected(groupReplies[0], to: "MGET")
      }
      for (index, value) in zip(indices, values) {
        stored[index] = try storedValue(from: value, key: encodedKeys[index], command: "MGET")
      }
    }
    return stored
  }

  /// The stored value in a reply to `GET` or `MGET`, or `nil` (a miss, counted) when there is
  /// none, it expired by the layer's clock, or it is not a value this layer wrote (reported).
  nonisolated func storedValue(from reply: RESPValue, key: String, command: String) throws -> StoredValue? {
    let bytes: [UInt8]
    switch reply {
    case .bulkString(nil), .null:
      counters.misses.add(1, ordering: .relaxed)
      return nil
    case .bulkString(let stored?):
      bytes = stored
    case .error(let text) where text.hasPrefix("WRONGTYPE"):
      counters.misses.add(1, ordering: .relaxed)
      counters.discardedValues.add(1, ordering: .relaxed)
      report(.valueDiscarded(key: key, reason: "the key holds another Redis type (\(text.prefix(200)))"))
      return nil
    default:
      throw unexpected(reply, to: command)
    }
    do {
      let (expiry, _, metadata, payload) = try RedisEnvelope.decode(bytes)
      let expiresAt = expiry.map(CacheInstant.init(nanosecondsSince1970:))
      if let expiresAt, expiresAt <= followedClock.now {
        counters.misses.add(1, ordering: .relaxed)
        return nil
      }
      return StoredValue(
        expiresAt: expiresAt, metadata: metadata,
        payload: bytes.withUnsafeBufferPointer {
          // One copy, of the bytes (`Data` of a slice takes a generic path, element by element).
          Data(UnsafeBufferPointer(rebasing: $0[payload]))
        },
        header: metadata.tags.isEmpty ? [] : bytes[..<payload.lowerBound])
    } catch {
      counters.misses.add(1, ordering: .relaxed)
      counters.discardedValues.add(1, ordering: .relaxed)
      report(.valueDiscarded(key: key, reason: error.reason))
      return nil
    }
  }

  /// Counts a stored value the value coder could not decode as a miss, and reports it.
  @usableFromInline
  nonisolated func discardUndecodable(_ encodedKey: String, error: any Error) {
    counters.misses.add(1, ordering: .relaxed)
    counters.discardedValues.add(1, ordering: .relaxed)
    report(.valueDiscarded(key: encodedKey, reason: "the value did not decode: \(error)"))
  }

  @usableFromInline
  nonisolated func countHits(_ hits: Int) {
    if hits > 0 { counters.hits.add(hits, ordering: .relaxed) }
  }
}

/// A value as the Redis layer stored it: its expiry and the bytes the value coder reads.
@usableFromInline
struct RedisStoredValue: Sendable {
  @usableFromInline var expiresAt: CacheInstant?
  @usableFromInline var metadata: EntryMetadata
  @usableFromInline var payload: Data
  /// For an entry with tags, the envelope's bytes before the value (its expiry, version and
  /// metadata): what a deletion of the entry, once found dead, compares (see
  /// ``DeadEntryCleaner``). A slice of the reply, not a copy; empty for an entry without tags.
  @usableFromInline var header: ArraySlice<UInt8> = []
}
