public import AsyncCache
public import Foundation

/// A cache layer in a Redis server: the tier that the instances of a service share.
///
/// Put it under each instance's `MemoryLayer` so that an origin is asked once per fleet
/// rather than once per instance:
///
/// ```swift
/// let redis = try RedisLayer<String, Data>(
///     configuration: .init(endpoint: RedisEndpoint(host: "cache.internal")), namespace: "thumbnails")
/// let cache = try LoadingCache(
///     layers: [MemoryLayer<String, Data>(), redis], origin: ClosureFetcher { try await render($0) })
/// ```
///
/// - **Keys** are stored as `<namespace>:<encoded key>`, the namespace with every `\` and `:`
///   escaped by a `\` (namespace `a:b` and key `c` are `a\:b:c`; namespace `a` and key `b:c`
///   are `a:b:c`), so that no namespace's keys start with another namespace's prefix:
///   ``removeAll()`` removes the namespace's keys only, and namespaces never read each other's
///   values. Encoded keys and the namespace are in Unicode Normalization Form C (see
///   `CacheKeyEncoding`).
/// - **Values** are stored with a small header that keeps their expiry (see `CacheValueCoder`
///   for the value's bytes); Redis expires them itself through `PX`. A value under the
///   namespace that the layer cannot read is a miss, counted and reported as a
///   ``RedisLayerEvent/valueDiscarded(key:reason:)``.
/// - **Failures** are fast: every command has a time limit, and a circuit breaker stops
///   sending to a server that keeps failing (see ``RedisCircuitBreakerPolicy``). Give the
///   chain `LayerFailurePolicy.skip` for this layer and a Redis outage becomes misses in it:
///   requests fall through to the next layer or the origin.
/// - **Errors**: connection and server failures are ``RedisError``s; values refused before
///   sending (too large, not encodable) are `PersistenceError`s, as in the other persistent
///   layers.
/// - **Threads**: socket I/O runs on the connections' own threads; no call blocks a thread of
///   the cooperative pool. The layer's methods are `nonisolated`: calls do not queue on the
///   actor.
///
/// The layer connects lazily: creating it does not touch the network, so a service starts
/// while Redis is down. Call ``ping()`` to check the server at startup.
public final actor RedisLayer<Key: Hashable & Sendable, Value: Sendable>: AsyncCacheLayer {
  /// The namespace this layer's keys live under, in Unicode Normalization Form C.
  public nonisolated let namespace: String
  /// The server, limits and timing.
  public nonisolated let configuration: Configuration
  /// The clock the layer reads: its configuration's, or the one of the cache or chain it is in.
  package nonisolated let followedClock: FollowedClock
  /// The logger the layer writes to: its configuration's, or the one of the cache or chain it is in.
  package nonisolated let followedLogger: Followed<CacheLogger>
  /// How the entries that arrive already expired are logged.
  private nonisolated let expiredArrivals = ExpiredArrivals()
  /// Fired when the layer closes: ends ``run()``.
  private nonisolated let closeSignal = OneShotSignal()
  /// Delivers the layer's events to its observers and its configuration's handler.
  private nonisolated let eventHub: EventHub<RedisLayerEvent>
  /// How keys become stored strings.
  public nonisolated let keyEncoding: CacheKeyEncoding<Key>
  /// How values become stored bytes.
  public nonisolated let valueCoder: CacheValueCoder<Value>

  /// Where commands go: one server's pool, or a cluster's.
  nonisolated let backend: Backend
  nonisolated let counters: RedisCounters
  /// `<escaped namespace>:` as bytes (see ``keyPrefix(of:)``).
  nonisolated let keyPrefix: [UInt8]
  /// The invalidation channel and this instance's id in its messages, when writes are announced.
  nonisolated let announcement: (channel: [UInt8], sender: [UInt8])?
  /// The subscription to the invalidation and load channels, when either is configured.
  nonisolated let subscription: RedisSubscription?
  /// The leases and waits of single flight, when configured.
  nonisolated let singleFlight: SingleFlightState?
  /// The layers invalidations are forwarded to.
  private nonisolated let invalidationTargets: Locked<[any AsyncCacheLayer<Key, Value>]>

  /// Creates a layer for `namespace` on the configured server. Nothing is sent until the first
  /// operation.
  ///
  /// - Parameters:
  ///   - configuration: The server, credentials, limits and timing.
  ///   - namespace: The prefix of this layer's keys; not empty. Any characters: `:` and `\`
  ///     are escaped in stored keys. Default `"default"`.
  ///   - keyEncoding: How keys become stored strings; must be injective.
  ///   - valueCoder: How values become stored bytes.
  /// - Throws: `AsyncCacheError.Code.invalidConfiguration` for an empty namespace or invalid
  ///   settings.
  public init(
    configuration: Configuration = Configuration(),
    namespace: String = "default",
    keyEncoding: CacheKeyEncoding<Key>,
    valueCoder: CacheValueCoder<Value>
  ) throws {
    guard !namespace.isEmpty else {
      throw AsyncCacheError.invalidConfiguration("RedisLayer: the namespace must not be empty")
    }
    try configuration.validate()
    let namespace = namespace.nfcNormalized
    self.namespace = namespace
    self.configuration = configuration
    self.followedClock = FollowedClock(given: configuration.clockGiven)
    self.followedLogger = Followed(given: configuration.loggerGiven, fallback: .disabled)
    self.keyEncoding = keyEncoding
    self.valueCoder = valueCoder
    self.keyPrefix = Self.keyPrefix(of: namespace)
    let counters = RedisCounters()
    self.counters = counters
    let eventHub = EventHub(handler: configuration.eventHandler)
    self.eventHub = eventHub
    let logger = followedLogger
    // Timers (the circuit breaker's, the invalidations' health checks and backoff) run on the
    // clock given to the layer, or in real time: they do not follow a cache's clock, which a
    // test may hold still. Expiry does.
    let clock = configuration.clock
    let onEvent: @Sendable (RedisLayerEvent) -> Void = { event in
      Self.log(event, to: logger.value, namespace: namespace)
      eventHub.emit(event)
    }
    let makePool: @Sendable (RedisEndpoint) -> RedisConnectionPool = { endpoint in
      RedisConnectionPool(
        options: RedisConnectionPool.Options(
          host: endpoint.host, port: endpoint.port, connectTimeout: configuration.connectTimeout,
          operationTimeout: configuration.operationTimeout, maximumConnections: configuration.maximumConnections,
          handshake: configuration.handshake, circuitBreaker: configuration.circuitBreaker,
          clock: clock),
        counters: counters, onEvent: onEvent)
    }
    let backend: Backend
    switch configuration.servers {
    case .standalone(let endpoint):
      backend = .standalone(makePool(endpoint))
    case .cluster(let seeds):
      backend = .cluster(
        RedisClusterClient(
          seeds: seeds, counters: counters, clock: clock, onEvent: onEvent, makePool: makePool))
    }
    self.backend = backend
    let targets = Locked<[any AsyncCacheLayer<Key, Value>]>([])
    self.invalidationTargets = targets
    let sender = InvalidationMessage.makeSender()
    let tracks = configuration.invalidation?.mode == .serverAssisted
    let invalidationChannel = configuration.invalidation.map {
      tracks ? RedisInvalidation.trackingChannel : Array($0.channel(for: namespace).utf8)
    }
    // Announced by this library in publish mode only: the server reports changes otherwise.
    self.announcement = tracks ? nil : invalidationChannel.map { ($0, sender) }
    let flight = configuration.singleFlight.map {
      SingleFlightState(
        settings: $0, channel: Array($0.channel(for: namespace).utf8), sender: sender, clock: clock)
    }
    self.singleFlight = flight
    let channels = [invalidationChannel, flight?.channel].compactMap { $0 }
    guard !channels.isEmpty else {
      self.subscription = nil
      return
    }
    let decode = keyEncoding.decode
    let prefix = keyPrefix
    self.subscription = RedisSubscription(
      options: RedisSubscription.Options(
        channels: channels, trackingPrefix: tracks ? keyPrefix : nil, connectTimeout: configuration.connectTimeout,
        operationTimeout: configuration.operationTimeout, handshake: configuration.handshake,
        healthCheckInterval: configuration.invalidation?.healthCheckInterval ?? .seconds(10),
        backoff: configuration.circuitBreaker, clock: clock, isUrgent: { flight?.isUrgent ?? false }),
      counters: counters,
      endpoint: { try await backend.subscriptionEndpoint() },
      receiveNow: { channel, payload in
        // Load announcements wake waits at once: no hop through the ordered delivery.
        guard let flight, channel == flight.channel else { return false }
        if let announcement = LoadAnnouncement(payload) { flight.waits.deliver(announcement) }
        return true
      },
      deliver: { channel, payload in
        var changes: [InvalidationMessage.Change] = []
        if tracks {
          // `__redis__:invalidate`: the keys changed, or null for a flush of the database.
          switch payload {
          case .array(let keys?):
            for case .bulkString(let stored?) in keys where stored.starts(with: prefix) {
              guard let encodedKey = String(validating: stored[prefix.count...], as: UTF8.self) else { continue }
              changes.append(.key(encodedKey))
            }
          case .bulkString(nil), .null, .array(nil):
            changes.append(.all)
          default:
            return
          }
        } else {
          guard case .bulkString(let bytes?) = payload, let message = InvalidationMessage(bytes),
            message.sender != sender
          else { return }
          changes.append(message.change)
        }
        guard !changes.isEmpty else { return }
        counters.invalidationsReceived.add(1, ordering: .relaxed)
        let layers = targets.withLock { $0 }
        for change in changes {
          switch change {
          case .loaded(let encodedKey, let token):
            // This instance took that load's value from its announcement: its copy is the new one.
            if flight?.takeAnswered(SingleFlightState.Lease(key: encodedKey, token: token)) == true { continue }
            guard let key = try? decode(encodedKey) else { continue }
            for layer in layers { try? await layer.removeValue(for: key) }
          case .key(let encodedKey):
            // A key this layer's encoding cannot read was not written by an instance of it.
            guard let key = try? decode(encodedKey) else { continue }
            for layer in layers { try? await layer.removeValue(for: key) }
          case .all:
            for layer in layers { try? await layer.removeAll() }
          }
        }
      },
      resynchronize: {
        // Redis answers again (if it had stopped): claims may be coordinated again.
        flight?.isUnreachable.store(false, ordering: .releasing)
        // Announcements sent while the subscription was down are lost: the waits look again.
        flight?.waits.wakeAll()
        for layer in targets.withLock({ $0 }) { try? await layer.removeAll() }
      },
      interrupted: { flight?.waits.wakeAll() },
      unresponsive: { flight?.markUnreachable() },
      onEvent: onEvent)
  }

  deinit {
    subscription?.stop()
    backend.shutDown()
    // The observers' sequences end once they have read what is buffered.
    eventHub.finishAll()
  }

  // MARK: Invalidation

  /// Removes a key from `layers` whenever another instance writes or removes it in Redis, and
  /// empties them when another instance calls ``removeAll()``: pass the layers above this one
  /// in the chain (its memory layer). Can be called more than once; the layers add up.
  ///
  /// The layer subscribes to the namespace's invalidation channel on a connection of its own,
  /// in the background, and keeps the subscription until it is shut down. Its own writes do
  /// not come back to it. When the subscription breaks, it subscribes again and then empties
  /// `layers`, because messages sent in between are lost. See ``RedisInvalidation`` for the
  /// consistency this gives.
  ///
  /// - Throws: `AsyncCacheError.Code.invalidConfiguration` when the configuration has no
  ///   ``Configuration-swift.struct/invalidation``: writes are not announced then.
  public nonisolated func forwardInvalidations(to layers: [any AsyncCacheLayer<Key, Value>]) throws {
    guard let subscription, configuration.invalidation != nil else {
      throw AsyncCacheError.invalidConfiguration(
        "RedisLayer: forwardInvalidations(to:) needs Configuration.invalidation to be set on every instance")
    }
    invalidationTargets.withLock { $0.append(contentsOf: layers) }
    subscription.start()
  }

  /// Whether the layer is subscribed to invalidations now (it forwards them and the
  /// subscription is open).
  public nonisolated var isReceivingInvalidations: Bool {
    configuration.invalidation != nil && !invalidationTargets.withLock(\.isEmpty)
      && (subscription?.isSubscribed ?? false)
  }

  /// Appends `PUBLISH <channel> <message>` to `writer` when writes are announced.
  private nonisolated func announce(_ change: InvalidationMessage.Change, in writer: inout RESPCommandWriter) {
    guard let announcement else { return }
    writer.beginCommand(argumentCount: 3)
    writer.argument("PUBLISH")
    writer.argument(announcement.channel)
    writer.argument(InvalidationMessage(sender: announcement.sender, change: change).encoded)
  }

  /// Counts an invalidation message published, once the commands that carried it ran.
  nonisolated func countPublished() {
    if announcement != nil { counters.invalidationsPublished.add(1, ordering: .relaxed) }
  }

  // MARK: Reading

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
    do {
      let entry = CacheEntry(try valueCoder.decode(stored.payload), expiresAt: stored.expiresAt)
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
    let stored = try await storedValues(for: encodedKeys)
    var found = [Key: CacheEntry<Value>](minimumCapacity: keys.count)
    var hits = 0
    for index in keys.indices {
      guard let value = stored[index] else { continue }
      do {
        found[keys[index]] = CacheEntry(try valueCoder.decode(value.payload), expiresAt: value.expiresAt)
        hits += 1
      } catch {
        discardUndecodable(encodedKeys[index], error: error)
      }
    }
    countHits(hits)
    return found
  }

  /// A value as stored: its expiry and the bytes the value coder reads.
  @usableFromInline
  struct StoredValue: Sendable {
    @usableFromInline var expiresAt: CacheInstant?
    @usableFromInline var payload: Data
  }

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
      let (expiry, _, payload) = try RedisEnvelope.decode(bytes)
      let expiresAt = expiry.map(CacheInstant.init(nanosecondsSince1970:))
      if let expiresAt, expiresAt <= followedClock.now {
        counters.misses.add(1, ordering: .relaxed)
        return nil
      }
      return StoredValue(expiresAt: expiresAt, payload: bytes.withUnsafeBufferPointer { Data($0[payload]) })
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

  // MARK: Writing

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
      report(.expiredOnArrival(key: encodedKey, expiresAt: expiresAt, now: now), level: expiredArrivals.nextLevel())
      return nil
    }
    let payload: Data
    do {
      payload = try valueCoder.encode(entry.value)
    } catch {
      throw PersistenceError.unencodableValue(key: encodedKey, layer: "RedisLayer", underlying: error)
    }
    guard payload.count <= configuration.maximumValueSize else {
      throw PersistenceError.valueTooLarge(
        key: encodedKey, size: payload.count, limit: configuration.maximumValueSize, layer: "RedisLayer",
        limitName: "per-value limit (maximumValueSize)")
    }
    let stored = RedisEnvelope.encode(payload: payload, expiresAt: expiresAt?.nanosecondsSince1970, version: version)
    var milliseconds: String?
    if let expiresAt {
      // Whole milliseconds, rounded up: Redis never drops the key before the entry expires.
      let nanoseconds = now.duration(to: expiresAt).nanoseconds
      milliseconds = String(nanoseconds / 1_000_000 + (nanoseconds % 1_000_000 == 0 ? 0 : 1))
    }
    return (stored, milliseconds)
  }

  /// The invalidation channel and the message announcing a change of `encodedKey`, or two empty
  /// arguments when writes are not announced: the last arguments of the fenced scripts.
  nonisolated func invalidationArguments(for encodedKey: String) -> [[UInt8]] {
    guard let announcement else { return [[], []] }
    return [announcement.channel, InvalidationMessage(sender: announcement.sender, change: .key(encodedKey)).encoded]
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

  /// The server, or the cluster's masters: where commands without a key go.
  private nonisolated func servers() async throws -> [RedisConnectionPool] {
    switch backend {
    case .standalone(let pool):
      return [pool]
    case .cluster(let cluster):
      do {
        return try await cluster.masters()
      } catch let error as RedisError {
        counters.failures.add(1, ordering: .relaxed)
        throw error
      }
    }
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

  // MARK: Health

  /// Sends `PING`: succeeds when the server answers within the operation timeout.
  ///
  /// - Throws: ``RedisError``.
  public nonisolated func ping() async throws {
    let pools = try await servers()
    for pool in pools {
      let reply = try await run(RESPCommandWriter([RESPCommand("PING")]), named: "PING", on: pool)[0]
      guard case .simpleString = reply else { throw unexpected(reply, to: "PING") }
    }
  }

  /// Closes the connections and the invalidation subscription, and ends the event sequences.
  /// Operations in flight and later ones fail with ``RedisError/Code/shutDown``. Dropping the
  /// layer does the same. A `LoadingCache` or `CacheChain` that holds the layer calls it from
  /// its own `close()`, once its operations have ended. Calling it again does nothing.
  ///
  /// `async throws` as `AsyncCacheLayer.close()` is; it never suspends and never throws: the
  /// layer buffers no write.
  public nonisolated func close() async throws {
    closeNow()
  }

  /// Closes the connections, as ``close()`` does.
  @available(*, deprecated, renamed: "close()", message: "one name for closing a layer, as SQLiteLayer's")
  public nonisolated func shutDown() {
    closeNow()
  }

  /// Waits until the calling task is cancelled, the configuration's `gracefulShutdown` signal
  /// returns, or the layer is closed; then closes it (``close()``): the shape of
  /// swift-service-lifecycle's `Service` requirement, for a layer used without a `LoadingCache`
  /// (whose own `run()` closes its layers).
  public nonisolated func run() async throws {
    await closeSignal.wait(orUntil: configuration.gracefulShutdown)
    try await close()
  }

  private nonisolated func closeNow() {
    closeSignal.fire()
    subscription?.stop()
    backend.shutDown()
    // Nothing happens after this: the event sequences end once read.
    eventHub.finishAll()
  }

  /// What the layer has counted since it was created.
  public struct Statistics: Sendable, Hashable {
    /// Lookups that found an unexpired, readable entry.
    public var hits = 0
    /// Lookups that found none (or one it could not read, or one expired by the layer's clock).
    public var misses = 0
    /// Entries written.
    public var writes = 0
    /// Keys removed (by ``removeValue(for:)`` and ``removeAll()``) that were there.
    public var removals = 0
    /// Operations that failed with a ``RedisError``, fast failures included.
    public var failures = 0
    /// Timeouts: connections discarded because a command was not answered in time (the
    /// commands pipelined behind it failed with it, and count once).
    public var timeouts = 0
    /// Operations refused at once by the open circuit breaker, nothing sent.
    public var rejected = 0
    /// Connections opened.
    public var connectionsOpened = 0
    /// Connections closed because they failed (a timeout, a protocol error, a broken socket).
    public var connectionsDiscarded = 0
    /// Times the circuit breaker opened.
    public var circuitOpenings = 0
    /// Stored values under the namespace the layer could not read.
    public var discardedValues = 0
    /// Commands a cluster redirected (`MOVED` or `ASK`) that the layer sent again.
    public var redirects = 0
    /// Times the layer read a cluster's topology.
    public var topologyRefreshes = 0
    /// Invalidation messages published (one per write or removal, when writes are announced).
    public var invalidationsPublished = 0
    /// Invalidation messages received from other instances and forwarded.
    public var invalidationsReceived = 0
    /// Leases granted to this instance: loads it made for the fleet (single flight).
    public var leasesGranted = 0
    /// Times this instance renewed a lease while its load ran.
    public var leasesRenewed = 0
    /// Claims answered with the value another instance loaded while this one waited.
    public var loadsAwaited = 0
    /// Values this instance loaded that Redis refused to store because a write or removal of
    /// the key (or another instance's lease) came after its lease: fenced fills refused.
    public var fillsRefused = 0
    /// Loads made without coordination: Redis could not be reached (or answered a claim in a
    /// way this instance could not use), or the holder of the lease loaded a value Redis could
    /// not keep (`N`). Their values are stored in the other layers, not in Redis.
    public var uncoordinatedLoads = 0
  }

  /// What the layer has counted. Safe from any context.
  public nonisolated var statistics: Statistics {
    Statistics(
      hits: counters.hits.load(ordering: .relaxed), misses: counters.misses.load(ordering: .relaxed),
      writes: counters.writes.load(ordering: .relaxed), removals: counters.removals.load(ordering: .relaxed),
      failures: counters.failures.load(ordering: .relaxed), timeouts: counters.timeouts.load(ordering: .relaxed),
      rejected: counters.rejected.load(ordering: .relaxed),
      connectionsOpened: counters.connectionsOpened.load(ordering: .relaxed),
      connectionsDiscarded: counters.connectionsDiscarded.load(ordering: .relaxed),
      circuitOpenings: counters.circuitOpenings.load(ordering: .relaxed),
      discardedValues: counters.discardedValues.load(ordering: .relaxed),
      redirects: counters.redirects.load(ordering: .relaxed),
      topologyRefreshes: counters.topologyRefreshes.load(ordering: .relaxed),
      invalidationsPublished: counters.invalidationsPublished.load(ordering: .relaxed),
      invalidationsReceived: counters.invalidationsReceived.load(ordering: .relaxed),
      leasesGranted: counters.leasesGranted.load(ordering: .relaxed),
      leasesRenewed: counters.leasesRenewed.load(ordering: .relaxed),
      loadsAwaited: counters.loadsAwaited.load(ordering: .relaxed),
      fillsRefused: counters.fillsRefused.load(ordering: .relaxed),
      uncoordinatedLoads: counters.uncoordinatedLoads.load(ordering: .relaxed))
  }

  // MARK: Internals

  /// Sends the commands of `writer`, all for `key`, as one pipeline to the server (or the
  /// cluster's master) that holds it; throws the first error reply as a ``RedisError``.
  ///
  /// - Parameters:
  ///   - tolerating: The start of an error reply to return rather than throw.
  ///   - cancellable: Whether the calling task's cancellation gives the commands up.
  ///     When `false`, they run and are answered whatever happens to the task.
  nonisolated func run(
    _ writer: RESPCommandWriter, named name: String, key: String, tolerating: String? = nil,
    cancellable: Bool = true
  ) async throws -> [RESPValue] {
    switch backend {
    case .standalone(let pool):
      return try await run(writer, named: name, on: pool, tolerating: tolerating, cancellable: cancellable)
    case .cluster(let cluster):
      let group = RedisClusterClient.Group(slot: Int(ClusterSlot.of(prefix: keyPrefix, key: key)), writer: writer)
      guard cancellable else {
        // A cluster's sends may run in child tasks, which a cancellation reaches: in a task of
        // their own.
        return try await Task { try await self.run([group], named: name, in: cluster, tolerating: tolerating)[0] }
          .value
      }
      return try await run([group], named: name, in: cluster, tolerating: tolerating)[0]
    }
  }

  /// Sends the commands of `writer` as one pipeline on `pool`; throws the first error reply as
  /// a ``RedisError``.
  nonisolated func run(
    _ writer: RESPCommandWriter, named name: String, on pool: RedisConnectionPool, tolerating: String? = nil,
    cancellable: Bool = true
  ) async throws -> [RESPValue] {
    let replies: [RESPValue]
    do {
      replies = try await pool.send(writer, cancellable: cancellable)
    } catch let error as RedisError {
      counters.failures.add(1, ordering: .relaxed)
      throw error
    }
    try checkErrors(in: replies, named: name, server: pool.server, tolerating: tolerating)
    return replies
  }

  /// Sends each group to its slot's master; throws the first error reply as a ``RedisError``.
  private nonisolated func run(
    _ groups: [RedisClusterClient.Group], named name: String, in cluster: RedisClusterClient,
    tolerating: String? = nil
  ) async throws -> [[RESPValue]] {
    let replies: [[RESPValue]]
    do {
      replies = try await cluster.send(groups)
    } catch let error as RedisError {
      counters.failures.add(1, ordering: .relaxed)
      throw error
    }
    for groupReplies in replies {
      try checkErrors(in: groupReplies, named: name, server: cluster.name, tolerating: tolerating)
    }
    return replies
  }

  private nonisolated func checkErrors(
    in replies: [RESPValue], named name: String, server: String, tolerating: String? = nil
  ) throws {
    for reply in replies {
      if case .error(let text) = reply {
        if let tolerating, text.hasPrefix(tolerating) { continue }
        // A key of another type under the namespace is not a value this layer can read: a
        // miss, as MGET's nil for it is (see `storedValue(from:key:command:)`).
        if name == "GET" && text.hasPrefix("WRONGTYPE") { continue }
        counters.failures.add(1, ordering: .relaxed)
        throw RedisError.reply(text, to: name, server: server)
      }
    }
  }

  /// Commands sent and not yet answered, on every connection.
  nonisolated var commandsInFlight: Int {
    switch backend {
    case .standalone(let pool): pool.commandsInFlight
    case .cluster(let cluster): cluster.commandsInFlight
    }
  }

  /// The key as the key encoding writes it, without the namespace.
  @usableFromInline
  nonisolated func encodedKey(_ key: Key) throws -> String {
    do {
      return try keyEncoding.encode(key)
    } catch {
      throw PersistenceError(
        code: .encodingFailed, message: "RedisLayer could not encode the key \(String(describing: key).prefix(200))",
        underlying: error)
    }
  }

  nonisolated func unexpected(_ reply: RESPValue, to command: String) -> RedisError {
    counters.failures.add(1, ordering: .relaxed)
    return RedisError(
      code: .protocolError,
      message:
        "\(configuration.servers) answered \(command) with an unexpected reply: \(String(describing: reply).prefix(200))"
    )
  }

  private nonisolated func report(_ event: RedisLayerEvent, level: CacheLogLevel? = nil) {
    Self.log(event, to: followedLogger.value, namespace: namespace, level: level)
    eventHub.emit(event)
  }

  /// A sequence of the events the layer reports from now on (``RedisLayerEvent``), for one
  /// observer; see `EventSequence` for its buffering and its end. A
  /// ``Configuration-swift.struct/eventHandler`` gets the same events, synchronously.
  ///
  /// - Parameter limit: The most events the sequence buffers for a slow observer; past it, the
  ///   oldest are dropped and reported by a ``RedisLayerEvent/dropped(count:)``. At least 1.
  public nonisolated func events(bufferingNewest limit: Int = 1_000) -> EventSequence<RedisLayerEvent> {
    eventHub.events(bufferingNewest: limit)
  }

  /// The start of every stored key of `namespace`: the namespace with `\` and `:` escaped by
  /// a `\`, then `:`.
  ///
  /// An escaped namespace has no unescaped `:`, so the first unescaped `:` of a stored key ends
  /// its namespace: no prefix starts another (`a:` never starts `a\:b:…`), and a `SCAN` for
  /// one prefix matches that namespace's keys only. A namespace without `:` or `\` keeps the
  /// prefix it had before this escaping.
  static func keyPrefix(of namespace: String) -> [UInt8] {
    var prefix: [UInt8] = []
    prefix.reserveCapacity(namespace.utf8.count + 1)
    for byte in namespace.utf8 {
      if byte == UInt8(ascii: ":") || byte == UInt8(ascii: "\\") { prefix.append(UInt8(ascii: "\\")) }
      prefix.append(byte)
    }
    prefix.append(UInt8(ascii: ":"))
    return prefix
  }

  /// `bytes` with the glob characters of `SCAN MATCH` escaped.
  static func globEscaped(_ bytes: [UInt8]) -> [UInt8] {
    var escaped: [UInt8] = []
    escaped.reserveCapacity(bytes.count)
    for byte in bytes {
      if byte == UInt8(ascii: "*") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "[")
        || byte == UInt8(ascii: "]") || byte == UInt8(ascii: "\\")
      {
        escaped.append(UInt8(ascii: "\\"))
      }
      escaped.append(byte)
    }
    return escaped
  }

  private static func log(
    _ event: RedisLayerEvent, to logger: CacheLogger, namespace: String, level: CacheLogLevel? = nil
  ) {
    let level: CacheLogLevel =
      if let level { level } else {
        switch event {
        case .connected: .info
        case .connectionDiscarded, .valueDiscarded, .invalidationsInterrupted: .warning
        case .circuitOpened: .error
        case .circuitClosed, .topologyChanged, .invalidationsResubscribed: .notice
        case .dropped, .expiredOnArrival: .warning
        }
      }
    logger.log(level, event.description, metadata: ["namespace": namespace], source: "RedisLayer")
  }
}

