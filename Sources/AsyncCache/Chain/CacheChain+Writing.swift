// How a chain writes to its layers and what it does when one fails: the writes of inserts,
// loads and back-fills, removals everywhere, and the failure policies (also used by the reads).
extension CacheChain {
  /// Writes `entry` to the layers in `range`, top-down. A layer that fails is recorded and the
  /// key is removed from it, so it cannot serve an older value later. If its failures propagate
  /// (and `propagating` is set) the key is removed from every layer instead, and the error to
  /// throw is returned. With `revalidating` (an entry revalidated, whose value `entry` has), a
  /// layer that still holds that entry changes it in place instead.
  nonisolated func write(
    _ entry: CacheEntry<Value>,
    for key: Key,
    to range: some Collection<Int> & Sendable,
    operation: LayerFailure.Operation,
    propagating: Bool,
    revalidating revalidated: CacheEntry<Value>? = nil
  ) async -> (any Error)? {
    let tracing = tracingLayers
    for index in range {
      do {
        let layer = tiers[index].layer
        try await traceLayer("cache.layer.write", tier: index, key: key, tracing) { _ in
          if let revalidated, try await layer.revalidate(entry, for: key, replacing: revalidated) { return }
          try await layer.insert(entry, for: key)
        }
      } catch {
        let disposition = Self.disposition(of: error, policy: tiers[index].failurePolicy)
        let thrown = propagating && disposition != .skip
        record(
          LayerFailure(tierIndex: index, layerName: tiers[index].name, operation: operation, error: error),
          key: key, thrown: thrown)
        if thrown {
          // Leave no layer with a value the others do not have.
          for other in tiers.indices { await removeAfterFailure(key, from: other) }
          return disposition == .passThrough ? error : wrap(error, tier: index, operation: operation, key: key)
        }
        await removeAfterFailure(key, from: index)
      }
    }
    return nil
  }

  nonisolated func removeEverywhere(
    operation: LayerFailure.Operation,
    key: Key?,
    _ body: (any AsyncCacheLayer<Key, Value>) async throws -> Void
  ) async throws {
    var firstError: (any Error)?
    for index in tiers.indices {
      do {
        try await body(tiers[index].layer)
      } catch {
        let disposition = Self.disposition(of: error, policy: tiers[index].failurePolicy)
        record(
          LayerFailure(tierIndex: index, layerName: tiers[index].name, operation: operation, error: error),
          key: key, thrown: firstError == nil && disposition != .skip)
        if firstError == nil, disposition != .skip {
          firstError = disposition == .passThrough ? error : wrap(error, tier: index, operation: operation, key: nil)
        }
      }
    }
    if let firstError { throw firstError }
  }

  /// Records a lookup failure and throws if the policy (or cancellation) says so.
  nonisolated func handleFailure(
    _ error: any Error,
    tier index: Int,
    operation: LayerFailure.Operation,
    key: Key
  ) throws {
    if error is CancellationError { throw error }
    let disposition = Self.disposition(of: error, policy: tiers[index].failurePolicy)
    record(
      LayerFailure(tierIndex: index, layerName: tiers[index].name, operation: operation, error: error),
      key: key, thrown: disposition != .skip)
    switch disposition {
    case .skip: return
    case .passThrough: throw error
    case .wrap: throw wrap(error, tier: index, operation: operation, key: key)
    }
  }

  /// What the chain does with a layer's error.
  private enum Disposition {
    /// Go on without the layer.
    case skip
    /// Throw the error as it is.
    case passThrough
    /// Throw it as a ``AsyncCacheError/Code/layerFailure``.
    case wrap
  }

  /// A failed transform skips its layer and a failed condition reaches the caller, whatever the
  /// layer's policy; other errors follow the policy.
  private static func disposition(of error: any Error, policy: LayerFailurePolicy) -> Disposition {
    if error is CancellationError { return .passThrough }
    if let error = error as? AsyncCacheError {
      if error.code == .transformFailed { return .skip }
      if error.code == .conditionFailed { return .passThrough }
    }
    return policy == .propagate ? .wrap : .skip
  }

  /// Counts `failure`, reports it (to `onFailure` and the chain's events) and logs it; `thrown`
  /// tells whether the caller gets the error, and `note`, if given, says what the failure means
  /// in the log instead of the usual sentence.
  nonisolated func record(_ failure: LayerFailure, key: Key?, thrown: Bool, note: String? = nil) {
    let repeated = counters.withLock { counters in
      counters[failure.tierIndex].failures += 1
      counters[failure.tierIndex].lastFailure = failure
      let repeated = counters[failure.tierIndex].isFailing
      if !thrown, !(failure.error is CancellationError) { counters[failure.tierIndex].isFailing = true }
      return repeated
    }
    if eventHub.isObserved { eventHub.emit(.layerFailed(key: key, failure: failure)) }
    logFailure(failure, key: key, thrown: thrown, repeated: repeated, note: note)
  }

  nonisolated func wrap(
    _ error: any Error,
    tier index: Int,
    operation: LayerFailure.Operation,
    key: Key?
  ) -> any Error {
    if error is CancellationError { return error }
    var subject = ""
    if let key {
      let described = String(describing: key)
      subject = " for key \(described.count > 120 ? described.prefix(120) + "…" : described)"
    }
    return AsyncCacheError(
      code: .layerFailure,
      message: "layer \(index) (\(tiers[index].name)) of the chain failed during \(operation.rawValue)\(subject)",
      underlying: error
    )
  }
}
