/// The memory pressure source of the platform the code runs on: the system's memory pressure
/// events on Apple platforms, a ``LinuxMemoryPressureSource`` with its default configuration
/// (80% and 95% of the cgroup limit or of physical memory, read every second) elsewhere.
func systemMemoryPressureSource(logger: CacheLogger) -> any MemoryPressureSource {
  #if canImport(Darwin)
    return DispatchMemoryPressureSource()
  #else
    // The default thresholds and interval are valid, so this initializer cannot throw; a
    // source that reports nothing is the harmless answer should that ever change.
    do {
      return try LinuxMemoryPressureSource(configuration: .init(logger: logger))
    } catch {
      logger.error(
        "the default LinuxMemoryPressureSource could not be made; memory pressure is not followed",
        metadata: ["error": CacheLogger.describe(error)], source: "MemoryPressure")
      return SilentMemoryPressureSource()
    }
  #endif
}

/// A source that never reports a level.
struct SilentMemoryPressureSource: MemoryPressureSource {
  func levels() -> AsyncStream<MemoryPressureLevel> {
    AsyncStream { $0.finish() }
  }
}

extension CacheChain {
  /// Follows the platform's memory pressure, as ``followMemoryPressure(_:)`` follows a source:
  /// the system's memory pressure events on Apple platforms, a ``LinuxMemoryPressureSource``
  /// with its default configuration on Linux (its failed readings logged with the chain's
  /// logger). Runs until the calling task is cancelled.
  ///
  /// ```swift
  /// let listening = Task { await chain.followSystemMemoryPressure() }
  /// ```
  public nonisolated func followSystemMemoryPressure() async {
    await followMemoryPressure(systemMemoryPressureSource(logger: configuration.logger))
  }
}

extension LoadingCache {
  /// Follows the platform's memory pressure, as ``followMemoryPressure(_:)`` follows a source:
  /// the system's memory pressure events on Apple platforms, a ``LinuxMemoryPressureSource``
  /// with its default configuration on Linux (its failed readings logged with the cache's
  /// logger). Runs until the calling task is cancelled.
  ///
  /// ```swift
  /// let listening = Task { await images.followSystemMemoryPressure() }
  /// ```
  public func followSystemMemoryPressure() async {
    await followMemoryPressure(systemMemoryPressureSource(logger: configuration.logger))
  }
}
