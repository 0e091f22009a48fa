// The logic of the layer's spatial sample of keys (`KeySample`, which holds it under a lock): kept
// apart so that the 32-bit check (`.ci/check-32bit`, Embedded Swift) runs it.

extension KeySample {
  /// What a sample keeps and when the curve uses its counts.
  struct Parameters: Sendable {
    /// The fewest keys one sampled key stands for: at most one key in `minimumScale` is
    /// sampled.
    var minimumScale: Int
    /// The fewest sampled keys in a window for the curve to use the window's count rather than
    /// the model.
    var countedFrom: Int
    /// In a layer large enough, the keys (in capacities) from which a window is counted: the
    /// scale grows with the capacity so that ``countedFrom`` sampled keys stand for this many
    /// capacities' keys. 0 keeps ``minimumScale`` at every capacity.
    var countedFromCapacities: Double

    /// One key in a hundred, or fewer in a layer of more than 131,072 entries: windows are
    /// counted from 2,048 sampled keys (within 2.2%, one standard deviation), which stand for
    /// 204,800 keys, or 1.5625 capacities in a larger layer. So the sample of a large layer
    /// remembers 7,900 to about 17,000 keys and costs a hit as little whatever the capacity, and its counts
    /// start where they did on the ARC paper's P3 trace at 131,072 entries, whose 4× the model
    /// alone read 2 points low.
    static let standard = Parameters(minimumScale: 100, countedFrom: 2_048, countedFromCapacities: 1.5625)

    /// The smallest count limit for which a layer keeps a sample: below it, four times the
    /// capacity holds fewer than ``countedFrom`` sampled keys, so no count would be used.
    var minimumCapacity: Int { countedFrom * minimumScale / 4 }

    /// The keys one sampled key stands for in a layer of `capacity` entries.
    func scale(capacity: Int) -> Int {
      let scaled = Double(capacity) * countedFromCapacities / Double(countedFrom)
      return Swift.max(minimumScale, Int(Swift.min(scaled.rounded(.up), 0x1p30)))
    }

    /// The sampled hashes in a layer of `capacity` entries: the mixed hashes below this.
    func threshold(capacity: Int) -> UInt64 {
      let scale = scale(capacity: capacity)
      return scale <= 1 ? .max : UInt64.max / UInt64(scale)
    }

    /// The sampled keys a window must still count beyond to be past every size of the curve, in
    /// a layer of `capacity` entries: 1.5 times those of four times the capacity.
    func horizon(capacity: Int) -> Int {
      Int(Swift.min(Double(capacity) * 4 / Double(scale(capacity: capacity)) * 1.5, 0x1p30)) + 64
    }
  }

  /// The positions within which a segment records repeated accesses to a sampled key once
  /// (``ReuseSampler/recordAccess(_:in:)``).
  @inlinable static var repeatWindow: Int { 64 }

  /// The hash's bits, mixed so that the sample does not follow the bits segments and buckets
  /// are chosen by.
  @inlinable
  static func mixed(_ hash: Int) -> UInt64 {
    let mixed = UInt64(truncatingIfNeeded: hash) &* 0x9E37_79B9_7F4A_7C15
    return mixed ^ (mixed >> 31)
  }
}

/// The sampled accesses, in order, and where each sampled key was last used. Not thread-safe.
///
/// An access is O(log n) in the sampled keys it keeps; a count adds up to n / 512 block counts;
/// compaction is O(n), about once every horizon of accesses (for a layer of a million entries,
/// some 60,000 keys: well under a millisecond).
struct KeySampleState: Sendable {
  /// A latest access older than the marks: its position, its key, and whether it is still
  /// its key's latest.
  struct Sparse: Sendable {
    var position: Int
    var key: UInt64
    var isLive = true
  }

  /// The positions handed out so far: the next access's.
  var sequence = 0
  /// The position of the first bit of ``marks`` (a multiple of 512).
  var base = 0
  /// A bit per position from ``base``: set while that access is its key's latest.
  var marks: [UInt64] = []
  /// The set bits of ``marks``, by block of 8 words.
  var blockCounts: [Int32] = []
  /// The key of each access from ``base``, by position.
  var keysByPosition: [UInt64] = []
  /// The accesses before ``base`` that were their keys' latest when the marks moved past them,
  /// in order (a key not used for a long time). One whose key was used since is dead: its
  /// ``sparseLive`` bit is 0.
  var sparse: [Sparse] = []
  /// A Fenwick tree over ``sparse``: 1 for each live entry. Counts them before an index in
  /// O(log n), and ends one in O(log n).
  var sparseLive: [Int32] = []
  /// How many of ``sparse`` are live.
  var sparseLiveCount = 0
  /// The position below which the latest accesses were dropped (more than the horizon since): a
  /// window that starts there is past every size of the curve.
  var forgottenBefore = 0
  /// Each sampled key's latest position, by mixed hash (two keys whose hashes match count as
  /// one): a table of 16-byte slots that hashes nothing again, one probe per access.
  var latest = HashedTable<LatestAccess>()
  /// The word count of ``marks`` past which its older half moves to ``sparse``: about two
  /// horizons of positions (``init(horizon:)``).
  var compactionPoint: Int

  /// A state that keeps at least `horizon` latest accesses.
  init(horizon: Int) {
    compactionPoint = Swift.max(horizon / 32, 16)
  }

