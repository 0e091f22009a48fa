// What a loading cache logs, and at which level (the <doc:CacheLogging> article has the table). Every
// helper runs once per load or per retry, never on a hit, and builds nothing when the logger is
// disabled: the messages and metadata are autoclosures.
extension LoadingCache {
  private static var component: String { "LoadingCache" }

  /// `.trace`: a load started (the key missed the top layer and no load of it was in flight).
  func logLoadStarted(_ key: Key) {
    configuration.logger.trace(
      "load started", metadata: ["key": CacheLogger.describe(key)], source: Self.component)
  }

  /// `.trace`: the loads of a batch started, one record per key.
  func logLoadsStarted(_ keys: some Sequence<Key>) {
    guard configuration.logger.isEnabled(for: .trace) else { return }
    for key in keys { logLoadStarted(key) }
  }

  /// `.debug`: a load ended, with where its value came from or its error; `.trace` when it was
  /// cancelled because its last request left. A failure reaches every request waiting for the
  /// load, whose code decides how loud it is: an origin's "not found" is normal for many apps.
  func logLoadFinished(_ key: Key, with result: Result<(Value, LoadSource), any Error>) {
    let logger = configuration.logger
    guard logger.isEnabled else { return }
    switch result {
    case .success((_, let source)):
      logger.debug(
        "load finished", metadata: ["key": CacheLogger.describe(key), "from": describe(source)],
        source: Self.component)
    case .failure(let error) where error is CancellationError:
      logger.trace("load cancelled", metadata: ["key": CacheLogger.describe(key)], source: Self.component)
    case .failure(let error):
      logger.debug(
        "load failed", metadata: ["key": CacheLogger.describe(key), "error": CacheLogger.describe(error)],
        source: Self.component)
    }
  }

  /// `.info`: the origin failed with a transient error and is asked again after `delay`.
  func logRetry(of keys: @autoclosure () -> [Key], attempt: Int, error: any Error, delay: Duration) {
    configuration.logger.info(
      "origin failed; retrying",
      metadata: Self.keyMetadata(keys()).merging(
        ["attempt": "\(attempt)", "delay": delay.readable, "error": CacheLogger.describe(error)]
      ) { $1 },
      source: Self.component)
  }

  /// `.notice`: the origin was given up on after retries (a failure at the first attempt, with
  /// no retry, is the load's failure, logged at `.debug`).
  func logGivingUp(on keys: @autoclosure () -> [Key], attempts: Int, error: any Error, isFatal: Bool) {
    guard attempts > 1 else { return }
    configuration.logger.notice(
      isFatal
        ? "origin failed with a fatal error after \(attempts) attempts; giving up"
        : "origin failed \(attempts) times; no attempts left",
      metadata: Self.keyMetadata(keys()).merging(
        ["attempts": "\(attempts)", "error": CacheLogger.describe(error), "fatal": "\(isFatal)"]
      ) { $1 },
      source: Self.component)
  }

  /// `.notice`: a load failed, and its requests get the stale value instead (stale-if-error).
  func logServingStale(_ key: Key, error: any Error) {
    configuration.logger.notice(
      "load failed; serving the stale value",
      metadata: ["key": CacheLogger.describe(key), "error": CacheLogger.describe(error)],
      source: Self.component)
  }

  /// `.notice`: a request waited its soft timeout for a load, and gets the stale value instead.
  func logSoftTimeout(_ key: Key, after timeout: Duration) {
    configuration.logger.notice(
      "load slower than the soft timeout; serving the stale value",
      metadata: ["key": CacheLogger.describe(key), "timeout": timeout.readable],
      source: Self.component)
  }

  /// `.warning`: a request waited its hard timeout for a load, and fails.
  func logHardTimeout(_ key: Key, after timeout: Duration) {
    configuration.logger.warning(
      "load slower than the hard timeout; the request fails",
      metadata: ["key": CacheLogger.describe(key), "timeout": timeout.readable],
      source: Self.component)
  }

  /// Where a load found its value, for logs: `origin`, or the layer's tier name.
  private func describe(_ source: LoadSource) -> String {
    switch source {
    case .origin: "origin"
    case .revalidated: "origin (not modified)"
    case .layer(let tier): chain.tiers[tier].name
    }
  }

  /// `key` for one key; `keys` (the count and the first few) for a batch.
  static func keyMetadata(_ keys: [Key]) -> [String: String] {
    if keys.count == 1 { return ["key": CacheLogger.describe(keys[0])] }
    let shown = keys.prefix(5).map { CacheLogger.describe($0, limit: 60) }.joined(separator: ", ")
    return ["keys": "\(keys.count): \(shown)\(keys.count > 5 ? ", …" : "")"]
  }

  /// `.notice`: the cache closed (``close()``): the loads in flight it waited for, those
  /// cancelled, the prefetchers it stopped, and its layers closed; `.error` when a layer failed
  /// to close (the chain logged which).
  func logClosed(after elapsed: Duration, loads: Int, cancelled: Int, prefetchers: Int, failure: (any Error)?) {
    let logger = configuration.logger
    guard logger.isEnabled(for: failure == nil ? .notice : .error) else { return }
    var done: [String] = []
    done.append(
      loads == 0
        ? "no loads in flight"
        : "waited for \(loads) \(loads == 1 ? "load" : "loads") in flight (\(cancelled) cancelled)")
    if prefetchers > 0 { done.append("stopped \(prefetchers) \(prefetchers == 1 ? "prefetcher" : "prefetchers")") }
    let layers = chain.tiers.count
    done.append(
      failure == nil
        ? "closed \(layers) \(layers == 1 ? "layer" : "layers")"
        : "closed \(layers) \(layers == 1 ? "layer" : "layers"); the first that failed: \(CacheLogger.describe(failure!))"
    )
    var metadata = [
      "elapsed": elapsed.readable, "loads": "\(loads)", "cancelled": "\(cancelled)", "prefetchers": "\(prefetchers)",
      "layers": "\(layers)",
    ]
    if let failure { metadata["error"] = CacheLogger.describe(failure) }
    logger.log(
      failure == nil ? .notice : .error, "closed in \(elapsed.readable): \(done.joined(separator: ", "))",
      metadata: metadata, source: Self.component)
  }
}
