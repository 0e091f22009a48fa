import Synchronization

/// The layer's counters, shared with its pool; relaxed atomics, read together for statistics.
final class RedisCounters: Sendable {
  let hits = Atomic<Int>(0)
  let misses = Atomic<Int>(0)
  let writes = Atomic<Int>(0)
  let removals = Atomic<Int>(0)
  let failures = Atomic<Int>(0)
  let timeouts = Atomic<Int>(0)
  let rejected = Atomic<Int>(0)
  let connectionsOpened = Atomic<Int>(0)
  let connectionsDiscarded = Atomic<Int>(0)
  let circuitOpenings = Atomic<Int>(0)
  let failedProbes = Atomic<Int>(0)
  let discardedValues = Atomic<Int>(0)
  let redirects = Atomic<Int>(0)
  let topologyRefreshes = Atomic<Int>(0)
  let invalidationsPublished = Atomic<Int>(0)
  let invalidationsReceived = Atomic<Int>(0)
  let leasesGranted = Atomic<Int>(0)
  let leasesRenewed = Atomic<Int>(0)
  let loadsAwaited = Atomic<Int>(0)
  let fillsRefused = Atomic<Int>(0)
  let uncoordinatedLoads = Atomic<Int>(0)
  let repliesReadByCallers = Atomic<Int>(0)
}
