// How a read-through of the chain runs: the lookups top-down, and the copies or the loaded value
// it stores, as one read of the chain's write coordinator.
/// One read-through of a key of a ``CacheChain``, from its lookups to what it stores: one read
/// of the chain's write coordinator. A write of the key while it runs overtakes it: it may still
/// answer with what it found, but stores nothing.
///
/// Noncopyable, so that a read ends once: by one of its consuming methods, or, when it is
/// dropped (nothing found, a load that failed or threw), by its deinit, which stores nothing.
/// Where its entry goes is decided here, from the layer it was found in and whether the read
/// skips the top layer (a prefetch into the lower layers).
struct ChainRead<Key: Hashable & Sendable, Value: Sendable>: ~Copyable, Sendable {
  /// An entry and the index of the layer that had it.
  typealias Found = (entry: CacheEntry<Value>, tier: Int)

  let chain: CacheChain<Key, Value>
  let token: ReadToken<Key>
  /// Its end was handed to a task of its own (``copyBelowTopInBackground(_:)``).
  private var handedOver = false

  /// Begins a read of `key`.
  init(of key: Key, in chain: CacheChain<Key, Value>) {
    self.init(resuming: chain.beginRead(key), of: chain)
  }

  /// Takes over `token`, a read of `chain` begun with ``CacheChain/beginRead(_:)`` (a load's,
  /// begun when the load was registered, so that its abandonment could overtake it).
  init(resuming token: ReadToken<Key>, of chain: CacheChain<Key, Value>) {
    self.chain = chain
    self.token = token
  }

  deinit {
    if !handedOver { chain.endRead(token) }
  }

  /// The key read.
  var key: Key { token.key }

  /// The first unexpired entry for the key and the index of the layer that had it.
  func locate() async throws -> Found? {
    try await chain.locate(key)
  }

  /// The first unexpired entry that `accept` takes (see
  /// ``CacheChain/locate(_:fallback:passedOver:accepting:)``).
  func locate(
    fallback: inout Found?, passedOver: (CacheEntry<Value>, Int) -> Void = { _, _ in },
    accepting accept: (CacheEntry<Value>) -> Bool
  ) async throws -> Found? {
    try await chain.locate(key, fallback: &fallback, passedOver: passedOver, accepting: accept)
  }

  /// Ends the read storing nothing.
  consuming func end() {}

  /// Ends the read, which found `entry` in layer `tier` (or was handed it, as the coordinator's
  /// layer holds it), by copying it into the layers above that one: from the top, or the layer
  /// below it when `skippingTop`. With `everywhere` (an entry extended to a new expiry), into
  /// every layer from there, its own included. Awaited, or in a task of its own, per
  /// ``CacheChain/Configuration-swift.struct/backfill``; a write since the read began wins.
  consuming func copy(
    _ entry: CacheEntry<Value>, foundIn tier: Int, skippingTop: Bool = false, everywhere: Bool = false
  ) async {
    let top = chain.firstLayer(skippingTop: skippingTop)
    let range = top..<(everywhere ? chain.tiers.count : Swift.max(top, tier))
    guard !range.isEmpty else { return }
    guard chain.configuration.backfill == .awaited else { return copyInBackground(entry, into: range) }
    _ = await chain.commit(entry, for: key, to: range, token: token, operation: .backfill)
  }

  /// Ends the read by copying `entry` into every layer below the top one, in a task of its
  /// own (a sliding expiry's extension, decided on a hit that must not wait).
  consuming func copyBelowTopInBackground(_ entry: CacheEntry<Value>) {
    copyInBackground(entry, into: 1..<chain.tiers.count)
  }

  private consuming func copyInBackground(_ entry: CacheEntry<Value>, into range: Range<Int>) {
    guard !range.isEmpty else { return }
    handedOver = true
    let (chain, token) = (chain, token)
    chain.runInBackground {
      _ = await chain.commit(entry, for: token.key, to: range, token: token, operation: .backfill)
      chain.endRead(token)
    }
  }