  /// Records an access to the sampled key of mixed hash `mixed`, keeping the newest `horizon`
  /// latest accesses at least. Stops at the last position `Int` holds (2^31 - 1 sampled
  /// accesses where `Int` has 32 bits: some 2 × 10^11 lookups).
  mutating func access(_ mixed: UInt64, horizon: Int) {
    guard sequence < Int.max else { return }
    let position = sequence
    if let previous = latest.updateValue(LatestAccess(position: position), forHash: mixed)?.position {
      if previous >= base {
        let offset = previous - base
        marks[offset >> 6] &= ~(1 << UInt64(offset & 63))
        blockCounts[offset >> 9] -= 1
      } else if previous >= forgottenBefore {
        let index = firstSparse(atLeast: previous)
        if index < sparse.count, sparse[index].position == previous { endSparse(at: index) }
      }
    }
    sequence += 1
    keysByPosition.append(mixed)
    let offset = position - base
    if offset >> 6 >= marks.count { marks.append(0) }
    if offset >> 9 >= blockCounts.count { blockCounts.append(0) }
    marks[offset >> 6] |= 1 << UInt64(offset & 63)
    blockCounts[offset >> 9] += 1
    if marks.count > compactionPoint { compact(horizon: horizon) }
  }

  /// The sampled keys used at or after `start` (a position), each once; `nil` when `start` is
  /// older than the sample keeps, which means more than its horizon of them.
  func keys(since start: Int) -> Int? {
    guard start >= forgottenBefore else { return nil }
    var count = sparseLiveCount - liveSparse(before: firstSparse(atLeast: start))
    let offset = Swift.max(start - base, 0)
    let firstWord = offset >> 6
    guard firstWord < marks.count else { return count }
    let firstBlock = offset >> 9
    for block in (firstBlock + 1)..<blockCounts.count { count += Int(blockCounts[block]) }
    let blockEnd = Swift.min((firstBlock + 1) << 3, marks.count)
    count += (marks[firstWord] >> UInt64(offset & 63)).nonzeroBitCount
    for word in (firstWord + 1)..<Swift.max(blockEnd, firstWord + 1) { count += marks[word].nonzeroBitCount }
    return count
  }

  /// The index of the first of ``sparse`` whose position is at least `position`.
  func firstSparse(atLeast position: Int) -> Int {
    var (low, high) = (0, sparse.count)
    while low < high {
      let middle = (low + high) / 2
      if sparse[middle].position < position { low = middle + 1 } else { high = middle }
    }
    return low
  }

  /// The live entries of ``sparse`` before `index`.
  func liveSparse(before index: Int) -> Int {
    var (node, count) = (index, 0)
    while node > 0 {
      count += Int(sparseLive[node - 1])
      node &= node - 1
    }
    return count
  }

  /// Ends the live entry of ``sparse`` at `index`: its key was used again.
  mutating func endSparse(at index: Int) {
    guard sparse[index].isLive else { return }
    sparse[index].isLive = false
    var node = index + 1
    while node <= sparseLive.count {
      sparseLive[node - 1] -= 1
      node += node & -node
    }
    sparseLiveCount -= 1
  }

  /// Moves the older half of the marks' blocks to ``sparse`` (dropping its dead entries), then
  /// forgets the oldest latest accesses beyond the newest `horizon`, and their keys.
  mutating func compact(horizon: Int) {
    var kept = sparse.filter { $0.isLive }
    let moved = blockCounts.count / 2
    for word in 0..<Swift.min(moved << 3, marks.count) {
      var bits = marks[word]
      while bits != 0 {
        let offset = (word << 6) + bits.trailingZeroBitCount
        kept.append(Sparse(position: base + offset, key: keysByPosition[offset]))
        bits &= bits &- 1
      }
    }
    marks.removeFirst(Swift.min(moved << 3, marks.count))
    blockCounts.removeFirst(moved)
    keysByPosition.removeFirst(Swift.min(moved << 9, keysByPosition.count))
    base += moved << 9
    let dense = blockCounts.reduce(0) { $0 + Int($1) }
    let excess = kept.count + dense - horizon
    // Only sparse entries are forgotten: when the dense half alone holds more than the horizon
    // (a loop over a few more keys than it), there may be none.
    if excess > 0, !kept.isEmpty {
      let dropped = Swift.min(excess, kept.count)
      for entry in kept[..<dropped] where latest[entry.key]?.position == entry.position {
        latest.removeValue(forHash: entry.key)
      }
      forgottenBefore = kept[dropped - 1].position + 1
      kept.removeFirst(dropped)
    }
    sparse = kept
    sparseLiveCount = kept.count
    // A Fenwick tree of ones: node i counts the entries (i - lowbit(i), i].
    sparseLive = kept.indices.map { Int32(($0 + 1) & -($0 + 1)) }
    compactionPoint = Swift.max(marks.count * 2, compactionPoint)
  }
}

/// A sampled key's latest access in a ``KeySampleState``: its position, never negative, so that
/// `Int.min` marks an empty slot.
struct LatestAccess: HashedTableValue {
  @usableFromInline var position: Int

  @usableFromInline static var vacant: LatestAccess { LatestAccess(position: .min) }
  @usableFromInline var isVacant: Bool { position == .min }
}
