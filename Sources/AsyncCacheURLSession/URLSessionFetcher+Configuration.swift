public import AsyncCache

extension URLSessionFetcher {
  /// The limits a ``URLSessionFetcher`` puts on every fetch, whatever the server does.
  ///
  /// The defaults bound every fetch in time and memory, so that a slow, trickling or endless
  /// server costs a transfer at most ``timeLimit`` and ``maximumBodySize``:
  ///
  /// ```swift
  /// let origin = URLSessionFetcher(
  ///   session: session,
  ///   configuration: .init(timeLimit: .seconds(10), maximumBodySize: 8 << 20))
  /// ```
  ///
  /// For servers you do not trust, also turn off ``reusesConnections``; on Linux, read
  /// <doc:UntrustedServers> first.
  public struct Configuration: Sendable {
    /// The longest a fetch may take, from the call of ``URLSessionFetcher/fetch(_:)`` to the last
    /// byte of the body, measured on ``clock``; `nil` for no limit. Default 30 s.
    ///
    /// Past it the transfer is cancelled and the fetch throws
    /// ``URLSessionFetcherError/Code/timeLimitExceeded``, a transient error. Unlike the session's
    /// `timeoutIntervalForRequest`, which starts again with every byte that arrives (so a server
    /// that sends one byte a second is never timed out), this limit holds however the server
    /// dribbles its answer. A limit of zero or less fails every fetch at once.
    public var timeLimit: Duration?
    /// The largest response body a fetch accepts, in bytes. Default 64 MiB.
    ///
    /// A body over it fails the fetch with ``URLSessionFetcherError/Code/bodyTooLarge``, a fatal
    /// error, as soon as its declared `Content-Length` or the bytes received so far exceed the
    /// limit: the fetcher stops the transfer rather than wait for the rest. A compressed body
    /// counts in decoded bytes. On Linux the check runs as the bytes arrive; on Apple platforms
    /// it runs where the session hands the body to the task's delegate as it arrives, and always
    /// before a body is returned. See <doc:UntrustedServers> for what this cannot prevent.
    /// Values below zero count as zero.
    public var maximumBodySize: Int
    /// Whether fetches share the session's connections. Default `true`.
    ///
    /// `false` runs each fetch on a session of its own, made from the session's configuration
    /// and invalidated when the fetch ends: no connection outlives its fetch, so a server that
    /// sends an extra response on a kept-alive connection cannot have it taken for the answer to
    /// the next URL (which FoundationNetworking on Linux does; see <doc:UntrustedServers>). It
    /// costs a new connection (and TLS handshake) per fetch, and the session's delegate is not
    /// consulted. Use it for servers you do not trust.
    public var reusesConnections: Bool
    /// The clock ``timeLimit`` is measured on, and a response's age reckoned on. Default
    /// `WallClock`; tests inject a `ManualClock`.
    public var clock: any CacheClock
    /// Whether a response's own freshness (`Cache-Control: max-age`, `s-maxage`, `Expires`,
    /// less its age) is its entry's lifetime, bounded by the cache's: see
    /// ``URLSessionFetcher/fetchEntry(_:current:)``. Default
    /// ``URLSessionFetcher/ResponseFreshness/ignored``: the cache's lifetime for every entry.
    public var responseFreshness: ResponseFreshness

    /// Creates a configuration.
    ///
    /// - Parameters:
    ///   - timeLimit: The longest a fetch may take; `nil` for no limit. Default 30 s.
    ///   - maximumBodySize: The largest response body accepted, in bytes. Default 64 MiB.
    ///   - reusesConnections: Whether fetches share the session's connections. Default `true`.
    ///   - clock: The clock the time limit is measured on. Default `WallClock`.
    ///   - responseFreshness: Whether a response's freshness is its entry's lifetime. Default
    ///     ``URLSessionFetcher/ResponseFreshness/ignored``.
    public init(
      timeLimit: Duration? = .seconds(30),
      maximumBodySize: Int = 64 << 20,
      reusesConnections: Bool = true,
      clock: any CacheClock = WallClock(),
      responseFreshness: ResponseFreshness = .ignored
    ) {
      self.timeLimit = timeLimit
      self.maximumBodySize = maximumBodySize
      self.reusesConnections = reusesConnections
      self.clock = clock
      self.responseFreshness = responseFreshness
    }
  }
}
