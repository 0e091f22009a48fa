extension CacheChain {
  /// Passes every level that `source` reports to every layer (through
  /// ``handleMemoryPressure(_:)``), in order, until the calling task is cancelled or the
  /// source's sequence ends.
  ///
  /// Meant to run in a task of its own for as long as the chain lives; cancelling that task
  /// stops the listening and ends the source's sequence (and so its polling):
  ///
  /// ```swift
  /// let listening = Task { await chain.followMemoryPressure(try LinuxMemoryPressureSource()) }
  /// ...
  /// listening.cancel()
  /// ```
  ///
  /// Each level costs one ``handleMemoryPressure(_:)`` of every layer, one layer after the
  /// other; a level that arrives meanwhile waits for it. Each level is logged, before the layers
  /// handle it, with the chain's ``Configuration-swift.struct/logger``:
  /// ``MemoryPressureLevel/warning`` and ``MemoryPressureLevel/critical`` at
  /// ``CacheLogLevel/notice``, ``MemoryPressureLevel/normal`` at ``CacheLogLevel/info``. Safe
  /// from any context.
  public nonisolated func followMemoryPressure(_ source: some MemoryPressureSource) async {
    await followMemoryPressure(source, logger: followedLogger.value, component: "CacheChain")
  }

  /// Follows `source` as ``followMemoryPressure(_:)`` does, logging with `logger` as `component`.
  nonisolated func followMemoryPressure(
    _ source: some MemoryPressureSource, logger: CacheLogger, component: String
  ) async {
    logger.debug("following memory pressure", metadata: ["source": "\(type(of: source))"], source: component)
    for await level in source.levels() {
      logger.log(
        level == .normal ? .info : .notice,
        "memory pressure is \(level); passing it to \(tiers.count) layers",
        metadata: ["level": "\(level)"],
        source: component)
      await handleMemoryPressure(level)
    }
    logger.debug("stopped following memory pressure", source: component)
  }
}
