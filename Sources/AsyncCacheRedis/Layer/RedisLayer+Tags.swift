public import AsyncCache

// Tag invalidations in the shared tier: one hash per namespace holds each tag's latest
// invalidation instant; each instance keeps a copy (the mirror), kept current by the
// invalidation channel, and checks the entries it reads against it.
extension RedisLayer {
  /// The hash of the namespace's tag invalidations: `{<slot tag>}<escaped key prefix>\|tags`,
  /// in the slot of the namespace's prefix. With every `:` of the prefix escaped, it holds no
  /// unescaped `:`, which every stored key has: it is never a namespace's key.
  static func tagsKey(of keyPrefix: [UInt8]) -> [UInt8] {
    let tag = ClusterSlot.tags[Int(ClusterSlot.of(prefix: keyPrefix, key: ""))]
    var key: [UInt8] = [UInt8(ascii: "{")] + Array(tag.utf8) + [UInt8(ascii: "}")]
    for byte in keyPrefix {
      if byte == UInt8(ascii: ":") || byte == UInt8(ascii: "\\") { key.append(UInt8(ascii: "\\")) }
      key.append(byte)
    }
    return key + Array("\\|tags".utf8)
  }

  /// An instant as the hash stores it: 20 decimal digits of its nanoseconds offset by 2^63, so
  /// that the strings sort as the instants do (Lua compares strings; its numbers are doubles).
  static func sortable(_ instant: CacheInstant) -> [UInt8] {
    let digits = String(UInt64(bitPattern: instant.nanosecondsSince1970) ^ (1 << 63))
    return Array((String(repeating: "0", count: 20 - digits.count) + digits).utf8)
  }

  /// The instant of ``sortable(_:)``'s bytes, or `nil`.
  static func instant(sortable bytes: [UInt8]) -> CacheInstant? {
    guard bytes.count == 20, let offset = UInt64(String(decoding: bytes, as: UTF8.self)) else { return nil }
    return CacheInstant(nanosecondsSince1970: Int64(bitPattern: offset ^ (1 << 63)))
  }

  /// Makes the namespace's entries filed under `tag` and produced at or before `instant`
  /// misses from now on, on every instance (see `AsyncCacheLayer.invalidate(tag:at:)`): one
  /// script records the instant in the namespace's hash of tag invalidations (keeping a later
  /// one) and, with ``Configuration-swift.struct/invalidation`` in publish mode, announces it
  /// on the invalidation channel, in O(1) whatever the number of entries.
  ///
  /// Each instance checks the entries it reads from Redis against its copy of the hash. An
  /// instance that forwards invalidations (``forwardInvalidations(to:)``) updates its copy, and
  /// invalidates the tag in the layers it forwards to, when the announcement arrives (in
  /// server-assisted mode, the server reports the hash's change, and those layers are emptied:
  /// the report does not say which tag changed). After its subscription broke, it reads the
  /// hash again. An instance that does not forward reads the hash again when its copy is a
  /// second old. The entries are not looked for: a read that finds one dead hands it to a
  /// background clean-up, which deletes it unless its key was written since (see
  /// ``Statistics-swift.struct/deadEntriesDeleted``); a write of its key replaces it, or it
  /// expires.
  ///
  /// - Throws: ``RedisError`` when the server cannot record it; this instance holds the entries
  ///   dead all the same.
  public nonisolated func invalidate(tag: String, at instant: CacheInstant) async throws {
    try EntryMetadata.validate(tag: tag)
    tagMirror.invalidations.record(tag, at: instant)
    var arguments = [Array(tag.utf8), Self.sortable(instant)]
    if let announcement {
      let message = InvalidationMessage(
        sender: announcement.sender, change: .tag(tag, at: instant.nanosecondsSince1970))
      arguments += [announcement.channel, message.encoded]
    } else {
      arguments += [[], []]
    }
    let reply = try await runScript(
      LayerScripts.invalidateTag, keys: [tagsKey], arguments: arguments, key: "", cancellable: false)
    guard case .integer = reply else { throw unexpected(reply, to: "EVALSHA (invalidate tag)") }
    countPublished()
  }

