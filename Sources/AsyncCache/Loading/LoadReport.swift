/// How one load of a key ended: what a metrics reporter records, delivered to the cache's
/// ``LoadingCache/Configuration-swift.struct/onLoadEnded`` once per load, none lost.
///
/// A load is the shared work of the requests, prefetches and refreshes of one key (see
/// <doc:Semantics>): a cache that answers 1,000 requests with one load reports one load. Hits
/// are not loads; read them from ``LoadingCache/statistics``.
///
/// ```swift
/// configuration: .init(onLoadEnded: { load in
///     print(load.key, load.outcome, load.duration)
/// })
/// ```
public struct LoadReport<Key: Hashable & Sendable>: Sendable {
  /// How a load ended.
  public enum Outcome: Sendable, CustomStringConvertible {
    /// With a value from `source`: a layer below the top, or the origin.
    case loaded(from: LoadSource)
    /// With an error, which its requests got.
    case failed(any Error)
    /// With an error, after which its requests got the stale value the layers held instead
    /// (see ``LoadingCache/Configuration-swift.struct/staleIfError``).
    case servedStale(after: any Error)
    /// Abandoned: every request and prefetch that waited for it left, and it was cancelled.
    case cancelled

    /// A short name for the outcome, for a metric's label: `loaded`, `failed`, `servedStale`
    /// or `cancelled`.
    public var name: String {
      switch self {
      case .loaded: "loaded"
      case .failed: "failed"
      case .servedStale: "servedStale"
      case .cancelled: "cancelled"
      }
    }

    /// The error the load failed with (also when it served a stale value after it); `nil`
    /// when it loaded a value or was cancelled.
    public var error: (any Error)? {
      switch self {
      case .failed(let error), .servedStale(after: let error): error
      case .loaded, .cancelled: nil
      }
    }

    /// The ``error``'s type, for OpenTelemetry's `error.type` attribute (a low-cardinality
    /// label): its type's name, `AsyncCacheError.<code>` for the library's own errors; `nil`
    /// without an error.
    public var errorType: String? { error.map(openTelemetryErrorType) }

    public var description: String {
      switch self {
      case .loaded(let source): "loaded from \(source)"
      case .failed(let error): "failed: \(error)"
      case .servedStale(let error): "servedStale after: \(error)"
      case .cancelled: "cancelled"
      }
    }
  }

  /// The key loaded.
  public var key: Key
  /// How the load ended.
  public var outcome: Outcome
  /// How long the load took on the cache's clock, from its start to its end: waits for urgent
  /// work and retry delays included.
  public var duration: Duration
  /// How many times the load asked the origin (0 when a layer below the top answered, or it
  /// failed before reaching the origin).
  public var attempts: Int
  /// Whether the load was a background refresh of a stale or aging entry.
  public var isRefresh: Bool
  /// Who answered, for a metric's label: the name of the layer the value came from (its name in
  /// the chain, as in ``LoadingCache/Statistics-swift.struct/layers``), `"origin"` when the
  /// origin answered (revalidations included); `nil` when the load brought no value. A load that
  /// served a stale value after an error names the layer that held it.
  public var sourceName: String?

  /// Where the value came from when the load brought one: the index of a layer below the top,
  /// or the origin; `nil` otherwise.
  public var source: LoadSource? {
    if case .loaded(let source) = outcome { source } else { nil }
  }

  /// Creates a report.
  public init(
    key: Key, outcome: Outcome, duration: Duration, attempts: Int, isRefresh: Bool, sourceName: String? = nil
  ) {
    self.key = key
    self.outcome = outcome
    self.duration = duration
    self.attempts = attempts
    self.isRefresh = isRefresh
    self.sourceName = sourceName
  }
}

extension LoadSource {
  /// A short name for the source, for a metric's label: `origin`, `revalidated`, or `layer1`,
  /// `layer2`, …
  public var name: String {
    switch self {
    case .origin: "origin"
    case .revalidated: "revalidated"
    case .layer(let index): "layer\(index)"
    }
  }
}
