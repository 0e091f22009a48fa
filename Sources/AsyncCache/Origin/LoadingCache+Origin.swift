// A load that no layer could answer asks the origin. With a layer that coordinates loads across
// processes (``LoadCoordinator``), it claims its key first, and the claim decides where the value
// goes: a single request's load and a batch's keys go through the same steps here.
extension LoadingCache {
  /// What a load that asked the origin may do with the value, per its claim.
  enum Lease {
    /// No layer coordinates loads: the value goes in every layer.
    case unshared
    /// The coordinator of layer `tier` could not be reached: the value goes in every layer but
    /// that one, where it must be fenced against the writes made while it loaded.
    case alone(tier: Int)
    /// The coordinator of layer `tier` granted the load: completing the claim stores the value
    /// there, and the other layers take it unless the claim was superseded.
    case granted(OpenLeases<Key, Value>, tier: Int)
  }

  /// Ends `read` with `entry`, which the origin gave for its key: stores it in every layer
  /// (from the top, or the one below it when `skippingTop`) as `lease` allows, completing its
  /// claim first when it has one.
  ///
  /// - Parameter revalidated: The entry the origin said did not change (`entry` keeps its
  ///   value): the layers that hold it change it in place.
  func store(
    _ entry: CacheEntry<Value>, ending read: consuming ChainRead<Key, Value>, lease: Lease, skippingTop: Bool = false,
    revalidating revalidated: CacheEntry<Value>? = nil
  ) async {
    switch lease {
    case .unshared:
      await read.store(entry, skippingTop: skippingTop, revalidating: revalidated)
    case .alone(let tier):
      await read.store(entry, skippingTop: skippingTop, excluding: tier, revalidating: revalidated)
    case .granted(let leases, let tier):
      // The coordinator's layer takes the whole entry, fenced: its fill is how the other
      // processes learn of it.
      switch await leases.complete(read.key, with: .success(entry)) {
      case .stored?, .notStored?:
        // The coordinator's layer has it (or failed): the other layers take it as usual.
        await read.store(entry, skippingTop: skippingTop, excluding: tier, revalidating: revalidated)
      case .superseded?, nil:
        // A write or removal came after the claim (the value is older than what the layers
        // hold), or the load was cancelled and gave its lease up (no one wants the value).
        read.end()
      }
    }
  }

