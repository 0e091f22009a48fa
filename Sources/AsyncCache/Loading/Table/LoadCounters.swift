/// Counters kept with the in-flight table.
@usableFromInline
struct LoadCounters: Sendable {
  @usableFromInline var loads = 0
  @usableFromInline var coalesced = 0
  @usableFromInline var failures = 0
  @usableFromInline var cancelledWaiters = 0
  @usableFromInline var cancelledLoads = 0
  @usableFromInline var refreshes = 0
  @usableFromInline var refreshesCoalesced = 0
  @usableFromInline var refreshFailures = 0
  /// Loads that ended with the origin saying the entry held did not change.
  @usableFromInline var revalidations = 0
  @usableFromInline var staleServed = 0
  @usableFromInline var staleServedOnError = 0
  @usableFromInline var negativeHits = 0
  /// Requests answered by a load that found the value in a layer.
  @usableFromInline var layerAnswers = 0
  /// The same, by the index of the layer that had the value (as long as the deepest layer that
  /// answered a load, plus one).
  @usableFromInline var layerAnswersByTier: [Int] = []
  /// Loads that asked the origin at least once (revalidations and failed calls included).
  @usableFromInline var originLoads = 0
  /// Requests answered by a load that asked the origin (with its value or its error).
  @usableFromInline var originAnswers = 0
  /// Request hits the top memory layer counted for entries the cache would not serve.
  @usableFromInline var declinedTopHits = 0
  @usableFromInline var retries = 0
  /// Requests answered with a stale value at their soft timeout.
  @usableFromInline var softTimeouts = 0
  /// Requests that failed at their hard timeout.
  @usableFromInline var hardTimeouts = 0
  @usableFromInline var loadTime = LoadTimeHistogram()

  @inlinable
  init() {}
}
