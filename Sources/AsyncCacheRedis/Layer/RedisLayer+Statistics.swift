import AsyncCache

extension RedisLayer {
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
    /// Times the circuit breaker opened: the first failures of outages (a probe that fails opens
    /// it again, and counts as a failed probe instead).
    public var circuitOpenings = 0
    /// Probes of an open circuit breaker that failed, opening it again.
    public var failedProbes = 0
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
    /// Entries found dead by tag (see ``RedisLayer/invalidate(tag:at:)``) that the layer's
    /// background clean-up deleted. A read that finds one dead hands it over and does not wait:
    /// the deletion runs later, on a connection of its own, and only if the key still holds
    /// that entry.
    public var deadEntriesDeleted = 0
    /// Deletions of dead entries that failed: the server could not be reached, or refused the
    /// script. They count here only, not in ``failures``, and do not open the layer's circuit
    /// breaker; the entries stay until read again, written over or expired.
    public var deadEntryDeletionsFailed = 0
    /// Replies read by their callers, on their own threads, without a hand-off to a connection's
    /// thread and back (Linux; see ``RedisLayer/Configuration-swift.struct/callerWaitLimit``).
    public var repliesReadByCallers = 0
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
      failedProbes: counters.failedProbes.load(ordering: .relaxed),
      discardedValues: counters.discardedValues.load(ordering: .relaxed),
      redirects: counters.redirects.load(ordering: .relaxed),
      topologyRefreshes: counters.topologyRefreshes.load(ordering: .relaxed),
      invalidationsPublished: counters.invalidationsPublished.load(ordering: .relaxed),
      invalidationsReceived: counters.invalidationsReceived.load(ordering: .relaxed),
      leasesGranted: counters.leasesGranted.load(ordering: .relaxed),
      leasesRenewed: counters.leasesRenewed.load(ordering: .relaxed),
      loadsAwaited: counters.loadsAwaited.load(ordering: .relaxed),
      fillsRefused: counters.fillsRefused.load(ordering: .relaxed),
      uncoordinatedLoads: counters.uncoordinatedLoads.load(ordering: .relaxed),
      deadEntriesDeleted: deadEntries.deleted.load(ordering: .relaxed),
      deadEntryDeletionsFailed: deadEntries.failed.load(ordering: .relaxed),
      repliesReadByCallers: counters.repliesReadByCallers.load(ordering: .relaxed))
  }
}