  /// Loads the key of `load`, which no layer has, from the origin and ends `read` (the load's)
  /// by storing the value; with
  /// a layer that coordinates loads (``LoadCoordinator``), claims the key first, so that one
  /// process of those that share the layer asks the origin and the others read what it stored.
  ///
  /// An ``EntryFetcher`` origin is given `current`; when it answers that the entry did not
  /// change, the load stores `current` again, for a new lifetime (a revalidation).
  ///
  /// - Parameter current: The newest entry the lookup declined (stale, or due for a refresh).
  func loadFromOrigin(
    _ load: LoadTable<Key, Value>.StartedLoad, read: consuming ChainRead<Key, Value>,
    replacing current: CacheEntry<Value>?,
    attempts: inout Int
  ) async throws -> (Value, LoadSource) {
    let key = load.key
    // What the origin answers is stamped as of now, before it is asked: an invalidation of one of
    // its tags made while it loads kills it (see ``CacheChain/invalidate(tag:)``).
    let stamp = chain.tagStamp()
    let lease: Lease
    if let (tier, coordinator) = coordination {
      switch try await coordinator.claim(key, supersedes: current?.expiresAt) {
      case .loadedElsewhere(let entry) where chain.tagInvalidations.kills(entry.metadata):
        // Another process stored it before one of its tags was invalidated here: load it anew.
        lease = .alone(tier: tier)
      case .loadedElsewhere(let entry):
        // As if the lookup had found it in the coordinator's layer: copied into the layers above.
        await read.copy(entry, foundIn: tier, skippingTop: loadTable.skipsTopLayer(load))
        return (entry.value, .layer(tier))
      case .uncoordinated:
        lease = .alone(tier: tier)
      case .granted(let token):
        lease = .granted(OpenLeases(coordinator, granted: [key: token]), tier: tier)
      }
    } else {
      lease = .unshared
    }
    let entry: CacheEntry<Value>
    let source: LoadSource
    let stored: Bool
    do {
      let fetched = try await releasingLeases(lease) {
        try await fetchRetrying(load, current: current, attempts: &attempts)
      }
      (entry, source) = try self.entry(fetched, for: key, replacing: current, stampedAt: stamp)
      // An entry one of whose tags was invalidated while it loaded is refused, as a write made
      // meanwhile would overtake it: it answers the load and is stored nowhere.
      // A value to be revalidated before every use (HTTP's no-cache: no lifetime, no stale
      // serving) is kept for the grace, as a stale entry to revalidate, when the cache keeps any.
      let revalidatedOnly = entry.metadata.isRevalidatedOnly && freshness.grace > 0
      stored = (fetched.isStored || revalidatedOnly) && !chain.tagInvalidations.kills(entry.metadata)
    } catch {
      // The other processes get the error, or (cancelled) one of them takes the load over.
      if case .granted(let leases, _) = lease { await leases.complete(key, with: .failure(error)) }
      throw error
    }
    guard stored else {
      // The origin gave no lifetime to keep it for (HTTP's no-store), or a tag of it was
      // invalidated while it loaded: it answers the load's requests and is stored nowhere.
      // Offered to the coordinator expired at the first instant (a coordinator takes that for
      // "not to be stored", without the warning of an entry that arrives expired), so that the
      // other processes load on their own.
      var excluded: Int?
      if case .granted(let leases, let tier) = lease {
        let expired = CacheEntry(entry.value, expiresAt: .distantPast, metadata: entry.metadata)
        await leases.complete(key, with: .success(expired))
        excluded = tier
      } else if case .alone(let tier) = lease {
        excluded = tier
      }
      // A new value replaces the entry held: that one is older, and must not be served in its
      // stead. A notModified with no lifetime leaves it as it was.
      guard current != nil, source != .revalidated else {
        read.end()
        return (entry.value, source)
      }
      await read.remove(skippingTop: loadTable.skipsTopLayer(load), excluding: excluded)
      return (entry.value, source)
    }
    // Asked once the value is in hand: a request that joins a prefetch meanwhile promotes it
    // into the top layer.
    await store(
      entry, ending: read, lease: lease, skippingTop: loadTable.skipsTopLayer(load),
      revalidating: source == .revalidated ? current : nil)
    return (entry.value, source)
  }

  /// The entry to store for what the origin answered for `key`, and where its value came from:
  /// the origin's value, or (``FetchedEntry/notModified(metadata:timeToLive:)``) `current`'s,
  /// revalidated, with a new lifetime and the origin's metadata if it gave any. Tagged metadata
  /// is stamped as produced at `stamp` (see ``EntryMetadata/stamped(_:)``).
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidState`` when the origin answered `notModified`
  ///   without a `current` entry; ``EntryMetadataError`` when its metadata is over a limit.
  func entry(
    _ fetched: FetchedEntry<Value>, for key: Key, replacing current: CacheEntry<Value>?, stampedAt stamp: CacheInstant
  ) throws -> (CacheEntry<Value>, LoadSource) {
    switch fetched {
    case .value(let value, let metadata, let timeToLive):
      try metadata.validate()
      return (
        CacheEntry(
          value, expiresAt: loadedExpiry(for: key, value: value, origin: timeToLive),
          metadata: metadata.stamped(stamp)),
        .origin
      )
    case .notModified(let metadata, let timeToLive):
      guard let current else { throw FetchedEntry<Value>.notModifiedWithoutEntry(key) }
      var kept = metadata?.stamped(stamp) ?? current.metadata
      // The origin vouches for the held value as of the stamp: it is produced anew then.
      if metadata == nil, !kept.tags.isEmpty { kept.producedAt = stamp }
      try kept.validate()
      return (
        CacheEntry(
          current.value, expiresAt: loadedExpiry(for: key, value: current.value, origin: timeToLive), metadata: kept),
        .revalidated
      )
    }
  }

