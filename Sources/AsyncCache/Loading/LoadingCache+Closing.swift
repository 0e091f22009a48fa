import Synchronization

extension LoadingCache {
  // MARK: Closing

  /// Closes the cache: requests and writes made afterwards throw
  /// ``AsyncCacheError/Code/closed``; the cache's prefetchers stop; the loads in flight finish
  /// (the requests waiting for them get their values) and background refreshes and back-fills
  /// with them; then the chain closes every layer (``CacheChain/close()``: a SQLite layer writes
  /// what it buffers, a Redis layer closes its connections, a memory layer empties), and the
  /// cache's event sequences end once they have delivered what they buffered.
  ///
  /// Cancelling a task that closes cancels the loads still in flight instead of waiting for
  /// them (their requests get `CancellationError`); the layers are closed all the same. An
  /// origin that ignores cancellation is still waited for. Calling it again, or concurrently,
  /// waits for the first call and throws what it threw.
  ///
  /// A request that joined a load before `close()` began is answered; every later one is
  /// refused, except a hit of a top layer that someone filled again by hand. Close the cache,
  /// not its ``chain``: a chain closed on its own leaves the cache's requests to fail as its
  /// layers do.
  ///
  /// - Throws: ``AsyncCacheError/Code/layerFailure`` for the first layer that failed to close
  ///   (every layer is closed even so); ``AsyncCacheError/Code/invalidState`` when called from a
  ///   load that this cache's loads wait for — its origin, the origin of another cache that its
  ///   origin asked, or a `Task` either starts (which inherits their task-local values) — which
  ///   `close()` would wait for: close from outside, or from `Task.detached`.
  public func close() async throws {
    // What was in flight as closing began, counted before a cancelled caller cancels anything.
    let atStart = Locked((loads: 0, cancelled: 0, at: ContinuousClock.now))
    // Cancelling the caller cancels the loads; the work itself runs to its end either way.
    try await lifecycle.close(
      checking: checkNotClosingFromItsOwnLoad,
      atFirst: {
        // Closed under the load table's lock, where requests join loads.
        loadTable.close()
        let loads = loadTable.loadsRunning
        let cancelled = loadsEndedCancelled.load(ordering: .relaxed)
        atStart.withLock { $0 = (loads, cancelled, ContinuousClock.now) }
      },
      onCancel: { self.cancelLoads() },
      { try await self.closeInOrder(after: atStart.withLock { $0 }) })
  }

  /// The work of ``close()``, run once: the loads and prefetchers end, then the layers close;
  /// then it logs what it did, at notice. `start` is what was in flight as closing began.
  private func closeInOrder(after start: (loads: Int, cancelled: Int, at: ContinuousClock.Instant)) async throws {
    defer { eventHub.finishAll() }
    let (started, loads) = (start.at, start.loads)
    let prefetchers = await finishWork()
    let cancelled = loadsEndedCancelled.load(ordering: .relaxed) - start.cancelled
    var failure: (any Error)?
    do {
      try await chain.close()
    } catch {
      failure = error
    }
    logClosed(
      after: ContinuousClock.now - started, loads: loads, cancelled: cancelled,
      prefetchers: prefetchers, failure: failure)
    if let failure { throw failure }
  }

  /// Throws when the caller is a load of this cache, or a load that one of this cache's loads
  /// waits for (its origin asked another cache, whose origin closes this one): it would wait
  /// for itself.
  private func checkNotClosingFromItsOwnLoad() throws {
    let current = LoadDependencies.loadsOfCurrentTask
    guard !current.isEmpty, LoadDependencies.shared.isAnyLoad(of: ObjectIdentifier(loadTable), waitingFor: current)
    else { return }
    throw AsyncCacheError.invalidState(
      "LoadingCache.close() was called from a load that the cache's own loads wait for (its origin, another "
        + "cache's origin that it asked, or a task either started, which inherits their task-local values), "
        + "which close() would wait for; close the cache from outside its loads, or from Task.detached")
  }

  /// Stops the prefetchers and waits for the loads in flight. Returns how many prefetchers it
  /// stopped.
  private func finishWork() async -> Int {
    let stops = prefetchers.withLock { prefetchers in
      defer { prefetchers.removeAll() }
      return Array(prefetchers.values)
    }
    for stop in stops { await stop() }
    // Loads abandoned by their requests are out of `loads` but may still be running their body.
    await loadTable.waitUntil { $0.isIdle }
    return stops.count
  }

  /// Cancels every load in flight.
  private func cancelLoads() {
    loadTable.cancelAll()
  }

  /// Whether ``close()`` was called (it may still be running). Safe from any context.
  public var isClosed: Bool { loadTable.closed.load(ordering: .relaxed) }

  /// Throws ``AsyncCacheError/Code/closed`` once ``close()`` was called.
  @usableFromInline
  func checkOpen(_ operation: @autoclosure () -> String) throws {
    if loadTable.closed.load(ordering: .relaxed) {
      throw AsyncCacheError.closed("LoadingCache", operation: operation())
    }
  }

  /// The error of a request, bulk request or prefetch that would join a load after close.
  @usableFromInline
  func closedError(joining kind: LoadTable<Key, Value>.JoinKind) -> AsyncCacheError {
    AsyncCacheError.closed("LoadingCache", operation: kind == .prefetch ? "a prefetch" : "a request")
  }

  /// Registers `stop`, which stops a prefetcher of this cache, for ``close()``; returns the
  /// identifier to unregister it with.
  ///
  /// - Throws: ``AsyncCacheError/Code/closed`` when the cache was closed.
  func registerPrefetcher(_ stop: @escaping @Sendable () async -> Void) throws -> UInt64 {
    try prefetchers.withLock { prefetchers in
      try checkOpen("AsyncPrefetcher.run()")
      let id = nextWaiterID.wrappingAdd(1, ordering: .relaxed).newValue
      prefetchers[id] = stop
      return id
    }
  }

  func unregisterPrefetcher(_ id: UInt64) {
    _ = prefetchers.withLock { $0.removeValue(forKey: id) }
  }
}
