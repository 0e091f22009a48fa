// What a chain logs, and at which level (the <doc:CacheLogging> article has the table). Lookups that
// succeed, hits included, log nothing: only failures and recoveries do.
extension CacheChain {
  private static var component: String { "CacheChain" }

  /// Logs a layer's failure: `.warning` when the chain goes on without the layer (a skipped
  /// layer, a failed transform, a failed back-fill or write-back), since nothing else reports it;
  /// `.debug` when the error reaches the caller, whose code reports it; `.debug` for a
  /// cancellation, which is not a fault of the layer. A layer that keeps failing (`repeated`:
  /// it has not answered a lookup since it last failed) logs its next failures at `.debug`, so
  /// that a layer that is down logs one warning, not one per request, whatever kind of failure
  /// (a lookup, a write-back, the removal after it) comes first. `note` replaces the usual
  /// sentence after the layer's name.
  nonisolated func logFailure(_ failure: LayerFailure, key: Key?, thrown: Bool, repeated: Bool, note: String? = nil) {
    let logger = followedLogger.value
    let level: CacheLogLevel = thrown || repeated || failure.error is CancellationError ? .debug : .warning
    let what =
      note
      ?? "failed during \(failure.operation.rawValue); "
      + (thrown ? "the error is thrown to the caller" : "the chain goes on without it")
    logger.log(
      level,
      "layer \(failure.tierIndex) (\(failure.layerName)) \(what)",
      metadata: Self.failureMetadata(failure, key: key),
      source: Self.component)
  }

  /// Logs at `.info` that a layer the chain went on without answered a lookup again.
  nonisolated func logRecovery(tier index: Int) {
    followedLogger.value.info(
      "layer \(index) (\(tiers[index].name)) answers lookups again",
      metadata: ["layer": tiers[index].name, "tier": "\(index)"],
      source: Self.component)
  }

  /// Removes `key` from the layer at `index` after a write failed, so that the layer cannot serve
  /// an older value. A failure of the removal is a failure of the layer like any other: counted,
  /// reported, and logged at `.warning` once per outage (the layer may then serve the older
  /// value until it expires), at `.debug` while the layer keeps failing.
  nonisolated func removeAfterFailure(_ key: Key, from index: Int) async {
    do {
      try await tiers[index].layer.removeValue(for: key)
    } catch {
      record(
        LayerFailure(tierIndex: index, layerName: tiers[index].name, operation: .remove, error: error), key: key,
        thrown: false,
        note: "could not remove the key after a failed write; it may serve an older value until that expires")
    }
  }

  private static func failureMetadata(_ failure: LayerFailure, key: Key?) -> [String: String] {
    var metadata = [
      "layer": failure.layerName, "tier": "\(failure.tierIndex)", "operation": failure.operation.rawValue,
      "error": CacheLogger.describe(failure.error),
    ]
    if let key { metadata["key"] = CacheLogger.describe(key) }
    return metadata
  }
}