extension RedisLayer where Key: CacheKeyEncodable, Value == Data {
  /// A layer of raw `Data` values whose keys are stored with their type's default encoding
  /// (`CacheKeyEncodable`: `String`, integers, `UUID`, …). See
  /// ``init(configuration:namespace:keyEncoding:valueCoder:)``.
  public init(configuration: Configuration = Configuration(), namespace: String = "default") throws {
    try self.init(
      configuration: configuration, namespace: namespace, keyEncoding: Key.cacheKeyEncoding, valueCoder: .data)
  }
}

extension RedisLayer where Key: CacheKeyEncodable, Value: Codable {
  /// A layer of `Codable` values, stored as JSON unless another coder is given, whose keys are
  /// stored with their type's default encoding (`CacheKeyEncodable`).
  /// See ``init(configuration:namespace:keyEncoding:valueCoder:)``.
  public init(
    configuration: Configuration = Configuration(), namespace: String = "default",
    valueCoder: CacheValueCoder<Value> = .json
  ) throws {
    try self.init(
      configuration: configuration, namespace: namespace, keyEncoding: Key.cacheKeyEncoding, valueCoder: valueCoder)
  }
}

extension RedisLayer {
  /// Where a layer's commands go.
  enum Backend: Sendable {
    case standalone(RedisConnectionPool)
    case cluster(RedisClusterClient)