  /// Ends the read, which loaded `entry` from the origin, by storing it in every layer from
  /// the top (or the layer below it when `skippingTop`) but `excluded` (the coordinator's,
  /// which took it when its claim completed, or which must not take it unfenced). With
  /// `revalidating` (the entry the origin said did not change: `entry` has its value), a layer
  /// that still holds that entry is given `entry`'s expiry and metadata in place (``AsyncCacheLayer/revalidate(_:for:replacing:)``); the others store `entry` whole.
  /// Returns whether it stored it: not when a write overtook the read.
  @discardableResult
  consuming func store(
    _ entry: CacheEntry<Value>, skippingTop: Bool = false, excluding excluded: Int? = nil,
    revalidating revalidated: CacheEntry<Value>? = nil
  ) async -> Bool {
    let layers = chain.firstLayer(skippingTop: skippingTop)..<chain.tiers.count
    return await chain.commit(
      entry, for: key, to: layers.filter { $0 != excluded }, token: token, operation: .insert,
      revalidating: revalidated)
  }
}

extension ChainRead {
  /// Ends the read, which loaded a value that must not be kept (its origin gave it no
  /// lifetime), by removing the key from every layer from the top (or the layer below it when
  /// `skippingTop`) but `excluded`: the entry the load replaced is older than what the origin
  /// answered, and must not be served in its stead. A write since the read began wins: it
  /// removes nothing then.
  consuming func remove(skippingTop: Bool = false, excluding excluded: Int? = nil) async {
    let layers = chain.firstLayer(skippingTop: skippingTop)..<chain.tiers.count
    await chain.commitRemoval(of: key, from: layers.filter { $0 != excluded }, token: token)
  }
}

extension CacheChain {
  // MARK: Read-through (also used by LoadingCache, through ChainRead)

  /// Begins a read of `key`, to end through a ``ChainRead``.
  nonisolated func beginRead(_ key: Key) -> ReadToken<Key> {
    coordinator.beginRead(key)
  }

  /// Ends `read` (``ChainRead`` does).
  fileprivate nonisolated func endRead(_ read: ReadToken<Key>) {
    coordinator.endRead(read)
  }

  /// Marks `read` as overtaken, so that it stores nothing (a load no one wants any more: a
  /// fresh load may follow).
  nonisolated func overtake(_ read: ReadToken<Key>) {
    coordinator.overtake(read)
  }

  /// The first layer a read stores in: the top one, or the one below it when `skippingTop`
  /// (unless there is none).
  fileprivate nonisolated func firstLayer(skippingTop: Bool) -> Int {
    skippingTop && tiers.count > 1 ? 1 : 0
  }

  // MARK: Building blocks (also used by LoadingCache)

  /// The first unexpired entry for `key` and the index of the layer that had it; no back-fill.
  nonisolated func locate(_ key: Key) async throws -> (entry: CacheEntry<Value>, tier: Int)? {
    var fallback: (entry: CacheEntry<Value>, tier: Int)?
    return try await locate(key, fallback: &fallback) { _ in true }
  }

