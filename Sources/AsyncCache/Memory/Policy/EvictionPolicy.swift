/// How a ``MemoryLayer`` chooses the entries that leave when it is full.
///
/// - ``adaptive``, the default: W-TinyLFU whose admission window is sized by the keys that come
///   back soon after they left. It needs no hint about the workload: on skewed traffic, scans
///   and loops it keeps what W-TinyLFU keeps; on recency-biased traffic (new keys read a few
///   times soon after they appear, then never) its window grows until it keeps what LRU keeps;
///   between the two (database and storage traces) it matches or beats ARC; and when the
///   workload turns from recency to frequency, the window goes back toward 1%. See the table
///   below.
/// - ``windowTinyLFU``: W-TinyLFU (Einziger, Friedman and Manes; Caffeine's design) with its
///   admission window fixed at 1% of the capacity. After the window, an entry stays only if it
///   is more popular than the one it would displace, judged by a frequency sketch that forgets
///   slowly. Popular entries survive scans; but on recency-biased traffic it turns new keys
///   away in favour of keys whose reads are over, and loses up to 60 points to LRU.
/// - ``leastRecentlyUsed``: the entry used longest ago leaves. The cheapest hit and the
///   smallest entry (no sketch); but one pass over many keys used once (a scan, a batch job, a
///   crawler) flushes the whole working set, and on storage and search traces it gives away up
///   to 25 points.
///
/// ``adaptive`` replaces `windowTinyLFU(adaptiveWindow: true)`, whose hill climber sampled 15 ×
/// the capacity between two moves (so a large cache hardly adapted, and a recency-biased
/// workload still lost up to 45 points to LRU); that spelling is gone: use ``adaptive`` or
/// ``windowTinyLFU``.
///
/// Hit ratios (%) from `cache.hitRatio` (the layer with its automatic segment count, 32
/// segments on the 2-core machine that measured it; ARC and OPT are reference simulators; the
/// real traces are the ARC paper's):
///
/// | trace @ capacity | LRU | ARC | `.windowTinyLFU` | `.adaptive` | OPT |
/// |---|---|---|---|---|---|
/// | ARC paper P3 (workstation disk) @ 32,768 | 3.57 | 17.11 | 18.88 | 19.36 | 32.25 |
/// | ARC paper OLTP (database) @ 1,000 | 32.83 | 38.95 | 36.01 | 41.17 | 53.62 |
/// | ARC paper OLTP @ 15,000 | 64.63 | 65.40 | 62.20 | 66.04 | 75.14 |
/// | Zipf 0.99 @ 10,000 | 56.56 | 64.14 | 64.91 | 64.95 | 70.28 |
/// | Zipf 0.99 with scans @ 10,000 | 43.90 | 51.34 | 51.62 | 51.65 | 56.17 |
/// | loop of 120k keys @ 50,000 | 0 | 0 | 36.13 | 35.34 | 37.50 |
/// | recency-biased @ 10,000 | 74.48 | 74.62 | 37.91 | 73.67 | 74.97 |
/// | Zipf 0.99 whose hot set moves @ 100,000 | 74.29 | 73.75 | 68.05 | 74.16 | 77.42 |
///
/// On each of the benchmark's 32 rows, ``adaptive`` is within 1 point of the best of LRU, ARC
/// and ``windowTinyLFU``, and above it on the database trace. The synthetic traces are 4M
/// accesses long: the window needs some thousands of misses to move, so a short burst of
/// recency-biased traffic still trails LRU by a few points.
///
/// A hit costs the same under ``adaptive`` and ``windowTinyLFU`` (the sketch's count of the
/// use, queued, and a move in its list), a little more than under LRU; the adaptation works
/// only when an entry leaves or a new key arrives. The sketch costs 16 bytes an entry for the
/// first 4,096 entries of each segment and 8 bytes beyond (``windowTinyLFU``: 16 throughout), the
/// ghosts about 0.3 byte: a 1M-entry `Int → Int` layer takes 62.5 bytes an entry
/// (`memory.bytesPerEntry`; LRU 54, ``windowTinyLFU`` 70).
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

  /// W-TinyLFU with an admission window that adapts to the workload; the default. See
  /// ``EvictionPolicy``.
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
