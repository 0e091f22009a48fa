extension LoadingCache {
  /// Passes every level that `source` reports to every layer of the cache's chain (through
  /// ``CacheChain/handleMemoryPressure(_:)``: a ``MemoryLayer`` trims on
  /// ``MemoryPressureLevel/warning`` and empties on ``MemoryPressureLevel/critical``), until the
  /// calling task is cancelled or the source's sequence ends.
  ///
  /// Structured like ``AsyncPrefetcher/run()``: run it in a task that lives as long as the
  /// cache, and cancel that task to stop listening. Cancelling ends the source's sequence too,
  /// so a polling source stops polling.
  ///
  /// ```swift
  /// try await withThrowingDiscardingTaskGroup { group in
  ///     group.addTask { await images.followMemoryPressure(try LinuxMemoryPressureSource()) }
  ///     ...
  ///     group.cancelAll()
  /// }
  /// ```
  ///
  /// Code that is not structured keeps the task and cancels it:
  /// `let listening = Task { await images.followMemoryPressure(source) }`, then
  /// `listening.cancel()`.
  ///
  /// Each level costs one ``AsyncCacheLayer/handleMemoryPressure(_:)`` of every layer, one
  /// layer after the other. Each level is logged with the cache's
  /// ``Configuration-swift.struct/logger``, as ``CacheChain/followMemoryPressure(_:)`` logs it.
  /// Safe from any context.
  public func followMemoryPressure(_ source: some MemoryPressureSource) async {
    await chain.followMemoryPressure(source, logger: configuration.logger, component: "LoadingCache")
  }
}
