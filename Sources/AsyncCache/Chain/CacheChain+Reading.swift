// How a read-through of the chain runs: the lookups top-down, and the copies or the loaded value
// it stores, as one read of the chain's write coordinator.
extension CacheChain {
  // MARK: Read-through (also used by LoadingCache)

  // A read-through is one read of the chain's write coordinator, from `beginRead` to one of
  // the `endRead`s: the chain owns the token from start to end, and a write of the key while
  // it runs overtakes it (it may still answer with what it found, but stores nothing).

  /// Begins a read of `key`: the lookups, then the copies or the loaded value it stores.
  nonisolated func beginRead(_ key: Key) -> ReadToken<Key> {
    coordinator.beginRead(key)
  }

  /// Ends `read` without storing anything (nothing found, or the load failed).
  nonisolated func endRead(_ read: ReadToken<Key>) {
    coordinator.endRead(read)
  }

  /// Marks `read` as overtaken, so that it stores nothing (a load no one wants any more: a
  /// fresh load may follow).
  nonisolated func overtake(_ read: ReadToken<Key>) {
    coordinator.overtake(read)
  }

  /// Ends `read`, which found `entry` (or extended it), by copying it into the layers in
  /// `range`, unless a write overtook the read: awaited, or in a task of its own, per
  /// ``Configuration-swift.struct/backfill``. A copy overtakes no load's value, and drops the
  /// copies of the other reads of the key in progress (see <doc:Semantics>).
  nonisolated func endRead(_ read: ReadToken<Key>, copying entry: CacheEntry<Value>, into range: Range<Int>) async {
    guard !range.isEmpty else { return endRead(read) }
    guard configuration.backfill == .awaited else { return endReadInBackground(read, copying: entry, into: range) }
    _ = await commit(entry, for: read.key, to: range, token: read, operation: .backfill)
    endRead(read)
  }

  /// Ends `read` as ``endRead(_:copying:into:)`` does, always in a task of its own (a sliding
  /// expiry's extension, decided on a hit that must not wait).
  nonisolated func endReadInBackground(_ read: ReadToken<Key>, copying entry: CacheEntry<Value>, into range: Range<Int>)
  {
    guard !range.isEmpty else { return endRead(read) }
    runInBackground {
      _ = await self.commit(entry, for: read.key, to: range, token: read, operation: .backfill)
      self.endRead(read)
    }
  }

  /// Ends `read`, which loaded `entry` from the origin, by storing it in the layers in `range`,
  /// unless a write overtook the read. Returns whether it stored it.
  @discardableResult
  nonisolated func endRead(
    _ read: ReadToken<Key>, storing entry: CacheEntry<Value>, into range: some Collection<Int> & Sendable
  ) async
    -> Bool
  {
    defer { endRead(read) }
    return await commit(entry, for: read.key, to: range, token: read, operation: .insert)
  }

  // MARK: Building blocks (also used by LoadingCache)

  /// The first unexpired entry for `key` and the index of the layer that had it; no back-fill.
  nonisolated func locate(_ key: Key) async throws -> (entry: CacheEntry<Value>, tier: Int)? {
    var fallback: (entry: CacheEntry<Value>, tier: Int)?
    return try await locate(key, fallback: &fallback) { _ in true }
  }

  /// The first unexpired entry for `key` that `accept` takes, and the index of the layer that
  /// had it; no back-fill. An entry `accept` declines does not stop the lookup: the one of
  /// them that expires last is left in `fallback`, also when a layer's failure is then thrown
  /// (``LayerFailurePolicy/propagate``), so that a caller can still serve it; `passedOver` is
  /// told of each declined entry and its layer as soon as it is found.
  nonisolated func locate(
    _ key: Key,
    fallback: inout (entry: CacheEntry<Value>, tier: Int)?,
    passedOver: (CacheEntry<Value>, Int) -> Void = { _, _ in },
    accepting accept: (CacheEntry<Value>) -> Bool
  ) async throws -> (entry: CacheEntry<Value>, tier: Int)? {
    for index in tiers.indices {
      do {
        if let entry = try await tiers[index].layer.entry(for: key) {
          let recovered = counters.withLock { counters in
            counters[index].hits += 1
            return counters[index].answered()
          }
          if recovered { logRecovery(tier: index) }
          if accept(entry) { return (entry, index) }
          passedOver(entry, index)
          if fallback == nil || entry.expiresAt ?? .distantFuture > fallback!.entry.expiresAt ?? .distantFuture {
            fallback = (entry, index)
          }
          continue
        }
        let recovered = counters.withLock { counters in
          counters[index].misses += 1
          return counters[index].answered()
        }
        if recovered { logRecovery(tier: index) }
      } catch {
        try handleFailure(error, tier: index, operation: .lookup, key: key)
        counters.withLock { $0[index].misses += 1 }
      }
    }
    return nil
  }

  /// Writes `entry` to the layers in `range` unless a write overtook `token` (or the task was
  /// cancelled while waiting for the key). Returns whether it wrote.
  private nonisolated func commit(
    _ entry: CacheEntry<Value>,
    for key: Key,
    to range: some Collection<Int> & Sendable,
    token: ReadToken<Key>,
    operation: LayerFailure.Operation
  ) async -> Bool {
    // A back-fill copies what a layer holds: it makes no read's value older, so it overtakes none
    // (a load that starts meanwhile still stores its newer value, after it).
    guard let ticket = await coordinator.acquireCommit(token, kind: operation == .backfill ? .copy : .fill) else {
      return false
    }
    defer { coordinator.releaseWrite(ticket) }
    // A commit never fails the read it writes back: its failures are recorded, not thrown.
    _ = await write(entry, for: key, to: range, operation: operation, propagating: false)
    return true
  }
}
