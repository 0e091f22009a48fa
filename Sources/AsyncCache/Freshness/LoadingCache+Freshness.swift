// Stale-while-revalidate, stale-if-error, refresh ahead and negative caching: how a loading cache
// reads the expiry of what its layers hold (see `FreshnessRules` and <doc:FreshnessAndStatistics>).
extension LoadingCache {
  /// The value the top ``MemoryLayer`` holds for `key` if it may be served now: fresh, or stale
  /// within stale-while-revalidate. A stale value, or one read late in its lifetime when a
  /// refresh ahead is configured, is refreshed in the background (once, however many requests
  /// read it). `nil` when the top layer is not a memory layer. A peek's (``cachedValue(for:)``):
  /// the hit is not counted as a request's (``topValue(for:)`` reads a request's).
  @inlinable
  func servableValue(for key: Key) -> Value? {
    guard let (value, expiry, now) = front?.timedValue(for: key, countingRequest: false) else {
      return nil
    }
    // Nearly every hit: fresh, with no refresh or extension due, told by one comparison.
    if FreshnessRules.isPlainlyFresh(expiry: expiry, now: now, margin: freshMargin) { return value }
    return servable(value, expiry: expiry, now: now, for: key, countingRequest: false)
  }

  /// `value`, which the top layer holds for `key` until `expiry` and returned at `now`, if it
  /// may be served by its full freshness state; starts the refresh or the extension that state
  /// asks for (see ``servableValue(for:)``). Never inlined: a hit that is plainly fresh does
  /// not need it, and with it inlined ``topValue(for:)`` was too large to be inlined itself, so
  /// every hit paid a call more.
  ///
  /// - Parameter countingRequest: Whether the layer counted the hit as a request's: a declined
  ///   one is then counted as a miss of the request.
  @inlinable
  @inline(never)
  func servable(_ value: Value, expiry: Int64, now: Int64, for key: Key, countingRequest: Bool) -> Value? {
    var state = freshness.state(expiry: expiry, now: now, lead: { dueLead(for: key, value, share: $0) })
    // Served stale only within the limits of the entry's metadata, read for that case alone.
    if state == .stale {
      state = freshness.state(expiry: expiry, now: now, lead: { _ in nil }, limits: topStaleLimits(of: key))
    }
    switch state {
    case .fresh:
      return value
    case .refreshDue:
      refresh(key, servedStale: false)
      return value
    case .extendDue:
      extend(key, value: value, expiry: expiry)
      return value
    case .stale:
      refresh(key, servedStale: true)
      return value
    case .staleIfError, .expired:
      // The layer counted a request hit, but the request loads: it is a miss.
      if countingRequest { loadTable.countDeclinedTopHit() }
      return nil
    }
  }

  /// Whether the top layer has a value for `key` that a request would be served at once: a
  /// prefetch's check. Unlike ``cachedValue(for:)`` it starts no refresh and extends nothing, so
  /// that a prefetch does no work outside its prefetcher's limit (a stale value within
  /// stale-while-revalidate is refreshed when a request reads it).
  func hasServableTopValue(for key: Key) -> Bool {
    guard checksFreshness else { return cachedValue(for: key) != nil }
    guard let (value, expiry, now) = front?.timedValue(for: key, countingRequest: false) else { return false }
    var state = freshness.state(expiry: expiry, now: now, lifetime: { self.lifetime(of: key, value) })
    if state == .stale {
      state = freshness.state(expiry: expiry, now: now, lead: { _ in nil }, limits: topStaleLimits(of: key))
    }
    return switch state {
    case .fresh, .extendDue, .refreshDue, .stale: true
    case .staleIfError, .expired: false
    }
  }

  /// The limits the metadata of the top layer's entry for `key` puts on serving it stale (see
  /// ``EntryMetadata/staleWhileRevalidateLimit``): read only for an entry that is not plainly
  /// fresh, without changing its recency.
  @usableFromInline
  func topStaleLimits(of key: Key) -> FreshnessRules.StaleLimits {
    guard let metadata = front?.store.metadataWithoutRecency(of: key) else { return .none }
    return FreshnessRules.StaleLimits(metadata)
  }

  /// Extends the top layer's entry for `key`, which expires at `expiry`, to a full lifetime from
  /// now (sliding expiry), and then the layers below in the background. Of concurrent reads,
  /// one extends; a write since the read wins (the entry's expiry changed, or the read token the
  /// layers below are written under is overtaken).
  ///
  /// The hit decided with the layer's coarse time; the new expiry is reckoned from the exact
  /// time (read here, once per extension), so that an extended entry gets its full lifetime.
  @usableFromInline
  func extend(_ key: Key, value: Value, expiry: Int64) {
    guard let front, let lifetime = lifetime(of: key, value) else { return }
    var extended = CacheInstant(nanosecondsSince1970: expiry)
    // By half a lifetime at least: at most one extension per key per half lifetime, even when
    // the top layer's own time-to-live keeps cutting entries shorter than their lifetime.
    let target = front.extendedExpiry(
      from: expiry,
      to: { now in
        extended = freshness.expiry(now: now, lifetime: lifetime)
        return extended
      },
      minimumGain: lifetime.saturatingNanoseconds / 2)
    guard let target else { return }
    guard chain.tiers.count > 1 else {
      _ = front.moveExpiry(of: key, from: expiry, to: target)
      return
    }
    // Begun before the top layer moves: a write that ends after that overtakes it.
    let read = ChainRead(of: key, in: chain)
    // What the top layer holds, read with its move: a write with the same expiry since the hit
    // (value and metadata of another version) is copied as it is, never mixed with the value read.
    guard let moved = front.moveExpiry(of: key, from: expiry, to: target) else { return read.end() }
    read.copyBelowTopInBackground(CacheEntry(moved.value, expiresAt: extended, metadata: moved.metadata))
  }