  /// The first unexpired entry for `key` that `accept` takes, and the index of the layer that
  /// had it; no back-fill. An entry dead by tag (see ``invalidate(tag:)``) is a miss of its
  /// layer: it is neither taken nor passed over. An entry `accept` declines does not stop the
  /// lookup: the one of them that expires last is left in `fallback`, also when a layer's
  /// failure is then thrown (``LayerFailurePolicy/propagate``), so that a caller can still serve
  /// it; `passedOver` is told of each declined entry and its layer as soon as it is found.
  nonisolated func locate(
    _ key: Key,
    fallback: inout (entry: CacheEntry<Value>, tier: Int)?,
    passedOver: (CacheEntry<Value>, Int) -> Void = { _, _ in },
    accepting accept: (CacheEntry<Value>) -> Bool
  ) async throws -> (entry: CacheEntry<Value>, tier: Int)? {
    let clock = followedClock.value
    let tracing = tracingLayers
    let observe = followedLookupObserver.value
    for index in tiers.indices {
      let started = clock.now
      do {
        let found = try await traceLayer("cache.layer.lookup", tier: index, key: key, tracing) { span in
          // An entry dead by tag is a miss.
          let entry = try await tiers[index].layer.entry(for: key).flatMap {
            tagInvalidations.kills($0.metadata) ? nil : $0
          }
          span?.set("cache.hit", entry != nil)
          return entry
        }
        if let entry = found {
          let took = started.duration(to: clock.now)
          let recovered = counters.withLock { counters in
            counters[index].hits += 1
            counters[index].lookupTime.record(took)
            return counters[index].answered()
          }
          if recovered { logRecovery(tier: index) }
          observe?(LayerLookupReport(tierIndex: index, layerName: tiers[index].name, outcome: .hit, duration: took))
          if accept(entry) { return (entry, index) }
          passedOver(entry, index)
          if fallback == nil || entry.expiresAt ?? .distantFuture > fallback!.entry.expiresAt ?? .distantFuture {
            fallback = (entry, index)
          }
          continue
        }
        let took = started.duration(to: clock.now)
        let recovered = counters.withLock { counters in
          counters[index].misses += 1
          counters[index].lookupTime.record(took)
          return counters[index].answered()
        }
        if recovered { logRecovery(tier: index) }
        observe?(LayerLookupReport(tierIndex: index, layerName: tiers[index].name, outcome: .miss, duration: took))
      } catch {
        let took = started.duration(to: clock.now)
        counters.withLock { $0[index].lookupTime.record(took) }
        // A lookup cut short by a cancellation did not fail: it is not reported.
        if !(error is CancellationError) {
          observe?(
            LayerLookupReport(tierIndex: index, layerName: tiers[index].name, outcome: .failed(error), duration: took))
        }
        try handleFailure(error, tier: index, operation: .lookup, key: key)
        counters.withLock { $0[index].misses += 1 }
      }
    }
    return nil
  }

  /// Removes `key` from the layers in `range` unless a write overtook `token`, as a fill would
  /// write (see ``ChainRead/remove(skippingTop:excluding:)``). A layer that fails is recorded.
  fileprivate nonisolated func commitRemoval(
    of key: Key, from range: some Collection<Int> & Sendable, token: ReadToken<Key>
  ) async {
    guard let ticket = await coordinator.acquireCommit(token, kind: .fill) else { return }
    defer { coordinator.releaseWrite(ticket) }
    for index in range { await removeAfterFailure(key, from: index) }
  }

  /// Writes `entry` to the layers in `range` unless a write overtook `token` (or the task was
  /// cancelled while waiting for the key). Returns whether it wrote.
  fileprivate nonisolated func commit(
    _ entry: CacheEntry<Value>,
    for key: Key,
    to range: some Collection<Int> & Sendable,
    token: ReadToken<Key>,
    operation: LayerFailure.Operation,
    revalidating revalidated: CacheEntry<Value>? = nil
  ) async -> Bool {
    // A back-fill copies what a layer holds: it makes no read's value older, so it overtakes none
    // (a load that starts meanwhile still stores its newer value, after it).
    guard let ticket = await coordinator.acquireCommit(token, kind: operation == .backfill ? .copy : .fill) else {
      return false
    }
    defer { coordinator.releaseWrite(ticket) }
    // A commit never fails the read it writes back: its failures are recorded, not thrown.
    _ = await write(entry, for: key, to: range, operation: operation, propagating: false, revalidating: revalidated)
    return true
  }
}

extension CacheChain {
  // MARK: Tracing

  /// The tracer of the layer operations, when the chain's tracer asks for them.
  nonisolated var tracingLayers: CacheTracing? {
    followedTracer.value.flatMap { $0.tracesLayerOperations ? $0 : nil }
  }

  /// Runs `body`, an operation of layer `index` on `key`, in a span named `operation` when
  /// `tracing` is set (see ``CacheTracer/tracesLayerOperations``).
  nonisolated func traceLayer<T>(
    _ operation: String, tier index: Int, key: Key, _ tracing: CacheTracing?, _ body: (TracedSpan?) async throws -> T
  ) async rethrows -> T {
    guard let tracing else { return try await body(nil) }
    return try await tracing.span(operation) { span in
      span.set("cache.layer", tiers[index].name)
      span.set("cache.key", String(describing: key))
      return try await body(span)
    }
  }
}
