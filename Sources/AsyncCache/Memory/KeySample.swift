// What more memory would buy, for long reuses: how many distinct keys a watched lookup's key
// waited behind, counted in a spatial sample of one key in a hundred, or fewer in a large layer
// (SHARDS: Waldspurger et al., "Efficient MRC Construction with SHARDS", FAST 2015).
//
// The average eviction time model (`HitRatioCurve`) turns a reuse time into the keys an LRU cache
// holds meanwhile by assuming that a window of a given length holds about the same number of
// distinct keys wherever it falls. Over long windows real traces break that: in the ARC paper's
// P3 trace, at four times 131,072 entries, the model said 77.5% where LRU hits 79.6%, in every
// run. The sample counts the distinct keys of each window instead. A count of n sampled keys
// estimates n times the scale (100 keys, or more in a large layer) within about 1/sqrt(n): the
// curve uses it from 2,048 sampled keys (within 2.2%), the model below.

import Synchronization

/// The layer's spatial sample of keys: every access to a key whose hash falls below the
/// ``threshold`` (the lowest hundredth, or less in a layer of more than 131,072 entries), in order, and for each such key where its latest access is; shared by the layer's
/// segments (each reads it under its own lock, then this one's), so that a window's count covers
/// the whole layer whatever the segment count.
///
/// Positions are the sampled accesses' order. A bit per position says whether that access is
/// still its key's latest; the set bits at or after a watch's start are the sampled keys used
/// since. Counts by block of 512 positions keep a query to at most 8 words' bits and a sum.
@usableFromInline
final class KeySample: Sendable {
  /// The sampled hashes: below this, once mixed (``mixed(_:)``).
  @usableFromInline let threshold: UInt64
  /// The keys one sampled key stands for.
  @usableFromInline let scale: Int
  /// The fewest sampled keys in a window for the curve to use the window's count.
  @usableFromInline let countedFrom: Int
  /// The sampled keys a window must still count beyond to be past every size of the curve
  /// (``Parameters/horizon(capacity:)``).
  let horizon: Int
  let state: Locked<KeySampleState>
  /// The state's ``KeySampleState/sequence``, published for reading without the lock.
  let published = Atomic<Int>(0)

  /// A sample for a layer of `capacity` entries.
  init(capacity: Int, parameters: Parameters = .standard) {
    threshold = parameters.threshold(capacity: capacity)
    scale = parameters.scale(capacity: capacity)
    countedFrom = parameters.countedFrom
    horizon = parameters.horizon(capacity: capacity)
    state = Locked(KeySampleState(horizon: horizon))
  }

  /// The position the next access will have: where a watch that starts now counts from. Read
  /// without the lock.
  @usableFromInline var position: Int { published.load(ordering: .acquiring) }

  /// Records an access to the sampled key of mixed hash `mixed`.
  @usableFromInline
  func access(_ mixed: UInt64) {
    state.withLock { state in
      state.access(mixed, horizon: horizon)
      published.store(state.sequence, ordering: .releasing)
    }
  }

  /// The sampled keys used at or after `start` (a ``position``), each once; `nil` when `start`
  /// is older than the sample keeps, which means more than ``horizon`` of them.
  @usableFromInline
  func keys(since start: Int) -> Int? {
    state.withLock { $0.keys(since: start) }
  }
}
