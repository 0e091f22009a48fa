/// How a ``MemoryLayer`` chooses the entries that leave when it is full.
///
/// - ``leastRecentlyUsed``: the entry used longest ago leaves. Cheapest on the hit path, and
///   right for workloads where recency is all that matters; but one pass over many keys used
///   once (a scan, a batch job, a crawler) flushes the whole working set. The default.
/// - ``windowTinyLFU``: W-TinyLFU (Einziger, Friedman and Manes; Caffeine's design). A small
///   admission window keeps new entries for a moment; after it, an entry stays only if it is
///   more popular than the one it would displace, judged by a frequency sketch that forgets
///   slowly. Popular entries survive scans, and on skewed workloads the hit ratio is well above
///   LRU's (see `cache.hitRatio` in the benchmarks). A hit costs a little more: it finds the
///   key's counters and prefetches their cache line, and the counting is done 16 hits at a
///   time (`memory.policy.hit`: 1.23 to 1.30× LRU's hit with 100k keys drawn uniformly,
///   some 9 ns). Each entry costs 8 to 16 bytes more for the sketch.
///
/// LRU is the default because it keeps the two promises of the hit path: a `LoadingCache` hit
/// within 2× a dictionary behind a lock, and an entry within 64 bytes (`memory.hit.1task`,
/// `memory.bytesPerEntry`). Choose W-TinyLFU when a miss is expensive (an origin call) and the
/// workload is skewed or has scans: a few nanoseconds per hit buy back far more in misses.
///
/// Either way, entries expire, are removed and count against the limits in the same way, and
/// the entry an insert writes is never the one it evicts.
///
/// ```swift
/// let memory = try MemoryLayer<URL, Data>(configuration: .init(
///     countLimit: 10_000,
///     evictionPolicy: .windowTinyLFU))
/// ```
public struct EvictionPolicy: Sendable, Hashable, CustomStringConvertible {
  @usableFromInline
  enum Kind: Sendable, Hashable {
    case leastRecentlyUsed
    case windowTinyLFU(adaptiveWindow: Bool)
  }

  @usableFromInline let kind: Kind

  @inlinable
  init(_ kind: Kind) {
    self.kind = kind
  }

  /// Least recently used: the entry used longest ago leaves first.
  public static var leastRecentlyUsed: EvictionPolicy { EvictionPolicy(.leastRecentlyUsed) }

  /// W-TinyLFU with an admission window of 1% of the capacity.
  public static var windowTinyLFU: EvictionPolicy { EvictionPolicy(.windowTinyLFU(adaptiveWindow: false)) }

  /// W-TinyLFU whose admission window is fixed at 1% of the capacity or, with
  /// `adaptiveWindow`, moved by hill climbing on the hit rate: it grows when recency pays
  /// (loops, bursts of new keys) and shrinks when frequency does.
  public static func windowTinyLFU(adaptiveWindow: Bool) -> EvictionPolicy {
    EvictionPolicy(.windowTinyLFU(adaptiveWindow: adaptiveWindow))
  }

  public var description: String {
    switch kind {
    case .leastRecentlyUsed: "leastRecentlyUsed"
    case .windowTinyLFU(let adaptiveWindow): adaptiveWindow ? "windowTinyLFU(adaptiveWindow: true)" : "windowTinyLFU"
    }
  }
}
