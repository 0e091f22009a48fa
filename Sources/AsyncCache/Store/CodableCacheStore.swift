public import Foundation

/// A key-value store of `Codable` values with per-call expiry, over a chain of `String → Data`
/// layers: session data, tokens, rate-limit counters, whatever a server keeps across requests.
///
/// Its methods have the exact shapes of Hummingbird's `PersistDriver` requirements (and its
/// ``run()`` of swift-service-lifecycle's `Service`), so that a Hummingbird service uses it as
/// its persist driver with one line and no dependency of this package:
///
/// ```swift
/// import Hummingbird
///
/// extension CodableCacheStore: @retroactive PersistDriver {}
///
/// let store = try CodableCacheStore(
///     layers: [MemoryLayer<String, Data>(), try await SQLiteLayer<String, Data>(url: url)],
///     duplicateError: { _ in PersistError.duplicate },
///     gracefulShutdown: gracefulShutdown)   // ServiceLifecycle's
/// ```
///
/// Semantics, as `PersistDriver` documents them:
/// - ``create(key:value:expires:)`` fails when the key holds an unexpired value;
///   ``set(key:value:expires:)`` replaces it. Both are atomic with respect to the other writes
///   of the key made through this store; two stores (two processes) sharing a layer can both
///   create a key.
/// - An expiry is a duration from now, on the store's clock; a value is gone once it passes.
///   `set` with `expires: nil` keeps the expiry of the value it replaces, if it had one.
/// - ``get(key:as:)`` returns `nil` for a missing or expired key, and for a value that does not
///   decode as the type asked for.
///
/// Values are stored as JSON. Safe from any context.
public final class CodableCacheStore: Sendable {
  /// The layers the values live in.
  public let chain: CacheChain<String, Data>
  /// The clock expiries are computed on; handed to the layers created without one.
  public let clock: any CacheClock
  private let duplicateError: @Sendable (String) -> any Error
  private let gracefulShutdown: (@Sendable () async throws -> Void)?
  private let followsMemoryPressureWhileRunning: Bool
  private let writes = KeyedSerialization<String>()
  private let lifecycle = Lifecycle("CodableCacheStore")

  /// Creates a store over `chain`.
  ///
  /// - Parameters:
  ///   - chain: The layers the values live in, top first.
  ///   - clock: The clock expiries are computed on. Default ``WallClock``; the chain's layers
  ///     created without a clock follow it.
  ///   - logger: The logger the chain and its layers created without one follow (a SQLite
  ///     layer's close says there what it wrote). Default `nil`: the chain's own, if any.
  ///   - duplicateError: The error ``create(key:value:expires:)`` throws for a key that exists;
  ///     by default ``AsyncCacheError/Code/duplicateKey`` naming the key. A Hummingbird service
  ///     passes `{ _ in PersistError.duplicate }`.
  ///   - gracefulShutdown: An async function that returns when the service running the store
  ///     (``run()``) should shut down gracefully: pass swift-service-lifecycle's
  ///     `gracefulShutdown`. Default `nil`: `run()` ends when its task is cancelled or the store
  ///     is shut down.
  ///   - followsMemoryPressureWhileRunning: Whether ``run()`` follows the platform's memory
  ///     pressure while it runs (``CacheChain/followSystemMemoryPressure()``), as a
  ///     ``LoadingCache`` does. Default `true`.
  public init(
    chain: CacheChain<String, Data>,
    clock: (any CacheClock)? = nil,
    logger: CacheLogger? = nil,
    duplicateError: (@Sendable (String) -> any Error)? = nil,
    gracefulShutdown: (@Sendable () async throws -> Void)? = nil,
    followsMemoryPressureWhileRunning: Bool = true
  ) {
    self.chain = chain
    // One clock for the store and its layers: a chain given one lends it to a store given none.
    self.clock = clock ?? chain.followedClock.handedOn ?? WallClock()
    self.duplicateError = duplicateError ?? { key in AsyncCacheError.duplicateKey(key) }
    self.gracefulShutdown = gracefulShutdown
    self.followsMemoryPressureWhileRunning = followsMemoryPressureWhileRunning
    chain.follow(CacheEnvironment(clock: self.clock, logger: logger))
  }

