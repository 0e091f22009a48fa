/// How long a request of a ``LoadingCache`` waits for a slow load: per cache
/// (``LoadingCache/Configuration-swift.struct/loadTimeouts``), or per request
/// (``LoadingCache/value(for:timeouts:)``). See <doc:Semantics> for how they keep the rules of
/// coalescing and cancellation.
///
/// ```swift
/// // A stale price after 200 ms rather than a slow page; an error after 2 s rather than a hang.
/// let prices = try LoadingCache(
///     layers: [MemoryLayer<String, Price>()], origin: pricing,
///     configuration: .init(
///         timeToLive: .seconds(60), staleIfError: .seconds(600),
///         loadTimeouts: LoadTimeouts(soft: .milliseconds(200), hard: .seconds(2))))
/// ```
///
/// Both are measured on the cache's clock from the moment the request starts waiting for a
/// load; a hit never waits, so it never times out. The configured timeouts apply to each key of
/// a bulk request too; prefetches have none.
public struct LoadTimeouts: Hashable, Sendable {
  /// After waiting this long, a request gets the stale value the cache holds for the key (an
  /// entry past its lifetime that may still be served, within
  /// ``LoadingCache/Configuration-swift.struct/staleIfError``), if there is one, found in any
  /// layer by the load. The load goes on in the background, owned by the cache; its value is
  /// stored when it arrives, unless a write overtook it. Without a stale value the request
  /// goes on waiting (for the load, or up to ``hard``), and gets one as soon as the load finds
  /// it. `nil` (the default): never.
  public var soft: Duration?
  /// After waiting this long, a request fails with ``AsyncCacheError/Code/timedOut``. The load
  /// is cancelled only if no other request or prefetch waits for it, as when the request is
  /// cancelled. `nil` (the default): never.
  public var hard: Duration?

  /// Creates timeouts; `nil` for none.
  public init(soft: Duration? = nil, hard: Duration? = nil) {
    self.soft = soft
    self.hard = hard
  }

  /// No timeout: a request waits for its load as long as the load takes.
  public static var none: LoadTimeouts { LoadTimeouts() }

  /// Whether any timeout is set.
  @inlinable
  public var isEnabled: Bool { soft != nil || hard != nil }

  /// Throws ``AsyncCacheError/Code/invalidConfiguration`` naming a timeout that is not positive,
  /// or a soft timeout that is not shorter than the hard one (it could never apply).
  func validate(in owner: String) throws {
    if let soft, soft <= .zero {
      throw AsyncCacheError.invalidConfiguration("\(owner) soft timeout is \(soft.readable); it must be positive")
    }
    if let hard, hard <= .zero {
      throw AsyncCacheError.invalidConfiguration("\(owner) hard timeout is \(hard.readable); it must be positive")
    }
    if let soft, let hard, soft >= hard {
      throw AsyncCacheError.invalidConfiguration(
        "\(owner) soft timeout (\(soft.readable)) must be shorter than the hard timeout (\(hard.readable)), or it never applies"
      )
    }
  }
}
