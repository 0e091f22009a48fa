public import AsyncCache

extension RedisLayer {
  /// Gives the entry stored for `key`, if it is `held` (the same expiry and the same metadata,
  /// byte for byte), `entry`'s expiry (capped by ``Configuration-swift.struct/timeToLive``) and
  /// metadata, in one script on the server: the stored value stays where it is and does not
  /// cross the network again (see `AsyncCacheLayer.revalidate(_:for:replacing:)`). The change is
  /// announced on the invalidation channel as a write is.
  ///
  /// Returns `false`, for the caller to store the whole entry, when the key holds another entry
  /// (or none, or one that does not read), when the new expiry has passed already, when the
  /// value with its new metadata would be over ``Configuration-swift.struct/maximumValueSize``,
  /// and with single flight, whose writes are fenced (its loads revalidate through their fill,
  /// which writes the whole entry).
  ///
  /// - Throws: `PersistenceError.Code.encodingFailed` when the metadata is over one of its
  ///   limits; ``RedisError``.
  public nonisolated func revalidate(
    _ entry: CacheEntry<Value>, for key: Key, replacing held: CacheEntry<Value>
  ) async throws -> Bool {
    guard singleFlight == nil else { return false }
    let encodedKey = try self.encodedKey(key)
    let now = followedClock.now
    let newExpiry = entry.expiring(noLaterThan: configuration.timeToLive.map { now.advanced(by: $0) }).expiresAt
    if let newExpiry, newExpiry <= now { return false }
    func metadataField(_ metadata: EntryMetadata) throws -> [UInt8] {
      let stored: [UInt8]
      do {
        stored = try metadata.encoded()
      } catch {
        throw PersistenceError.unstorableMetadata(key: encodedKey, layer: "RedisLayer", error)
      }
      guard !stored.isEmpty else { return [] }
      return [UInt8(truncatingIfNeeded: stored.count >> 8), UInt8(truncatingIfNeeded: stored.count)] + stored
    }
    func bigEndian(_ instant: CacheInstant?) -> [UInt8] {
      guard let instant else { return [] }
      return withUnsafeBytes(of: instant.nanosecondsSince1970.bigEndian) { Array($0) }
    }
    let milliseconds = newExpiry.map { Array(Self.milliseconds(from: now, to: $0).utf8) }
    let arguments =
      [
        bigEndian(held.expiresAt), try metadataField(held.metadata), bigEndian(newExpiry),
        try metadataField(entry.metadata), milliseconds ?? [], Array(String(configuration.maximumValueSize).utf8),
      ] + invalidationArguments(for: encodedKey)
    let reply = try await runScript(
      LayerScripts.revalidate, keys: [keyPrefix + Array(encodedKey.utf8)], arguments: arguments, key: encodedKey)
    guard case .integer(let done) = reply else { throw unexpected(reply, to: "EVALSHA (revalidate)") }
    guard done == 1 else { return false }
    counters.writes.add(1, ordering: .relaxed)
    countPublished()
    return true
  }
}

/// The scripts of a plain `RedisLayer` (single flight has its own, `SingleFlightScripts`).
enum LayerScripts {
  /// Records in the hash `KEYS[1]` that the tag `ARGV[1]` was invalidated at `ARGV[2]` (see
  /// `RedisLayer.sortable(_:)`), unless a later instant is recorded; publishes `ARGV[4]` on
  /// `ARGV[3]` unless empty. Returns 1.
  static let invalidateTag = RedisScript(
    """
      local recorded = redis.call('HGET', KEYS[1], ARGV[1])
      if (not recorded) or recorded < ARGV[2] then redis.call('HSET', KEYS[1], ARGV[1], ARGV[2]) end
      if ARGV[3] ~= '' then redis.call('PUBLISH', ARGV[3], ARGV[4]) end
      return 1
    """)

  /// Rewrites the header of the envelope at `KEYS[1]` (see `RedisEnvelope`) if it holds the
  /// expiry `ARGV[1]` (8 bytes, big-endian; empty for none) and the metadata field `ARGV[2]` (a
  /// 2-byte length and the stored form; empty for none): with the expiry `ARGV[3]`, the version
  /// it had, the metadata field `ARGV[4]` and the same value bytes, unless the value and the new
  /// metadata are over `ARGV[6]` bytes; `PX ARGV[5]` unless it is empty; publishes `ARGV[8]` on
  /// `ARGV[7]` unless empty. Returns 1 when it rewrote, 0 otherwise (an envelope that does not
  /// read is left alone).
  static let revalidate = RedisScript(
    """
      local stored = redis.call('GET', KEYS[1])
      if not stored or #stored < 3 then return 0 end
      if string.byte(stored, 1) ~= 172 or string.byte(stored, 2) ~= 1 then return 0 end
      local flags = string.byte(stored, 3)
      if flags >= 8 then return 0 end
      local index = 4
      local expiry = ''
      if flags % 2 == 1 then
        expiry = string.sub(stored, 4, 11)
        if #expiry ~= 8 then return 0 end
        index = 12
      end
      if expiry ~= ARGV[1] then return 0 end
      local version = ''
      if math.floor(flags / 2) % 2 == 1 then
        version = string.sub(stored, index, index + 7)
        if #version ~= 8 then return 0 end
        index = index + 8
      end
      local metadata = ''
      if math.floor(flags / 4) % 2 == 1 then
        if #stored < index + 1 then return 0 end
        local length = string.byte(stored, index) * 256 + string.byte(stored, index + 1)
        if length == 0 or #stored < index + 1 + length then return 0 end
        metadata = string.sub(stored, index, index + 1 + length)
        index = index + 2 + length
      end
      if metadata ~= ARGV[2] then return 0 end
      local value = string.sub(stored, index)
      local newMetadata = 0
      if ARGV[4] ~= '' then newMetadata = #ARGV[4] - 2 end
      if #value + newMetadata > tonumber(ARGV[6]) then return 0 end
      local newFlags = 0
      if ARGV[3] ~= '' then newFlags = newFlags + 1 end
      if version ~= '' then newFlags = newFlags + 2 end
      if ARGV[4] ~= '' then newFlags = newFlags + 4 end
      local rewritten = string.char(172, 1, newFlags) .. ARGV[3] .. version .. ARGV[4] .. value
      if ARGV[5] == '' then
        redis.call('SET', KEYS[1], rewritten)
      else
        redis.call('SET', KEYS[1], rewritten, 'PX', ARGV[5])
      end
      if ARGV[7] ~= '' then redis.call('PUBLISH', ARGV[7], ARGV[8]) end
      return 1
    """)
}
