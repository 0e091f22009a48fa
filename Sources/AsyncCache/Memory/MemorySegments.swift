/// Segments laid out inline in one allocation: for each, its lock, then its ``MemorySegment``
/// (whose hot fields share the lock's cache line), padded so that no two segments share a
/// cache line (or an adjacent-line prefetch pair).
///
/// Segments are reached through a raw pointer rather than an array of objects so that a
/// lookup retains nothing: a reference count written by every hit would make cores fight over
/// the cache line of a lock they are not even contending for.
@usableFromInline
final class MemorySegments<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  @usableFromInline typealias Segment = MemorySegment<Key, Value>

  // The pointer is written once in `init` and only read afterwards. Each segment's state is only
  // reached through `withLock`, between `lock()` and `unlock()` of that segment's lock. The
  // allocation never moves, and is deinitialized only in `deinit`, when no other reference
  // exists. Keys and values are Sendable, so what `withLock` hands out may cross threads.
  // SAFETY: immutable pointer; what it points to is only reached under the segment locks.
  @usableFromInline nonisolated(unsafe) let base: UnsafeMutableRawPointer
  @usableFromInline let count: Int
  @usableFromInline let stride: Int

  /// Where a segment's state starts: right after its lock, so that the lock and the fields a hit
  /// touches share a cache line (a hit from another core then moves one line, not two).
  @usableFromInline static var stateOffset: Int {
    let alignment = MemoryLayout<Segment>.alignment
    return (MemoryLayout<LockPrimitive>.size + alignment - 1) & ~(alignment - 1)
  }

  /// Creates `count` empty segments, segment `index` with the policy state `admission(index)`.
  init(count: Int, admission: (Int) -> SegmentAdmission) {
    self.count = count
    self.stride = (Self.stateOffset + MemoryLayout<Segment>.size + 127) & ~127
    base = .allocate(byteCount: stride * count, alignment: 128)
    for index in 0..<count {
      (base + index * stride).bindMemory(to: LockPrimitive.self, capacity: 1).initializeLock()
      (base + index * stride + Self.stateOffset).initializeMemory(
        as: Segment.self, to: Segment(admission: admission(index)))
    }
  }

  deinit {
    for index in 0..<count {
      state(index).deinitialize(count: 1)
      lock(index).deinitializeLock()
    }
    base.deallocate()
  }

  @inlinable
  @inline(__always)
  func lock(_ index: Int) -> UnsafeMutablePointer<LockPrimitive> {
    (base + index &* stride).assumingMemoryBound(to: LockPrimitive.self)
  }

  @inlinable
  @inline(__always)
  func state(_ index: Int) -> UnsafeMutablePointer<Segment> {
    (base + (index &* stride &+ Self.stateOffset)).assumingMemoryBound(to: Segment.self)
  }

  /// Runs `body` with segment `index` locked.
  @inlinable
  @inline(__always)
  func withLock<Result>(_ index: Int, _ body: (inout Segment) throws -> Result) rethrows -> Result {
    let lock = lock(index)
    lock.lock()
    defer { lock.unlock() }
    return try body(&state(index).pointee)
  }
}