  /// Runs `body` (the origin call of a load that holds `lease`); gives the lease's claims up at
  /// once when the task is cancelled (the load's requests left), so that another process takes
  /// the load over without waiting for an origin slow to stop.
  private func releasingLeases<Success>(
    _ lease: Lease, _ body: () async throws -> Success
  ) async rethrows -> Success {
    guard case .granted(let leases, _) = lease else { return try await body() }
    return try await withTaskCancellationHandler(operation: body, onCancel: leases.releaseAll)
  }

  // MARK: Batches

  /// Asks the batch origin for the keys of `items`, which no layer had, and answers their loads.
  ///
  /// With a layer that coordinates loads, each key is claimed first, as a single request's load
  /// claims its key, but without waiting for another process: the keys granted (or left
  /// uncoordinated) are fetched in one call at once, while the keys another process holds wait
  /// for it, each on its own. So a batch never holds the loads it was granted while it waits,
  /// and two batches that each hold a key the other wants do not wait for each other.
  func loadBatch(
    _ items: [BatchItem<Key>], from origin: any AsyncBatchFetcher<Key, Value>, fallbacks: [UInt64: Fallback],
    startedAt: CacheInstant
  ) async {
    guard let (tier, coordinator) = coordination else {
      return await fetch(items, from: origin, leases: nil, fallbacks: fallbacks, startedAt: startedAt)
    }
    let claims = await withTaskGroup(of: (BatchItem<Key>, Result<LoadClaim<Value>?, any Error>).self) { group in
      for item in items {
        group.addTask {
          do {
            let supersedes = fallbacks[item.id]?.entry.expiresAt
            return (item, .success(try await coordinator.claimUnlessHeld(item.key, supersedes: supersedes)))
          } catch {
            return (item, .failure(error))
          }
        }
      }
      return await group.reduce(into: []) { $0.append($1) }.sorted { $0.0.id < $1.0.id }
    }
    var granted: [Key: UInt64] = [:]
    var fetched: [BatchItem<Key>] = []
    var held: [BatchItem<Key>] = []
    for (item, claim) in claims {
      switch claim {
      case .success(.loadedElsewhere(let entry)?):
        await answer(item, loadedElsewhere: entry, tier: tier, startedAt: startedAt)
      case .success(.granted(let token)?):
        granted[item.key] = token
        fetched.append(item)
      case .success(.uncoordinated?):
        fetched.append(item)
      case .success(nil):
        held.append(item)
      case .failure(let error):
        fail(item, with: error, fallback: fallbacks[item.id], startedAt: startedAt)
      }
    }
    let leases = OpenLeases(coordinator, granted: granted)
    let toFetch = fetched
    await withTaskGroup(of: Void.self) { group in
      if !toFetch.isEmpty {
        group.addTask {
          await self.fetch(toFetch, from: origin, leases: (leases, tier), fallbacks: fallbacks, startedAt: startedAt)
        }
      }
      // Each key another process holds waits for it, as a single request's load would.
      for item in held {
        group.addTask {
          do {
            let supersedes = fallbacks[item.id]?.entry.expiresAt
            switch try await self.claim(item, waitingOn: coordinator, supersedes: supersedes) {
            case .loadedElsewhere(let entry):
              await self.answer(item, loadedElsewhere: entry, tier: tier, startedAt: startedAt)
            case .granted(let token):
              let lease = OpenLeases(coordinator, granted: [item.key: token])
              await self.fetch([item], from: origin, leases: (lease, tier), fallbacks: fallbacks, startedAt: startedAt)
            case .uncoordinated:
              let none = OpenLeases(coordinator, granted: [:])
              await self.fetch([item], from: origin, leases: (none, tier), fallbacks: fallbacks, startedAt: startedAt)
            }
          } catch {
            self.fail(item, with: error, fallback: fallbacks[item.id], startedAt: startedAt)
          }
        }
      }
    }
  }