    func shutDown() {
      switch self {
      case .standalone(let pool): pool.shutDown()
      case .cluster(let cluster): cluster.shutDown()
      }
    }

    var cluster: RedisClusterClient? {
      if case .cluster(let cluster) = self { cluster } else { nil }
    }

    /// Where the invalidation subscription connects: the server, or a master of the cluster
    /// (a cluster passes published messages on to every node).
    func subscriptionEndpoint() async throws -> RedisEndpoint {
      switch self {
      case .standalone(let pool):
        return RedisEndpoint(host: pool.options.host, port: pool.options.port)
      case .cluster(let cluster):
        guard let master = try await cluster.masters().randomElement() else {
          throw RedisError(code: .routingFailed, message: "\(cluster.name) has no master to subscribe on")
        }
        return RedisEndpoint(host: master.options.host, port: master.options.port)
      }
    }
  }
}

extension RedisLayer {
  /// Follows the clock and the logger of the cache or chain the layer is put in, for those its
  /// configuration does not name (see `CacheEnvironment`).
  public nonisolated func follow(_ environment: CacheEnvironment) {
    followedClock.follow(environment.clock)
    followedLogger.follow(environment.logger)
  }

  /// The clock expiry is read from: the configuration's, the one the layer follows (see
  /// `CacheEnvironment`), or the wall clock. Safe from any context.
  public nonisolated var clock: any CacheClock { followedClock.clock }
}
