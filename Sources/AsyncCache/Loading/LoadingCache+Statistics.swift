extension LoadingCache {
  /// Requests, loads, load times, freshness and eviction counters, per layer and for the whole
  /// cache, and the size of the in-flight table. Safe from any context. O(layers + segments of
  /// the chain's memory layers).
  public var statistics: Statistics {
    // Read before the top layer's counter: a declined hit counts there first, so it can only be
    // seen there and not yet here (a brief overcount), never the other way round.
    // The snapshot's histogram gets storage of its own, allocated before the lock: were the
    // storage shared, the next load would copy it while holding the lock.
    var loadTime = LoadTimeHistogram.allocated()
    let table = loadTable.snapshot(into: &loadTime)
    let counters = table.counters
    // Requests the top layer answered without a load: a memory layer counts them with its hits.
    let topHits = (front?.requestHits ?? 0) + synchronousHits.load(ordering: .relaxed)
    var layers = chain.statistics.tiers.enumerated().map { index, tier in
      LayerStatistics(
        name: tier.name, answered: index < counters.layerAnswersByTier.count ? counters.layerAnswersByTier[index] : 0,
        hits: tier.hits, misses: tier.misses, failures: tier.failures, lookupTime: tier.lookupTime,
        evictions: EvictionCounts())
    }
    for (memory, tier) in wiring.memoryLayers {
      // The counters alone: `memory.statistics` would also compute the layer's hit-ratio curve.
      layers[tier].evictions = layers[tier].evictions + memory.store.totals.evictions
    }
    // The top layer counted hits of entries the cache would not serve; those requests loaded.
    let answeredAtTop = Swift.max(topHits - counters.declinedTopHits, 0)
    layers[0].hits += answeredAtTop
    layers[0].answered += answeredAtTop
    return Statistics(
      hits: answeredAtTop + counters.layerAnswers,
      misses: counters.originAnswers,
      topLayerHits: answeredAtTop,
      lowerLayerHits: counters.layerAnswers,
      loads: counters.loads,
      originLoads: counters.originLoads,
      coalescedRequests: counters.coalesced,
      loadFailures: counters.failures,
      loadTime: counters.loadTime,
      retries: counters.retries,
      cancelledRequests: counters.cancelledWaiters,
      cancelledLoads: counters.cancelledLoads,
      loadsInFlight: table.loadsInFlight,
      requestsWaiting: table.requestsWaiting,
      urgentLoadsInFlight: table.urgentLoads,
      loadsWaitingForUrgentWork: table.loadsAtGate,
      refreshes: counters.refreshes,
      refreshesCoalesced: counters.refreshesCoalesced,
      refreshFailures: counters.refreshFailures,
      revalidations: counters.revalidations,
      staleServed: counters.staleServed,
      staleServedOnError: counters.staleServedOnError,
      softTimeouts: counters.softTimeouts,
      hardTimeouts: counters.hardTimeouts,
      negativeHits: counters.negativeHits,
      negativeEntries: table.negativeEntries,
      evictions: layers.reduce(EvictionCounts()) { $0 + $1.evictions },
      layers: layers
    )
  }

  /// A snapshot of a loading cache's counters, for the whole cache and per layer.
  ///
  /// A *request* is a call of ``LoadingCache/value(for:)`` or one key of a bulk request;
  /// ``LoadingCache/cachedValue(for:)`` peeks and prefetches are not requests. Each request is a
  /// hit or a miss once it is answered; a request answered by negative caching is neither (it is
  /// a ``negativeHits``), nor is one cancelled while it waited, nor one that stopped waiting at
  /// a timeout (``softTimeouts``, ``hardTimeouts``).
  public struct Statistics: Sendable, Hashable {
    /// Requests answered by a layer: by the top layer without a load (stale values served at
    /// once included), or by a load that found the value in a layer below (or kept a stale one
    /// when the origin failed).
    public var hits: Int
    /// Requests answered by a load that did not find the value in a layer: with the origin's
    /// value, or with an error (the origin's, or a failing layer's).
    public var misses: Int
    /// The share of requests that were hits, from 0 to 1; 0 before any request.
    public var hitRatio: Double { hits + misses == 0 ? 0 : Double(hits) / Double(hits + misses) }
    /// The hits the top layer answered at once, without a load (stale values served at once
    /// included): the cheap ones. ``hits`` is this plus ``lowerLayerHits``.
    public var topLayerHits: Int
    /// The hits answered by a load that found the value in a layer below the top (or in the top
    /// layer, written there since the request missed it): after a restart, the requests a
    /// persistent layer answers. Per layer: ``LayerStatistics/answered``.
    public var lowerLayerHits: Int
    /// Loads started (each asks the layers below the top and, on a miss there, the origin).
    public var loads: Int
    /// Loads that asked the origin at least once (revalidations and failed calls included); the
    /// rest were answered by a layer, or failed before the origin (a layer's failure under
    /// ``LayerFailurePolicy/propagate``, a cancellation).
    public var originLoads: Int
    /// Requests that joined a load already in flight instead of starting one.
    public var coalescedRequests: Int
    /// Loads that ended with an error.
    public var loadFailures: Int
    /// How long loads took, from start to end on the cache's clock (waits for urgent work and
    /// retry delays included); a load abandoned by all its requests is not recorded.
    public var loadTime: LoadTimeHistogram
    /// Origin calls made again after a transient failure (see ``RetryPolicy``): one per retry
    /// of a load or of a batch.
    public var retries: Int
    /// Requests whose task was cancelled while they waited.
    public var cancelledRequests: Int
    /// Loads cancelled because their last request left.
    public var cancelledLoads: Int
    /// Loads running now (joinable or not).
    public var loadsInFlight: Int
    /// Requests (and prefetches) waiting now.
    public var requestsWaiting: Int
    /// Loads in flight that a request waits for (see ``LoadingCache`` on urgent work).
    public var urgentLoadsInFlight: Int
    /// Background loads holding back from the origin until the urgent work ends.
    public var loadsWaitingForUrgentWork: Int
    /// Background refreshes started, of stale entries and of entries read late in their
    /// lifetime (``Configuration-swift.struct/refreshAhead``); each is also counted in ``loads``.
    public var refreshes: Int
    /// Refreshes not started because a load of the key was in flight already.
    public var refreshesCoalesced: Int
    /// Refreshes that failed; each is also counted in ``loadFailures``.
    public var refreshFailures: Int
    /// Loads (refreshes included) that ended with the origin saying the entry the cache held
    /// did not change (an ``EntryFetcher``'s ``FetchedEntry/notModified(metadata:timeToLive:)``):
    /// the entry was kept for a new lifetime without its value being sent again. Each is also
    /// counted in ``loads``, and its requests as misses (the origin answered them).
    public var revalidations: Int
    /// Stale values served at once (stale-while-revalidate): each request the top layer answered
    /// with one, and each load that found one below it.
    public var staleServed: Int
    /// Loads that failed and kept a stale value, answering their requests with it instead of the
    /// error (stale-if-error); refreshes included. Each is also counted in ``loadFailures``.
    public var staleServedOnError: Int
    /// Requests that waited their soft timeout for a load and got a stale value instead (see
    /// ``LoadTimeouts/soft``).
    public var softTimeouts: Int
    /// Requests that waited their hard timeout for a load and failed with
    /// ``AsyncCacheError/Code/timedOut`` (see ``LoadTimeouts/hard``).
    public var hardTimeouts: Int
    /// Requests (each key of a bulk request, and prefetches) answered with an error remembered by
    /// negative caching, without a load.
    public var negativeHits: Int
    /// Errors remembered by negative caching now (expired ones until they are found).
    public var negativeEntries: Int
    /// Entries evicted by the ``MemoryLayer``s of the chain (nested chains' included), by reason;
    /// other layers report theirs in their own statistics.
    public var evictions: EvictionCounts
    /// Each layer of the chain, top first.
    public var layers: [LayerStatistics]
  }

  /// A snapshot of one layer's counters, as the cache sees it.
  public struct LayerStatistics: Sendable, Hashable {
    /// The layer's name in the chain.
    public var name: String
    /// Requests the layer answered: for the top layer, those it answered at once
    /// (``Statistics-swift.struct/topLayerHits``) and those a load found there; for a layer below,
    /// those a load found there (a coalesced request counts with its load). Over all layers, the
    /// cache's ``Statistics-swift.struct/hits``.
    public var answered: Int
    /// Lookups the layer answered: the chain's, during loads, and for the top layer also the
    /// requests it answered without a load. A top ``MemoryLayer`` shared by several loading
    /// caches counts the request hits of all of them.
    public var hits: Int
    /// The chain's lookups during loads that fell through the layer.
    public var misses: Int
    /// Failures of the layer, whatever its ``LayerFailurePolicy``.
    public var failures: Int
    /// How long the layer took to answer the chain's lookups during loads (hits, misses and
    /// failures alike), on the cache's clock. The top layer's hits without a load are not timed:
    /// they never suspend, and two clock reads would double the cost of a memory hit.
    public var lookupTime: LoadTimeHistogram
    /// Entries the layer evicted, by reason, if it is a ``MemoryLayer``; none otherwise.
    public var evictions: EvictionCounts
  }
}