  /// Claims `item`'s key, waiting for the process that holds it, until the claim ends or no
  /// request wants the key any more (its load was abandoned while the batch goes on for its
  /// other keys): then the claim is given up, as a single load's is when it is cancelled.
  private func claim(
    _ item: BatchItem<Key>, waitingOn coordinator: any LoadCoordinator<Key, Value>, supersedes: CacheInstant?
  ) async throws -> LoadClaim<Value> {
    var claim: Result<LoadClaim<Value>, any Error>?
    await withTaskGroup(of: Result<LoadClaim<Value>, any Error>?.self) { race in
      race.addTask {
        do { return .success(try await coordinator.claim(item.key, supersedes: supersedes)) } catch {
          return .failure(error)
        }
      }
      race.addTask {
        await self.loadTable.waitUntil(orCancellation: true) { !$0.isLive(item.id) }
        return nil
      }
      // The first to end cancels the other; the claim's outcome is kept whichever came first
      // (a lease granted as the load was abandoned is then given up by the fetch, which finds
      // the key no longer wanted).
      for await outcome in race {
        if let outcome { claim = outcome }
        race.cancelAll()
      }
    }
    return try (claim ?? .failure(CancellationError())).get()
  }

  /// Fetches the keys of `items` from `origin` in one call (under the retry policy), stores each
  /// value as its claim in `leases` allows (every layer when there is no coordinator), and
  /// answers each key's load.
  private func fetch(
    _ items: [BatchItem<Key>], from origin: any AsyncBatchFetcher<Key, Value>,
    leases: (open: OpenLeases<Key, Value>, tier: Int)?, fallbacks: [UInt64: Fallback], startedAt: CacheInstant
  ) async {
    var attempts = 0
    var asked: Set<Key> = []
    let outcome: Result<[Key: Value], any Error>
    if let leases {
      outcome = await withTaskCancellationHandler {
        await fetchBatch(items, from: origin, attempts: &attempts, asked: &asked) { dropped in
          // Keys no request wants any more are not asked for: their claims are given up now,
          // not once the call for the others ends (another process may be waiting for them).
          for item in dropped { await leases.open.complete(item.key, with: .failure(CancellationError())) }
        }
      } onCancel: {
        leases.open.releaseAll()
      }
    } else {
      outcome = await fetchBatch(items, from: origin, attempts: &attempts, asked: &asked)
    }
    for item in items {
      // A key abandoned before the call is not asked for: its lease is given up.
      let result: Result<Value, any Error> =
        switch outcome {
        case .success where !asked.contains(item.key): .failure(CancellationError())
        case .success(let values):
          values[item.key].map { .success($0) }
            ?? .failure(
              AsyncCacheError(code: .notFound, message: "the batch origin returned no value for key \(item.key)"))
        case .failure(let error): .failure(error)
        }
      switch result {
      case .success(let value):
        let lease: Lease =
          if let leases {
            leases.open.holds(item.key) ? .granted(leases.open, tier: leases.tier) : .alone(tier: leases.tier)
          } else { .unshared }
        let entry = CacheEntry(value, expiresAt: loadedExpiry(for: item.key, value: value))
        // A key abandoned during the call is not stored: its read was overtaken.
        await store(entry, ending: ChainRead(resuming: item.token, of: chain), lease: lease)
        finish(item.id, key: item.key, startedAt: startedAt, with: .success((value, .origin)), attempts: attempts)
      case .failure(let error):
        // The other processes get the error, or (cancelled) one of them takes the load over.
        await leases?.open.complete(item.key, with: .failure(error))
        fail(item, with: error, fallback: fallbacks[item.id], startedAt: startedAt, attempts: attempts)
      }
    }
  }

  /// Answers the load of `item` with `entry`, which another process stored in the coordinator's
  /// layer `tier`: copied into the layers above, as if the lookup had found it there.
  private func answer(
    _ item: BatchItem<Key>, loadedElsewhere entry: CacheEntry<Value>, tier: Int, startedAt: CacheInstant
  ) async {
    await ChainRead(resuming: item.token, of: chain).copy(entry, foundIn: tier)
    finish(item.id, key: item.key, startedAt: startedAt, with: .success((entry.value, .layer(tier))), attempts: 0)
  }

  /// Ends the read of `item` and answers its load with `error`, or with the stale value of
  /// `fallback` (stale-if-error).
  func fail(
    _ item: BatchItem<Key>, with error: any Error, fallback: Fallback?, startedAt: CacheInstant, attempts: Int = 0
  ) {
    ChainRead(resuming: item.token, of: chain).end()
    if let stale = staleValue(after: error, fallback: fallback, key: item.key) {
      finish(item.id, key: item.key, startedAt: startedAt, with: .success(stale), attempts: attempts, staleAfter: error)
    } else {
      finish(item.id, key: item.key, startedAt: startedAt, with: .failure(error), attempts: attempts)
    }
  }

