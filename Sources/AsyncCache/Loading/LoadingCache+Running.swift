extension LoadingCache {
  // MARK: Running as a service

  /// Runs the cache's background work until the calling task is cancelled, the configuration's
  /// ``Configuration-swift.struct/gracefulShutdown`` signal returns, or the cache is closed;
  /// then closes the cache (``close()``) and returns.
  ///
  /// While it runs, the cache follows the platform's memory pressure (unless
  /// ``Configuration-swift.struct/followsMemoryPressureWhileRunning`` is off); its prefetchers
  /// and its layers' own work (a Redis layer's invalidations, a SQLite layer's background
  /// writes) run in tasks of their own and end with the close.
  ///
  /// Its shape is swift-service-lifecycle's `Service` requirement, so that a service runs the
  /// cache in its `ServiceGroup` with one line and no dependency of this package:
  ///
  /// ```swift
  /// extension LoadingCache: @retroactive Service {}
  ///
  /// let cache = try LoadingCache(
  ///     layers: [MemoryLayer<String, Data>(), sqlite],
  ///     origin: origin,
  ///     configuration: .init(gracefulShutdown: gracefulShutdown))   // ServiceLifecycle's
  /// ```
  ///
  /// A graceful shutdown lets the loads in flight finish before the layers close; a
  /// cancellation cancels them (see ``close()``).
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidState`` when the cache runs already;
  ///   ``AsyncCacheError/Code/closed`` when it was closed; what ``close()`` throws.
  public func run() async throws {
    // Ends on the graceful shutdown signal, on close, or on cancellation.
    var work: (@Sendable () async -> Void)?
    if configuration.followsMemoryPressureWhileRunning { work = { await self.followSystemMemoryPressure() } }
    try await lifecycle.run(
      checking: { try checkOpen("run()") }, orUntil: configuration.gracefulShutdown, meanwhile: work)
    try await close()
  }
}