  /// Whether an entry with `metadata` read from Redis is dead by tag: checked against this
  /// instance's copy of the namespace's tag invalidations, read again first when it may be
  /// behind (see ``RedisTagMirror``).
  @usableFromInline
  nonisolated func isDeadByTag(_ metadata: EntryMetadata) async throws -> Bool {
    guard !metadata.tags.isEmpty else { return false }
    if let generation = tagMirror.reloadNeeded(receiving: isReceivingInvalidations) {
      try await reloadTags(generation: generation)
    }
    return tagMirror.invalidations.kills(metadata)
  }

  /// Reads the namespace's hash of tag invalidations into the mirror.
  private nonisolated func reloadTags(generation: UInt64) async throws {
    var writer = RESPCommandWriter()
    writer.beginCommand(argumentCount: 2)
    writer.argument("HGETALL")
    writer.argument(tagsKey)
    let reply = try await run(writer, named: "HGETALL", key: "")[0]
    guard case .array(let fields?) = reply, fields.count % 2 == 0 else { throw unexpected(reply, to: "HGETALL") }
    for index in stride(from: 0, to: fields.count, by: 2) {
      guard case .bulkString(let tag?) = fields[index], case .bulkString(let stored?) = fields[index + 1],
        let tagName = String(validating: tag, as: UTF8.self), let instant = Self.instant(sortable: stored)
      else { continue }
      // One this instance had not heard of: the chain over the layer records it too.
      if tagMirror.invalidations.record(tagName, at: instant) { layerEnvironment.tell(.tag(tagName, at: instant)) }
    }
    tagMirror.reloaded(generation: generation)
  }

  /// `stored` (the values of `encodedKeys`) without the values dead by tag, each counted as a
  /// miss and handed to the ``DeadEntryCleaner``, which deletes them later.
  @usableFromInline
  nonisolated func droppingDead(_ stored: [StoredValue?], keys encodedKeys: [String]) async throws -> [StoredValue?] {
    guard stored.contains(where: { $0.map { !$0.metadata.tags.isEmpty } ?? false }) else { return stored }
    var alive = stored
    var dead: [(key: [UInt8], header: [UInt8])] = []
    for index in alive.indices {
      guard let value = alive[index], try await isDeadByTag(value.metadata) else { continue }
      counters.misses.add(1, ordering: .relaxed)
      dead.append((keyPrefix + Array(encodedKeys[index].utf8), Array(value.header)))
      alive[index] = nil
    }
    deadEntries.delete(dead)
    return alive
  }
}

/// An instance's copy of its namespace's tag invalidations, and whether it may be behind the
/// hash in Redis: before it was first read, after the subscription that keeps it current broke,
/// and (for an instance that does not subscribe) a second after it was read. Safe from any
/// context.
final class RedisTagMirror: Sendable {
  /// The invalidations known to this instance.
  let invalidations = TagInvalidations()
  /// Behind the library's lock, which ThreadSanitizer follows (`Synchronization.Mutex` it cannot,
  /// under contention).
  private let state = Locked<(generation: UInt64, readAt: ContinuousClock.Instant?)>((0, nil))
  /// How old a copy an instance that does not subscribe uses.
  static let maximumAge: Duration = .seconds(1)

  /// The generation to pass to ``reloaded(generation:)`` when the copy must be read again
  /// before use; `nil` when it is current.
  func reloadNeeded(receiving: Bool) -> UInt64? {
    state.withLock { state in
      guard let readAt = state.readAt else { return state.generation }
      if !receiving, ContinuousClock.now - readAt > Self.maximumAge { return state.generation }
      return nil
    }
  }

  /// The copy was read from Redis, after ``reloadNeeded(receiving:)`` returned `generation`: it
  /// is current unless it was marked stale since.
  func reloaded(generation: UInt64) {
    state.withLock { state in
      if state.generation == generation { state.readAt = .now }
    }
  }

  /// Messages may have been lost (the subscription broke), or the hash changed (server-assisted
  /// invalidation): read it again before the next check.
  func markStale() {
    state.withLock { state in
      state.generation &+= 1
      state.readAt = nil
    }
  }
}
