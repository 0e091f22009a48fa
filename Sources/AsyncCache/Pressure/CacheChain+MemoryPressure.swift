extension CacheChain {
  /// Passes every level that `source` reports to every layer (through
  /// ``handleMemoryPressure(_:)``), in order, until the calling task is cancelled or the
  /// source's sequence ends.
  ///
  /// Meant to run in a task of its own for as long as the chain lives; cancelling that task
  /// stops the listening and ends the source's sequence (and so its polling):
  ///
  /// ```swift
  /// let listening = Task { await chain.followMemoryPressure(LinuxMemoryPressureSource()) }
  /// ...
  /// listening.cancel()
  /// ```
  ///
  /// Each level costs one ``handleMemoryPressure(_:)`` of every layer, one layer after the
  /// other; a level that arrives meanwhile waits for it. Safe from any context.
  public nonisolated func followMemoryPressure(_ source: some MemoryPressureSource) async {
    for await level in source.levels() {
      await handleMemoryPressure(level)
    }
  }
}