  /// Creates a store over a chain of `layers`, top first, whose failures are propagated.
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` when `layers` is empty.
  public convenience init(
    layers: [any AsyncCacheLayer<String, Data>],
    clock: (any CacheClock)? = nil,
    logger: CacheLogger? = nil,
    duplicateError: (@Sendable (String) -> any Error)? = nil,
    gracefulShutdown: (@Sendable () async throws -> Void)? = nil,
    followsMemoryPressureWhileRunning: Bool = true
  ) throws {
    try self.init(
      chain: CacheChain(layers.map { CacheChain.Tier($0) }), clock: clock, logger: logger,
      duplicateError: duplicateError, gracefulShutdown: gracefulShutdown,
      followsMemoryPressureWhileRunning: followsMemoryPressureWhileRunning)
  }

  // MARK: PersistDriver's shape

  /// Stores `value` for `key` unless the key holds an unexpired value.
  ///
  /// - Parameters:
  ///   - key: The key.
  ///   - value: The value, stored as JSON.
  ///   - expires: How long the value lives; `nil` for ever.
  /// - Throws: The `duplicateError` the store was created with when the key exists; a
  ///   `PersistenceError` when the value does not encode; a layer's failure.
  public func create<Object: Codable & Sendable>(key: String, value: Object, expires: Duration?) async throws {
    let data = try encode(value, for: key)
    try await writes.run(key) {
      if try await self.chain.entry(for: key) != nil { throw self.duplicateError(key) }
      try await self.chain.insert(data, for: key, expiresAt: expires.map { self.clock.now.advanced(by: $0) })
    }
  }

  /// Stores `value` for `key`, replacing any value.
  ///
  /// - Parameters:
  ///   - key: The key.
  ///   - value: The value, stored as JSON.
  ///   - expires: How long the value lives; `nil` to keep the expiry of the value it replaces
  ///     (for ever when there was none).
  /// - Throws: A `PersistenceError` when the value does not encode; a layer's failure.
  public func set<Object: Codable & Sendable>(key: String, value: Object, expires: Duration?) async throws {
    let data = try encode(value, for: key)
    try await writes.run(key) {
      let expiresAt: CacheInstant?
      if let expires {
        expiresAt = self.clock.now.advanced(by: expires)
      } else {
        expiresAt = try await self.keptExpiry(of: key)
      }
      try await self.chain.insert(data, for: key, expiresAt: expiresAt)
    }
  }

  /// The value for `key`, or `nil` when the key is missing or expired, or its value does not
  /// decode as `Object`.
  ///
  /// - Throws: A layer's failure.
  public func get<Object: Codable & Sendable>(key: String, as: Object.Type) async throws -> Object? {
    try await getWithTTL(key: key, as: Object.self)?.object
  }

  /// The value for `key` and the time it has left to live (`nil` for ever), or `nil` as
  /// ``get(key:as:)`` returns it. The time to live is the longest any layer keeps the value:
  /// costs a lookup in each layer when the value expires.
  ///
  /// - Throws: A layer's failure.
  public func getWithTTL<Object: Codable & Sendable>(
    key: String, as: Object.Type
  ) async throws -> (object: Object, ttl: Duration?)? {
    guard let entry = try await chain.entry(for: key) else { return nil }
    guard let object = try? CacheValueCoder<Object>.json.decode(entry.value) else { return nil }
    guard entry.expiresAt != nil else { return (object, nil) }
    // The layer that answered may cap what it holds (a memory layer's own time to live): the
    // value lives as long as the layer that keeps it longest.
    let expiresAt = try await keptExpiry(of: key)
    // A memory hit's time may lag (a clock's `coarseNow`): the value may be a little past its expiry.
    return (object, expiresAt.map { Swift.max(clock.now.duration(to: $0), .zero) })
  }

  /// Removes the value for `key`, if any.
  ///
  /// - Throws: A layer's failure.
  public func remove(key: String) async throws {
    try await writes.run(key) { try await self.chain.removeValue(for: key) }
  }

  /// Closes the store: its layers close (``CacheChain/close()``: a SQLite layer writes what it
  /// buffers), and later calls throw ``AsyncCacheError/Code/closed``. Calling it again waits for
  /// the first call. The name every owner of layers in this package closes by.
  public func close() async throws {
    try await lifecycle.close { try await self.chain.close() }
  }

  /// Closes the store, as ``close()`` does: the name of Hummingbird's `PersistDriver`
  /// requirement.
  public func shutdown() async throws {
    try await close()
  }

  /// Waits until the calling task is cancelled, the `gracefulShutdown` signal the store was
  /// created with returns, or ``close()`` is called, following the platform's memory pressure
  /// meanwhile (unless created with `followsMemoryPressureWhileRunning: false`); then closes
  /// the store: the shape of swift-service-lifecycle's `Service` requirement, which
  /// `PersistDriver` refines.
  public func run() async throws {
    var work: (@Sendable () async -> Void)?
    if followsMemoryPressureWhileRunning {
      let chain = chain
      work = { await chain.followSystemMemoryPressure() }
    }
    try await lifecycle.run(orUntil: gracefulShutdown, meanwhile: work)
    try await close()
  }

  /// The expiry of the value `key` holds, to keep when it is replaced: the latest its layers
  /// know (a layer with a time to live of its own, such as a memory layer on top, caps the
  /// expiry it holds; a layer below may keep the value for ever). `nil` for none, or for ever.
  private func keptExpiry(of key: String) async throws -> CacheInstant? {
    var latest: CacheInstant?
    var found = false
    for tier in chain.tiers {
      guard let entry = try await tier.layer.entry(for: key) else { continue }
      guard let expiresAt = entry.expiresAt else { return nil }
      latest = found ? Swift.max(latest ?? expiresAt, expiresAt) : expiresAt
      found = true
    }
    return latest
  }

  private func encode<Object: Codable & Sendable>(_ value: Object, for key: String) throws -> Data {
    do {
      return try CacheValueCoder<Object>.json.encode(value)
    } catch {
      throw PersistenceError.unencodableValue(key: key, layer: "CodableCacheStore", underlying: error)
    }
  }
}

/// Runs async work one at a time per key, in the order it arrives. Safe from any context.
final class KeyedSerialization<Key: Hashable & Sendable>: Sendable {
  private let queues = Locked<[Key: [UnsafeContinuation<Void, Never>]]>([:])

  /// Runs `work` once the work of `key` that arrived before it has ended.
  func run<Result: Sendable>(_ key: Key, _ work: @Sendable () async throws -> Result) async throws -> Result {
    await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
      let runsNow = queues.withLock { queues in
        if queues[key] == nil {
          queues[key] = []
          return true
        }
        queues[key]!.append(continuation)
        return false
      }
      if runsNow { continuation.resume() }
    }
    defer {
      let next = queues.withLock { queues -> UnsafeContinuation<Void, Never>? in
        guard var waiting = queues[key], !waiting.isEmpty else {
          queues[key] = nil
          return nil
        }
        let next = waiting.removeFirst()
        queues[key] = waiting
        return next
      }
      next?.resume()
    }
    return try await work()
  }
}
