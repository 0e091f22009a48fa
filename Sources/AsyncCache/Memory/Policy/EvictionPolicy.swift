/// How a ``MemoryLayer`` chooses the entries that leave when it is full.
///
/// - ``adaptive``, the default: W-TinyLFU whose configuration follows the workload, with runs
///   that agree whatever the random seeds (see the figures below).
///   - A layer of at most 4,096 entries bounded by its count alone (one segment, which the
///     automatic segment count gives it) is *refereed*: six configurations run side by side on shadow lists of the layer's
///     keys, fed every access, and the layer runs the one that hits most. They are W-TinyLFU
///     (frequency, a 1% window), the same with a stricter admission (a candidate must be counted
///     at least two counts more often than its victim, so that a loop or a sweep whose keys tie
///     holds still instead of churning on the sketch's noise), a window of a fifth of the cache,
///     one of nearly all of it (LRU's behaviour), ARC's behaviour (a segmented LRU that admits
///     everything), and a lenient admission that lets ties in. The layer starts with the strict
///     one and switches only on evidence: after its first three turnovers, when the leader's
///     lead over the running configuration exceeds three times its own noise, plus a margin
///     that doubles with each recent switch. Scores fade over 32 turnovers (and at least 8,192
///     accesses); a change of workload is seen over half that and followed, unless the workload
///     goes back within two full horizons (a cycle: the layer goes back too, and follows no
///     change for eight). At 1,000 entries, a frequency phase after a recency phase is followed
///     within 40 to 80 turnovers. See `PolicyReferee` in the sources.
///   - A larger layer, or one of several segments, sizes W-TinyLFU's window by the keys that
///     come back soon after they left (ghosts): on skewed traffic, scans and loops it keeps what
///     W-TinyLFU keeps; on recency-biased traffic its window grows until it keeps what LRU keeps;
///     between the two (database and storage traces) it matches or beats ARC.
/// - ``windowTinyLFU``: W-TinyLFU (Einziger, Friedman and Manes; Caffeine's design) with its
///   admission window fixed at 1% of the capacity. After the window, an entry stays only if it
///   is more popular than the one it would displace, judged by a frequency sketch that forgets
///   slowly. Popular entries survive scans; but on recency-biased traffic it turns new keys
///   away in favour of keys whose reads are over, and loses up to 60 points to LRU; and on keys
///   read equally often (a loop, a sweep) a candidate wins its duel by the sketch's noise, so
///   its hit ratio there depends on the process's hash seed (6.9% to 33.6% over five runs of
///   LIRS2's `backf` at 400 entries, where LRU scores 48.9%).
/// - ``leastRecentlyUsed``: the entry used longest ago leaves. The cheapest hit and the
///   smallest entry (no sketch); but one pass over many keys used once (a scan, a batch job, a
///   crawler) flushes the whole working set, and on storage and search traces it gives away up
///   to 25 points.
///
/// Hit ratios (%) from `cache.hitRatio`: the adaptive layer's worst of five runs, each in a
/// fresh process with its own hash seed and admission seed, as users run it; W-TinyLFU's median
/// of five; ARC and OPT (Belady's, with bypass) are reference simulators. The LIRS traces are
/// the LIRS and LIRS2 papers' suite, the others the ARC paper's and synthetic ones:
///
/// | trace @ capacity | LRU | ARC | `.windowTinyLFU` | `.adaptive` (worst) | OPT |
/// |---|---|---|---|---|---|
/// | LIRS `loop` (1,011 keys in a cycle) @ 1,000 | 0 | 0 | 87.94 | 97.72 | 98.71 |
/// | LIRS `zigzag` (sweeps up and down) @ 1,000 | 48.03 | 46.11 | 37.67 | 47.78 | 48.08 |
/// | LIRS2 `backf` (sweeps forward and back) @ 400 | 48.89 | 45.01 | 15.43 | 48.59 | 48.89 |
/// | LIRS `sprite` (a file system) @ 500 | 78.30 | 77.37 | 73.22 | 78.25 | 87.89 |
/// | LIRS `cs` (loops over a source tree) @ 100 | 1.83 | 1.83 | 2.34 | 6.72 | 7.73 |
/// | recency-biased @ 1,000 | 54.46 | 54.78 | 19.15 | 54.36 | 68.48 |
/// | ARC paper OLTP (database) @ 1,000 | 32.83 | 38.95 | 36.00 | 41.58 | 53.62 |
/// | ARC paper OLTP @ 15,000 | 64.63 | 65.40 | 62.23 | 65.97 | 75.14 |
/// | ARC paper P3 (workstation disk) @ 32,768 | 3.57 | 17.11 | 19.35 | 19.33 | 32.25 |
/// | Zipf 0.99 @ 10,000 | 56.56 | 64.14 | 64.88 | 64.95 | 70.28 |
/// | loop of 120k keys @ 50,000 | 0 | 0 | 36.06 | 35.36 | 37.50 |
/// | recency-biased @ 10,000 | 74.48 | 74.62 | 37.93 | 73.60 | 74.97 |
/// | Zipf 0.99 whose hot set moves @ 100,000 | 74.29 | 73.75 | 67.98 | 74.18 | 77.42 |
///
/// On all 71 rows of the benchmark the worst of five runs is within 3 points of the best of
/// LRU, ARC and W-TinyLFU, and the five runs within 1.2 points of each other (on 62 rows, the
/// worst run within 1 point; 62 and 64 in two full runs). The furthest: P3 at 100,000 entries,
/// 2.4 to 2.6 below ARC (the ghosts' regime: there ARC gains by admitting every new block, and
/// no window size does that), and the LIRS mix `multi3` at 400 entries, 1.7 to 1.9 below
/// W-TinyLFU (a trace of 30,000 accesses, where W-TinyLFU's own runs differ by up to 0.6).
///
/// Costs. A hit under ``adaptive`` in a large layer costs what it costs under ``windowTinyLFU``
/// (the sketch's count of the use, queued, and a move in its list), a little more than under
/// LRU; the ghosts work only when an entry leaves or a new key arrives. A refereed layer makes
/// every access an access of its six shadows too, under the layer's one lock: a hit in a layer
/// of 1,000 or 4,096 entries took 140 to 150 ns against 45 to 47 for ``windowTinyLFU``
/// (`memory.policy.smallHit`), and the shadows take 16 to 20 bytes per entry each (96 to 120 in
/// all: 384 KiB at 4,096 entries), allocated at the layer's first insert and released by a
/// critical memory pressure, and its sketch is denser (256 bytes per entry up to 32 KiB, so
/// that its keys rarely share counters). Otherwise the sketch costs 16 bytes an entry for
/// the first 4,096 entries of each segment and 8 bytes beyond (``windowTinyLFU``: 16
/// throughout), the ghosts about 0.3 byte: a 1M-entry `Int → Int` layer takes 62.6 bytes an
/// entry (`memory.bytesPerEntry`; LRU 52.5, ``windowTinyLFU`` 70.9).
///
/// Under both W-TinyLFU policies, a running ``AsyncPrefetcher`` whose values go to the layer
/// keeps room in its admission window until it stops: twice its reach on each side it loads
/// (offset plus range: the keys loaded ahead, and those read since the oldest of them was
/// loaded), at most half the layer. An item loaded ahead has not been read yet, and would
/// otherwise lose its place at admission to the items already read: the `prefetch.gallery`
/// benchmark (a layer of 100, 5 items ahead, the default policy) finds 99.5% of the items in
/// memory on arrival, against 49% without the room.
///
/// Whatever the policy, entries expire, are removed and count against the limits in the same
/// way, and the entry an insert writes is never the one it evicts.
///
/// ```swift
/// let memory = try MemoryLayer<URL, Data>(configuration: .init(
///     countLimit: 10_000,
///     evictionPolicy: .leastRecentlyUsed))
/// ```
public struct EvictionPolicy: Sendable, Hashable, CustomStringConvertible {
  @usableFromInline
  enum Kind: Sendable, Hashable {
    case leastRecentlyUsed
    case windowTinyLFU
    case adaptive
  }

  @usableFromInline let kind: Kind

  @inlinable
  init(_ kind: Kind) {
    self.kind = kind
  }

  /// W-TinyLFU whose configuration follows the workload: chosen among six by shadow caches in a
  /// layer of at most 4,096 entries, its window sized by returning keys in a larger one; the
  /// default. See ``EvictionPolicy``.
  public static var adaptive: EvictionPolicy { EvictionPolicy(.adaptive) }

  /// Least recently used: the entry used longest ago leaves first.
  public static var leastRecentlyUsed: EvictionPolicy { EvictionPolicy(.leastRecentlyUsed) }

  /// W-TinyLFU with an admission window fixed at 1% of the capacity.
  public static var windowTinyLFU: EvictionPolicy { EvictionPolicy(.windowTinyLFU) }

  public var description: String {
    switch kind {
    case .leastRecentlyUsed: "leastRecentlyUsed"
    case .windowTinyLFU: "windowTinyLFU"
    case .adaptive: "adaptive"
    }
  }
}
