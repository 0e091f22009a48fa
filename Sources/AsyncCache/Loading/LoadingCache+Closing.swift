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
  /// Cancelling the task that closes cancels the loads still in flight instead of waiting for
  /// them (their requests get `CancellationError`); the layers are closed all the same. Calling
  /// it again, or concurrently, waits for the first call and throws what it threw.
  ///
  /// A request made while `close()` runs may still be answered. Once it has returned, every
  /// request is refused, except a hit of a top layer that someone filled again by hand.
  ///
  /// - Throws: ``AsyncCacheError/Code/layerFailure`` for the first layer that failed to close
  ///   (every layer is closed even so).
  public func close() async throws {
    let work = closing.withLock { closing in
      if let closing { return closing }
      closedFlag.store(true, ordering: .relaxed)
      closeSignal.fire()
      let work = Task { await self.finishWork() }
      closing = work
      return work
    }
    // Cancelling the caller cancels the loads; the work itself runs to its end either way.
    await withTaskCancellationHandler {
      await work.value
    } onCancel: {
      self.cancelLoads()
    }
    defer { eventHub.finishAll() }
    try await chain.close()
  }

  /// Stops the prefetchers and waits for the loads in flight.
  private func finishWork() async {
    let stops = prefetchers.withLock { prefetchers in
      defer { prefetchers.removeAll() }
      return Array(prefetchers.values)
    }
    for stop in stops { await stop() }
    await loadTable.waitUntil { $0.loads.isEmpty }
  }

  /// Cancels every load in flight.
  private func cancelLoads() {
    for task in loadTable.withLock({ $0.allTasks }) { task.cancel() }
  }

  /// Whether ``close()`` was called (it may still be running). Safe from any context.
  public var isClosed: Bool { closedFlag.load(ordering: .relaxed) }

  /// Throws ``AsyncCacheError/Code/closed`` once ``close()`` was called.
  @usableFromInline
  func checkOpen(_ operation: @autoclosure () -> String) throws {
    if closedFlag.load(ordering: .relaxed) { throw AsyncCacheError.closed("LoadingCache", operation: operation()) }
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