  /// Ends `read`, which found `entry` for `key` in layer `tier` in `state`, by copying it into
  /// the layers above (the top one too unless `skippingTop`); returns the entry the load answers
  /// with. With sliding expiry, an entry due for it is extended to a full lifetime from now and
  /// stored in every layer, its own included.
  func copy(
    _ entry: CacheEntry<Value>, in state: FreshnessRules.State, foundIn tier: Int, skippingTop: Bool = false,
    ending read: consuming ChainRead<Key, Value>
  ) async -> CacheEntry<Value> {
    guard state == .extendDue, let lifetime = lifetime(of: read.key, entry.value) else {
      await read.copy(entry, foundIn: tier, skippingTop: skippingTop)
      return entry
    }
    let extended = CacheEntry(
      entry.value, expiresAt: freshness.expiry(now: configuration.clock.now, lifetime: lifetime),
      metadata: entry.metadata)
    await read.copy(extended, foundIn: tier, skippingTop: skippingTop, everywhere: true)
    return extended
  }

  /// The fresh time left at which a refresh ahead or an extension of `value` for `key` falls
  /// due, for the rules' `share` (see ``FreshnessRules/lead(lifetime:share:)``); `nil` when it
  /// has no lifetime. Read on hits: reckoned once when every value has the configured lifetime.
  @inlinable
  func dueLead(for key: Key, _ value: Value, share: Double) -> Int64? {
    switch configuredLead {
    case .fixed(let lead): lead
    case .none: nil
    case .perValue: lifetime(of: key, value).map { freshness.lead(lifetime: $0.saturatingNanoseconds, share: share) }
    }
  }

  /// The lifetime the configuration gives `value` for `key`, before jitter; `nil` for none.
  @usableFromInline
  func lifetime(of key: Key, _ value: Value) -> Duration? {
    if let lifetime = configuration.timeToLiveForValue { return lifetime(key, value) }
    return configuration.timeToLive
  }

  /// Starts a background refresh of `key`, unless a load of it is in flight; counts a stale
  /// value served when `servedStale`.
  @usableFromInline
  func refresh(_ key: Key, servedStale: Bool) {
    loadTable.refresh(key, servedStale: servedStale)
  }

  /// A stale entry a load passed over (the one expiring last), with the index of its layer: the
  /// answer if the load fails (stale-if-error), or when a request's soft timeout passes.
  typealias Fallback = LoadTable<Key, Value>.Stale

  /// Whether `entry` may still be served at `now` instead of waiting for a load: it has not
  /// expired past its grace (stale-if-error), nor past what its metadata allows. Its freshness
  /// state but ``FreshnessRules/State/expired``, told without its lifetime.
  func isServable(_ entry: CacheEntry<Value>, at now: CacheInstant) -> Bool {
    freshness.state(of: entry, at: now, lifetime: { nil }) != .expired
  }

  /// Looks `key` up for a load: the entry it may answer with, its tier and state. Without
  /// freshness rules the first entry is the answer; with them, a request's load takes the first
  /// entry that may be served now (fresh, or stale within stale-while-revalidate), and a
  /// refresh only a fresh one. A stale entry passed over is left in `fallback`, also when a
  /// layer below then fails the lookup, and is offered at once to the requests of load `id`
  /// whose soft timeout passes.
  func locateForLoad(
    _ key: Key, load id: UInt64, isRefresh: Bool, fallback: inout Fallback?
  ) async throws -> (entry: CacheEntry<Value>, tier: Int, state: FreshnessRules.State)? {
    let checksFreshness = checksFreshness
    let clock = configuration.clock
    // The state of the entry taken, as decided: read again, the clock may have moved on.
    var accepted = FreshnessRules.State.fresh
    let found = try await chain.locate(
      key, fallback: &fallback,
      passedOver: { entry, tier in offerStale((entry, tier), for: id, key: key) },
      accepting: { entry in
        // Without freshness rules the first entry is the answer.
        guard checksFreshness else { return true }
        let state = freshness.state(of: entry, at: clock.now) { lifetime(of: key, entry.value) }
        accepted = state
        return switch state {
        case .fresh, .extendDue: true
        case .refreshDue, .stale: !isRefresh
        case .staleIfError, .expired: false
        }
      })
    return found.map { ($0.entry, $0.tier, accepted) }
  }

  /// The stale value to answer a failed load of `key` with, if `fallback` is stale and has not
  /// expired (stale-if-error), and where it came from. `nil` when the load was cancelled (no one waits for
  /// it), or there is no stale fallback (a refresh ahead that failed leaves its fresh entry be).
  func staleValue(
    after error: any Error, fallback: Fallback?, key: Key
  ) -> (Value, LoadSource)? {
    guard let fallback, !(error is CancellationError) else { return nil }
    let entry = fallback.entry
    switch freshness.state(of: entry, at: configuration.clock.now, lifetime: { lifetime(of: key, entry.value) }) {
    case .stale, .staleIfError: break
    case .fresh, .refreshDue, .extendDue, .expired: return nil
    }
    logServingStale(key, error: error)
    return (fallback.entry.value, .layer(fallback.tier))
  }
}
