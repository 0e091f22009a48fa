public import CAsyncCacheShims
public import Synchronization

/// Segments laid out inline in one allocation: for each, its lock, its ``IndexHint``, then its
/// ``MemorySegment`` (whose hot fields share the lock's cache line), padded so that no two
/// segments share a cache line (or an adjacent-line prefetch pair).
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

  /// Where a segment's ``IndexHint`` is: right after its lock.
  @usableFromInline static var hintOffset: Int {
    let alignment = MemoryLayout<IndexHint>.alignment
    return (MemoryLayout<LockPrimitive>.size + alignment - 1) & ~(alignment - 1)
  }

  /// Where a segment's state starts: right after its lock and hint, so that the lock and the
  /// first fields a hit touches share a cache line (see ``MemorySegment``'s field order).
  @usableFromInline static var stateOffset: Int {
    let alignment = MemoryLayout<Segment>.alignment
    return (hintOffset + MemoryLayout<IndexHint>.size + alignment - 1) & ~(alignment - 1)
  }

  /// Creates `count` empty segments, segment `index` with the policy state `admission(index)`.
  init(count: Int, admission: (Int) -> SegmentAdmission) {
    self.count = count
    self.stride = (Self.stateOffset + MemoryLayout<Segment>.size + 127) & ~127
    base = .allocate(byteCount: stride * count, alignment: 128)
    for index in 0..<count {
      (base + index * stride).bindMemory(to: LockPrimitive.self, capacity: 1).initializeLock()
      (base + index * stride + Self.hintOffset).bindMemory(to: IndexHint.self, capacity: 1).initialize(to: IndexHint())
      (base + index * stride + Self.stateOffset).initializeMemory(
        as: Segment.self, to: Segment(admission: admission(index)))
      publishIndex(of: index)
    }
  }

  deinit {
    for index in 0..<count {
      state(index).deinitialize(count: 1)
      hint(index).deinitialize(count: 1)
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
  func hint(_ index: Int) -> UnsafeMutablePointer<IndexHint> {
    (base + (index &* stride &+ Self.hintOffset)).assumingMemoryBound(to: IndexHint.self)
  }

  @inlinable
  @inline(__always)
  func state(_ index: Int) -> UnsafeMutablePointer<Segment> {
    (base + (index &* stride &+ Self.stateOffset)).assumingMemoryBound(to: Segment.self)
  }

  /// Runs `body` with segment `index` locked, after the moves of its pending hits (see
  /// ``MemorySegment/recordHit(_:hash:)``): `body` may read and change anything.
  @inlinable
  @inline(__always)
  func withLock<Result>(_ index: Int, _ body: (inout Segment) throws -> Result) rethrows -> Result {
    let lock = lock(index)
    lock.lock()
    defer { lock.unlock() }
    let segment = state(index)
    segment.pointee.settleHits()
    defer { publishIndex(of: index) }
    return try body(&segment.pointee)
  }

  /// Starts bringing in the control bytes of the group where a lookup of `hash` in segment
  /// `index` begins, before the lookup takes the lock: their miss then overlaps the lock's
  /// atomic instead of following it. Reads only the segment's ``IndexHint``; a stale hint
  /// prefetches a useless (or freed) line, which is harmless.
  @inlinable
  @inline(__always)
  func prefetchBucket(of hash: Int, in index: Int) {
    let hint = hint(index)
    let controls = hint.pointee.controls.load(ordering: .relaxed)
    let groups = hint.pointee.groupCount.load(ordering: .relaxed)
    let group = Segment.position(of: Segment.tag(of: hash), count: groups)
    async_cache_prefetch(UnsafeRawPointer(bitPattern: controls &+ group &* Segment.groupLength))
  }

  /// Publishes where segment `index`'s index is now, for ``prefetchBucket(of:in:)``. Under the
  /// segment's lock, after anything that may have resized the index.
  @inlinable
  @inline(__always)
  func publishIndex(of index: Int) {
    let segment = state(index)
    let controls = Int(bitPattern: segment.pointee.controls)
    let hint = hint(index)
    let groupCount = segment.pointee.groupCount
    if hint.pointee.controls.load(ordering: .relaxed) != controls
      || hint.pointee.groupCount.load(ordering: .relaxed) != groupCount
    {
      hint.pointee.controls.store(controls, ordering: .relaxed)
      hint.pointee.groupCount.store(groupCount, ordering: .relaxed)
    }
  }

  /// Runs a lookup's `body` with segment `index` locked, leaving its pending hits pending:
  /// `body` may find keys, read nodes, record hits and write the stamps of tags found alive
  /// (`MemorySegment+Tags.swift`: they move nothing in the lists); it settles the hits itself
  /// before it changes anything else (removes an expired or dead entry), and it never resizes
  /// the index (it does not publish the ``IndexHint``).
  @inlinable
  @inline(__always)
  func withLookupLock<Result>(_ index: Int, _ body: (inout Segment) throws -> Result) rethrows -> Result {
    let lock = lock(index)
    lock.lock()
    defer { lock.unlock() }
    return try body(&state(index).pointee)
  }
}

/// Where a segment's table is, published under its lock by every change that may rebuild it and
/// read without the lock, only to prefetch: the control bytes' address and the number of
/// groups, each atomic (a reader may pair an address with the length of another table; the
/// prefetch is then useless, never harmful).
@usableFromInline
struct IndexHint: ~Copyable {
  @usableFromInline let controls = Atomic<Int>(0)
  @usableFromInline let groupCount = Atomic<Int>(0)

  @usableFromInline
  init() {}
}
