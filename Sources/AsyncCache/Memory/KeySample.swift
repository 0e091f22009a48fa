// What more memory would buy, for long reuses: how many distinct keys a watched lookup's key
// waited behind, counted in a spatial sample of one key in a hundred (SHARDS: Waldspurger et al.,
// "Efficient MRC Construction with SHARDS", FAST 2015).
//
// The average eviction time model (`HitRatioCurve`) turns a reuse time into the keys an LRU cache
// holds meanwhile by assuming that a window of a given length holds about the same number of
// distinct keys wherever it falls. Over long windows real traces break that: in the ARC paper's
// P3 trace, at four times 131,072 entries, the model said 77.5% where LRU hits 79.6%, in every
// run. The sample counts the distinct keys of each window instead. A count of n sampled keys
// estimates 100 n keys within about 1/sqrt(n): the curve uses it from 2,048 sampled keys (within
// 2.2%), the model below.

import Synchronization

/// The layer's spatial sample of keys: every access to a key whose hash falls in the lowest
/// hundredth, in order, and for each such key where its latest access is; shared by the layer's
/// segments (each reads it under its own lock, then this one's), so that a window's count covers
/// the whole layer whatever the segment count.
///
/// Positions are the sampled accesses' order. A bit per position says whether that access is
/// still its key's latest; the set bits at or after a watch's start are the sampled keys used
/// since. Counts by block of 512 positions keep a query to at most 8 words' bits and a sum.
@usableFromInline
final class KeySample: Sendable {
  /// What a sample keeps and when the curve uses its counts.
  struct Parameters: Sendable {
    /// The sampled hashes: below this, once mixed (``KeySample/mixed(_:)``).
    var threshold: UInt64
    /// The keys one sampled key stands for.
    var scale: Int
    /// The fewest sampled keys in a window for the curve to use the window's count rather than
    /// the model.
    var countedFrom: Int

    /// One key in a hundred, counted from 2,048 sampled keys (within 2.2%, one standard
    /// deviation).
    static let standard = Parameters(threshold: UInt64.max / 100, scale: 100, countedFrom: 2_048)

    /// The smallest count limit for which a layer keeps a sample: below it, four times the
    /// capacity holds fewer than ``countedFrom`` sampled keys, so no count would be used.
    var minimumCapacity: Int { countedFrom * scale / 4 }
  }

  /// The sampled hashes: below this, once mixed (``mixed(_:)``).
  @usableFromInline let threshold: UInt64
  /// The keys one sampled key stands for.
  @usableFromInline let scale: Int
  /// The fewest sampled keys in a window for the curve to use the window's count.
  @usableFromInline let countedFrom: Int

  /// The hash's bits, mixed so that the sample does not follow the bits segments and buckets
  /// are chosen by.
  @inlinable
  static func mixed(_ hash: Int) -> UInt64 {
    let mixed = UInt64(truncatingIfNeeded: hash) &* 0x9E37_79B9_7F4A_7C15
    return mixed ^ (mixed >> 31)
  }

  struct State: Sendable {
    /// The positions handed out so far: the next access's.
    var sequence = 0
    /// The position of the first bit of ``marks`` (a multiple of 512).
    var base = 0
    /// A bit per position from ``base``: set while that access is its key's latest.
    var marks: [UInt64] = []
    /// The set bits of ``marks``, by block of 8 words.
    var blockCounts: [Int32] = []
    /// The latest accesses before ``base``, in order: the older positions, kept sparse (a key
    /// not used for a long time).
    var sparse: [Int] = []
    /// The positions below which the latest accesses were dropped (more than the ``horizon``
    /// since): a window that starts there is past every size of the curve.
    var forgottenBefore = 0
    /// Each sampled key's latest position, by mixed hash (two keys whose 64-bit hashes match
    /// count as one).
    var latest: [UInt64: Int] = [:]
    /// The word count of ``marks`` past which its older half is moved to ``sparse``.
    var compactionPoint = 1_024
  }

  /// The sampled keys a window must still count beyond to be past every size of the curve: 1.5
  /// times those of four times the capacity.
  let horizon: Int
  let state = Locked(State())
  /// ``State/sequence``, published for reading without the lock.
  let published = Atomic<Int>(0)