  /// Fetches the keys of `items` still wanted from `origin`, under the retry policy. Each
  /// attempt asks only for the keys still wanted (left in `asked`), after waiting for urgent
  /// work if no request waits for any of them (a batch whose requests were all demoted); the
  /// items no longer wanted are passed to `dropping` before each attempt.
  private func fetchBatch(
    _ items: [BatchItem<Key>], from origin: any AsyncBatchFetcher<Key, Value>, attempts: inout Int,
    asked: inout Set<Key>, dropping: (_ items: [BatchItem<Key>]) async -> Void = { _ in }
  ) async -> Result<[Key: Value], any Error> {
    var wanted: [BatchItem<Key>] = []
    do {
      let values = try await retrying(keys: wanted.map(\.key)) {
        let live = loadTable.live(items.map(\.id))
        wanted = items.filter { live.contains($0.id) }
        if wanted.count < items.count {
          let ids = Set(wanted.map(\.id))
          await dropping(items.filter { !ids.contains($0.id) })
        }
        guard !wanted.isEmpty else { throw CancellationError() }
        try await loadTable.passGate(wanted.map(\.id), urgentAt: BatchItem.urgentAt(of: wanted))
        attempts += 1
        let keys = wanted.map(\.key)
        return try await traceOrigin(attempt: attempts, describing: { $0.set("cache.keys.count", keys.count) }) {
          try await origin.fetch(keys)
        }
      }
      asked = Set(wanted.map(\.key))
      return .success(values)
    } catch {
      return .failure(error)
    }
  }
}

/// The claims a load (of one key, or a batch's) was granted and has not completed yet: each is
/// completed once, with the load's outcome, or given up with a cancellation as soon as the load
/// is cancelled.
final class OpenLeases<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  private let coordinator: any LoadCoordinator<Key, Value>
  private let open: Locked<[Key: UInt64]>

  init(_ coordinator: any LoadCoordinator<Key, Value>, granted: [Key: UInt64]) {
    self.coordinator = coordinator
    self.open = Locked(granted)
  }

  /// Whether the claim on `key` is granted and not completed yet.
  func holds(_ key: Key) -> Bool {
    open.withLock { $0[key] != nil }
  }

  /// Completes the claim on `key` with `result`; `nil` when there is none left to complete
  /// (never granted, or given up by a cancellation).
  @discardableResult
  func complete(_ key: Key, with result: Result<CacheEntry<Value>, any Error>) async -> LeaseCompletion? {
    guard let token = open.withLock({ $0.removeValue(forKey: key) }) else { return nil }
    return await coordinator.complete(key, token: token, with: result)
  }

  /// Gives up every claim not completed yet, in a task of its own (called on cancellation).
  func releaseAll() {
    let released = open.withLock { open in
      defer { open = [:] }
      return open
    }
    guard !released.isEmpty else { return }
    let coordinator = coordinator
    Task {
      for (key, token) in released {
        _ = await coordinator.complete(key, token: token, with: .failure(CancellationError()))
      }
    }
  }
}

/// One load of a batch: its identifier in the in-flight table, its key, its read token, and
/// whether it started urgent (see ``LoadTableStateMachine/StartedLoad/urgentAt``).
struct BatchItem<Key: Hashable & Sendable>: Sendable {
  let id: UInt64
  let key: Key
  let token: ReadToken<Key>
  let urgentAt: UInt64?

  /// When `items` all started urgent, the latest of their starts: while no load lost its
  /// urgency since, the last one started is urgent still, and the batch need not stop at the
  /// gate.
  static func urgentAt(of items: [Self]) -> UInt64? {
    var latest: UInt64 = 0
    for item in items {
      guard let urgentAt = item.urgentAt else { return nil }
      latest = Swift.max(latest, urgentAt)
    }
    return items.isEmpty ? nil : latest
  }
}
