/// Something that reports how urgently the system wants memory back, as a sequence of
/// ``MemoryPressureLevel`` changes.
///
/// A cache follows a source with ``LoadingCache/followMemoryPressure(_:)`` (or
/// ``CacheChain/followMemoryPressure(_:)``), which hands each level to every layer. The library
/// provides ``LinuxMemoryPressureSource`` (polls cgroup limits or `/proc/meminfo`) and, on Apple
/// platforms, `DispatchMemoryPressureSource` (the system's memory pressure events). Tests can
/// conform a small type that yields the levels they script.
///
/// Conforming types follow these rules:
/// - Each call of ``levels()`` returns a new sequence; any number may be observed at once.
/// - A sequence starts from ``MemoryPressureLevel/normal`` and yields only changes: never the
///   same level twice in a row, and not `normal` first.
/// - When the observer stops iterating (or its task is cancelled), the source stops the work
///   it did for that sequence.
public protocol MemoryPressureSource: Sendable {
  /// A new sequence of the levels as they change, starting from
  /// ``MemoryPressureLevel/normal`` (so the first element is `warning` or `critical`).
  ///
  /// Safe from any context; starting to observe may start background work (a poll loop, a
  /// dispatch source) that ends when the sequence is no longer iterated.
  func levels() -> AsyncStream<MemoryPressureLevel>
}
