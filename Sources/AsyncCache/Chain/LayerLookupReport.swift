/// One lookup of one layer by a chain's read: which layer, what it found and how long it took,
/// delivered to ``CacheChain/Configuration-swift.struct/onLookup`` (or a cache's
/// ``LoadingCache/Configuration-swift.struct/onLayerLookup``), none lost: what a metrics
/// reporter records as a per-layer latency histogram.
///
/// Reads that look layers up are a chain's own (``CacheChain/value(for:)``) and a cache's loads.
/// A lookup cut short by a cancellation (a load its requests abandoned) is not reported.
/// A hit that a cache's top ``MemoryLayer`` answers without suspending is not a lookup of the
/// chain (a hit costs nothing more for the reports): count those with
/// ``LoadingCache/Statistics-swift.struct/topLayerHits``.
///
/// ```swift
/// configuration: .init(onLayerLookup: { lookup in
///     print(lookup.layerName, lookup.outcome, lookup.duration)
/// })
/// ```
public struct LayerLookupReport: Sendable {
  /// What the layer answered.
  public enum Outcome: Sendable, CustomStringConvertible {
    /// An entry (stale or not; an entry invalidated by tag is a miss).
    case hit
    /// No entry.
    case miss
    /// The layer threw.
    case failed(any Error)

    /// A short name for the outcome, for a metric's label: `hit`, `miss` or `failed`.
    public var name: String {
      switch self {
      case .hit: "hit"
      case .miss: "miss"
      case .failed: "failed"
      }
    }

    /// The error the layer threw; `nil` for a hit or a miss.
    public var error: (any Error)? {
      if case .failed(let error) = self { error } else { nil }
    }

    /// The ``error``'s type, for OpenTelemetry's `error.type` attribute: its type's name,
    /// `AsyncCacheError.<code>` for the library's own errors; `nil` without an error.
    public var errorType: String? { error.map(openTelemetryErrorType) }

    public var description: String {
      switch self {
      case .hit, .miss: name
      case .failed(let error): "failed: \(error)"
      }
    }
  }

  /// The position of the layer in the chain, 0 being the top.
  public var tierIndex: Int
  /// The layer's name in the chain (its type unless the tier was given a name).
  public var layerName: String
  /// What it answered.
  public var outcome: Outcome
  /// How long the lookup took, on the chain's clock.
  public var duration: Duration

  /// Creates a report.
  public init(tierIndex: Int, layerName: String, outcome: Outcome, duration: Duration) {
    self.tierIndex = tierIndex
    self.layerName = layerName
    self.outcome = outcome
    self.duration = duration
  }
}

/// Where a chain's lookups are reported.
package typealias LayerLookupObserver = @Sendable (LayerLookupReport) -> Void
