/// Something a cache did: what ``LoadingCache/events(bufferingNewest:)`` and
/// ``MemoryLayer/events(bufferingNewest:)`` deliver.
///
/// Events describe work already done; they are delivered in the order they were produced by
/// one thread, and events from different threads interleave. An observer that falls behind
/// loses the oldest events it has not read, and is told so by ``dropped(count:)`` where they were.
public enum CacheEvent<Key: Hashable & Sendable>: DropReportingEvent {
  /// A request (``LoadingCache/value(for:)``, or one key of a bulk request) was answered by the
  /// top layer without a load; a stale value served at once included.
  case hit(key: Key)
  /// A request found nothing it could use in the top layer: it then joins or starts a load (or
  /// gets an error remembered by negative caching, see ``negativeHit(key:error:)``).
  case miss(key: Key)
  /// A load of `key` started: it asks the layers below the top, then the origin.
  case loadStarted(key: Key)
  /// A background refresh of `key` started, of a stale entry or of one read late in its
  /// lifetime (see ``LoadingCache/Configuration-swift.struct/refreshAhead``).
  case refreshStarted(key: Key)
  /// A load (or refresh) of `key` ended with a value from `source`, after `duration` on the
  /// cache's clock (waits for urgent work and retry delays included).
  case loadFinished(key: Key, source: LoadSource, duration: Duration)
  /// A load (or refresh) of `key` ended with `error`, after asking the origin `attempts` times
  /// (0 when it failed before reaching the origin, such as a layer's error), and after
  /// `duration`, retry delays included. A load abandoned by all its requests ends with
  /// `CancellationError`.
  ///
  /// Whether the error was fatal or the ``RetryPolicy`` ran out of attempts: compare `attempts`
  /// with ``RetryPolicy/maximumAttempts``, or ask the policy's ``RetryPolicy/classify``.
  case loadFailed(key: Key, error: any Error, attempts: Int, duration: Duration)
  /// Attempt `attempt` of a load of `key` failed with a transient error; the origin is asked
  /// again after `delay` (see ``RetryPolicy``).
  case retrying(key: Key, attempt: Int, error: any Error, delay: Duration)
  /// A load of `key` failed with `error`, and its requests got the stale value the layers hold
  /// instead (see ``LoadingCache/Configuration-swift.struct/staleIfError``).
  case servedStale(key: Key, error: any Error)
  /// A request for `key` waited `timeout`, its soft timeout, for a load and got the stale value
  /// the load found instead; the load goes on (see ``LoadTimeouts/soft``).
  case softTimeout(key: Key, timeout: Duration)
  /// A request for `key` waited `timeout`, its hard timeout, for a load and failed with
  /// ``AsyncCacheError/Code/timedOut`` (see ``LoadTimeouts/hard``).
  case hardTimeout(key: Key, timeout: Duration)
  /// A request for `key` got `error`, remembered by negative caching, without a load.
  case negativeHit(key: Key, error: any Error)
  /// The ``MemoryLayer`` at index `layer` of the chain (0 for a layer observed on its own) dropped
  /// or refused the entry for `key`, for `reason`.
  case eviction(key: Key, reason: EvictionReason, layer: Int)
  /// A layer of the chain failed (`key` is `nil` for a ``CacheChain/removeAll()``); reported
  /// whatever the layer's ``LayerFailurePolicy``, so also when the chain skipped the layer.
  case layerFailed(key: Key?, failure: LayerFailure)
  /// The observer fell behind and `count` events before this one were dropped from its buffer.
  case dropped(count: Int)
}

extension CacheEvent {
  /// ``dropped(count:)``: a cache's events carry no state to pass on.
  public static func dropped(count: Int, last: CacheEvent) -> CacheEvent { .dropped(count: count) }
}

/// Where a load found its value.
public enum LoadSource: Hashable, Sendable {
  /// The layer at this index of the chain, top first. A value that another process loaded for
  /// this one (a ``LoadCoordinator``'s ``LoadClaim/loadedElsewhere(_:)``) comes from the layer
  /// that coordinates the loads: it was read there, not asked of this process's origin.
  case layer(Int)
  /// The origin.
  case origin
  /// The origin, which said that the entry the cache held did not change (an ``EntryFetcher``
  /// answered ``FetchedEntry/notModified(metadata:timeToLive:)``): the value is the one held,
  /// kept for a new lifetime. Counted in ``LoadingCache/Statistics/revalidations``.
  case revalidated
}

extension CacheEvent: CustomStringConvertible {
  /// A short line naming the event, its key and its details, such as `loadFinished k from origin
  /// in 200ms`.
  public var description: String {
    switch self {
    case .hit(let key): "hit \(key)"
    case .miss(let key): "miss \(key)"
    case .loadStarted(let key): "loadStarted \(key)"
    case .refreshStarted(let key): "refreshStarted \(key)"
    case .loadFinished(let key, let source, let duration): "loadFinished \(key) from \(source) in \(duration.readable)"
    case .loadFailed(let key, let error, let attempts, let duration):
      "loadFailed \(key) after \(attempts) attempt\(attempts == 1 ? "" : "s") in \(duration.readable): \(error)"
    case .retrying(let key, let attempt, let error, let delay):
      "retrying \(key) after attempt \(attempt) in \(delay.readable): \(error)"
    case .servedStale(let key, let error): "servedStale \(key): \(error)"
    case .softTimeout(let key, let timeout): "softTimeout \(key) after \(timeout.readable): served stale"
    case .hardTimeout(let key, let timeout): "hardTimeout \(key) after \(timeout.readable)"
    case .negativeHit(let key, let error): "negativeHit \(key): \(error)"
    case .eviction(let key, let reason, let layer): "eviction \(key) from layer \(layer): \(reason)"
    case .layerFailed(let key, let failure): "layerFailed \(key.map { "\($0)" } ?? "every key"): \(failure)"
    case .dropped(let count): "dropped \(count)"
    }
  }
}

extension LoadSource: CustomStringConvertible {
  public var description: String {
    switch self {
    case .layer(let index): "layer \(index)"
    case .origin: "origin"
    case .revalidated: "origin (not modified)"
    }
  }
}