  /// A sample for a layer of `capacity` entries.
  init(capacity: Int, parameters: Parameters = .standard) {
    threshold = parameters.threshold
    scale = parameters.scale
    countedFrom = parameters.countedFrom
    let fourfold = Double(capacity) * 4 / Double(parameters.scale)
    horizon = Int(Swift.min(fourfold * 1.5, 0x1p40)) + 64
  }

  /// The position the next access will have: where a watch that starts now counts from. Read
  /// without the lock.
  @usableFromInline var position: Int { published.load(ordering: .acquiring) }

  /// Records an access to the sampled key of mixed hash `mixed`.
  @usableFromInline
  func access(_ mixed: UInt64) {
    state.withLock { state in
      if let previous = state.latest[mixed] {
        if previous >= state.base {
          let offset = previous - state.base
          state.marks[offset >> 6] &= ~(1 << UInt64(offset & 63))
          state.blockCounts[offset >> 9] -= 1
        } else if previous >= state.forgottenBefore {
          let index = Self.firstIndex(atLeast: previous, in: state.sparse)
          if index < state.sparse.count, state.sparse[index] == previous { state.sparse.remove(at: index) }
        }
      }
      let position = state.sequence
      state.sequence += 1
      published.store(state.sequence, ordering: .releasing)
      state.latest[mixed] = position
      let offset = position - state.base
      if offset >> 6 >= state.marks.count { state.marks.append(0) }
      if offset >> 9 >= state.blockCounts.count { state.blockCounts.append(0) }
      state.marks[offset >> 6] |= 1 << UInt64(offset & 63)
      state.blockCounts[offset >> 9] += 1
      if state.marks.count > state.compactionPoint { compact(&state) }
    }
  }

  /// The sampled keys used at or after `start` (a ``position``), each once; `nil` when `start`
  /// is older than the sample keeps, which means more than ``horizon`` of them.
  @usableFromInline
  func keys(since start: Int) -> Int? {
    state.withLock { state in
      guard start >= state.forgottenBefore else { return nil }
      var count = state.sparse.count - Self.firstIndex(atLeast: start, in: state.sparse)
      let offset = Swift.max(start - state.base, 0)
      let firstWord = offset >> 6
      guard firstWord < state.marks.count else { return count }
      let firstBlock = offset >> 9
      for block in (firstBlock + 1)..<state.blockCounts.count { count += Int(state.blockCounts[block]) }
      let blockEnd = Swift.min((firstBlock + 1) << 3, state.marks.count)
      count += (state.marks[firstWord] >> UInt64(offset & 63)).nonzeroBitCount
      for word in (firstWord + 1)..<Swift.max(blockEnd, firstWord + 1) { count += state.marks[word].nonzeroBitCount }
      return count
    }
  }

  /// The index of the first of the sorted `positions` at least `position`.
  static func firstIndex(atLeast position: Int, in positions: [Int]) -> Int {
    var (low, high) = (0, positions.count)
    while low < high {
      let middle = (low + high) / 2
      if positions[middle] < position { low = middle + 1 } else { high = middle }
    }
    return low
  }

  /// Moves the older half of the marks' blocks to the sparse positions, then forgets the oldest
  /// latest accesses beyond the newest ``horizon`` (and their keys). The marks then stay within
  /// twice the compaction point, and the sparse positions within the horizon.
  private func compact(_ state: inout State) {
    let moved = state.blockCounts.count / 2
    for word in 0..<Swift.min(moved << 3, state.marks.count) {
      var bits = state.marks[word]
      while bits != 0 {
        state.sparse.append(state.base + word << 6 + bits.trailingZeroBitCount)
        bits &= bits &- 1
      }
    }
    state.marks.removeFirst(Swift.min(moved << 3, state.marks.count))
    state.blockCounts.removeFirst(moved)
    state.base += moved << 9
    let dense = state.blockCounts.reduce(0) { $0 + Int($1) }
    let excess = state.sparse.count + dense - horizon
    if excess > 0 {
      let dropped = Swift.min(excess, state.sparse.count)
      if dropped > 0 {
        state.forgottenBefore = state.sparse[dropped - 1] + 1
        state.sparse.removeFirst(dropped)
        let forgotten = state.forgottenBefore
        state.latest = state.latest.filter { $0.value >= forgotten }
      }
    }
    state.compactionPoint = Swift.max(state.marks.count * 2, 1_024)
  }
}
