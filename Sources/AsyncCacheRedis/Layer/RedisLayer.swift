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
/// - **Threads**: socket I/O runs on the connections' own threads; no call waits on a thread of
///   the cooperative pool for a slow server. On Linux, a lone command (nothing else in flight
///   on its connection, no other such caller in the process) waits for its reply on the
///   caller's thread for at most ``Configuration-swift.struct/callerWaitLimit`` (200 µs by
///   default) and reads it there, which saves two thread hand-offs per round trip; a later
///   reply goes to the connection's thread. The layer's methods are `nonisolated`: calls do
///   not queue on the actor.
///
/// The layer connects lazily: creating it does not touch the network, so a service starts
/// while Redis is down. Call ``ping()`` to check the server at startup.
public final actor RedisLayer<Key: Hashable & Sendable, Value: Sendable>: EnvironmentFollowingLayer {
  /// The namespace this layer's keys live under, in Unicode Normalization Form C.
  public nonisolated let namespace: String
  /// The server, limits and timing.
  public nonisolated let configuration: Configuration
  /// The clock and logger the layer reads: its configuration's, or those of the cache or chain
  /// it is in.
  package nonisolated let layerEnvironment: LayerEnvironment
  /// Whether the layer began closing; its closing ends ``run()``.
  private nonisolated let lifecycle = Lifecycle("RedisLayer")
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
  nonisolated let invalidationTargets: Locked<[any AsyncCacheLayer<Key, Value>]>
  /// The namespace's hash of tag invalidations (see ``tagsKey(of:)``).
  nonisolated let tagsKey: [UInt8]
  /// This instance's copy of the namespace's tag invalidations.
  nonisolated let tagMirror = RedisTagMirror()
  /// Deletes, in the background, the entries reads found dead by tag.
  nonisolated let deadEntries: DeadEntryCleaner

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
    try ConfigurationCheck("RedisLayer").require(!namespace.isEmpty, "namespace", is: "\"\"", mustBe: "non-empty")
    try configuration.validate()
    let namespace = namespace.nfcNormalized
    self.namespace = namespace
    self.configuration = configuration
    let environment = LayerEnvironment(
      clock: configuration.$clock, logger: configuration.$logger, source: "RedisLayer",
      context: ["namespace": namespace])
    self.layerEnvironment = environment
    self.keyEncoding = keyEncoding
    self.valueCoder = valueCoder
    self.keyPrefix = Self.keyPrefix(of: namespace)
    self.tagsKey = Self.tagsKey(of: keyPrefix)
    let counters = RedisCounters()
    self.counters = counters
    let eventHub = EventHub(handler: configuration.eventHandler)
    self.eventHub = eventHub
    // Timers (the circuit breaker's, the invalidations' health checks and backoff) run on the
    // clock given to the layer, or in real time: they do not follow a cache's clock, which a
    // test may hold still. Expiry does.
    let clock = configuration.clock
    let onEvent = Self.reporter(to: environment, eventHub: eventHub)
    // One warning and one notice per outage, however many of its pieces it reaches.
    let outage = RedisOutage(staleAfter: Swift.max(.seconds(5), configuration.circuitBreaker.maximumDelay * 2))
    let backend = Backend(
      configuration: configuration, clock: clock, counters: counters, outage: outage, onEvent: onEvent)
    self.backend = backend
    self.deadEntries = DeadEntryCleaner(configuration: configuration, clock: clock, environment: environment)
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
    let invalidations = InvalidationDelivery(
      tracks: tracks, prefix: keyPrefix, sender: sender, decode: keyEncoding.decode, targets: targets, flight: flight,
      counters: counters, tags: tagMirror, tagsKey: tagsKey,
      tellChain: { environment.tell($0) })
    // Single flight probes the server while loads wait on it (see RedisSubscription.serve).
    var probe: (@Sendable () async -> Bool)?
    if flight != nil { probe = { await backend.answersPing() } }
    self.subscription = RedisSubscription(
      options: RedisSubscription.Options(
        channels: channels, trackingPrefixes: tracks ? [keyPrefix, tagsKey] : [],
        connectTimeout: configuration.connectTimeout,
        operationTimeout: configuration.operationTimeout, handshake: configuration.handshake,
        healthCheckInterval: configuration.invalidation?.healthCheckInterval ?? .seconds(10), outage: outage,
        backoff: configuration.circuitBreaker, clock: clock, isUrgent: { flight?.isUrgent ?? false },
        probe: probe),
      counters: counters,
      endpoint: { try await backend.subscriptionEndpoint() },
      receiveNow: { channel, payload in flight?.receiveNow(channel, payload) ?? false },
      deliver: invalidations.deliver,
      resynchronize: {
        flight?.resubscribed()
        await invalidations.resynchronize()
      },
      interrupted: { flight?.waits.wakeAll() },
      unresponsive: { flight?.markUnreachable() },
      responsive: { flight?.isUnreachable.store(false, ordering: .releasing) },
      onEvent: onEvent)
  }

  deinit {
    subscription?.stop()
    _ = deadEntries.close()
    backend.shutDown()
    // The observers' sequences end once they have read what is buffered.
    eventHub.finishAll()
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
    try await lifecycle.run(orUntil: configuration.gracefulShutdown)
    try await close()
  }

  private nonisolated func closeNow() {
    guard lifecycle.beginClosing() else { return }
    singleFlight?.cancelDeferred()
    subscription?.stop()
    let dropped = deadEntries.close()
    backend.shutDown()
    // Nothing happens after this: the event sequences end once read.
    eventHub.finishAll()
    // The layer buffers no write; what it drops is deletions of dead entries, which the next
    // read of each hands over again, or its expiry ends.
    layerEnvironment.log(
      .notice, dropped == 0 ? "closed" : "closed; \(dropped) deletions of dead entries waiting were dropped",
      metadata: ["droppedDeletions": "\(dropped)"])
  }

  // MARK: Events

  nonisolated func report(_ event: RedisLayerEvent, level: CacheLogLevel? = nil) {
    Self.log(event, to: layerEnvironment, level: level)
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

  /// Where the layer's pieces (its pools, cluster client and subscription) report their events:
  /// the logger the layer follows, and the layer's observers.
  private static func reporter(
    to environment: LayerEnvironment, eventHub: EventHub<RedisLayerEvent>
  ) -> RedisEventSink {
    { event, level in
      log(event, to: environment, level: level)
      eventHub.emit(event)
    }
  }

  private static func log(
    _ event: RedisLayerEvent, to environment: LayerEnvironment, level: CacheLogLevel? = nil
  ) {
    let level: CacheLogLevel =
      if let level { level } else {
        switch event {
        case .connected, .connectionDiscarded: .info
        case .probeFailed: .debug
        case .valueDiscarded, .invalidationsInterrupted, .circuitOpened: .warning
        case .circuitClosed, .topologyChanged, .invalidationsResubscribed: .notice
        case .dropped, .expiredOnArrival: .warning
        }
      }
    environment.log(level, event.description)
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
  /// The clock expiry is read from: the configuration's, the one the layer follows (see
  /// `CacheEnvironment`), or the wall clock. Safe from any context.
  public nonisolated var clock: any CacheClock { followedClock.clock }
}
