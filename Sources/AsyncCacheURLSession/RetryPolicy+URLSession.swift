public import AsyncCache

extension RetryPolicy {
  /// A policy that retries the transient failures of a ``URLSessionFetcher`` (timeouts, lost
  /// connections, 408, 429, 5xx) and fails at once on fatal ones (404, 410, other 4xx, bad
  /// URLs, bodies over the size limit), as ``URLSessionFetcher/classify(_:)`` sorts them.
  ///
  /// A 429 or 503 with a `Retry-After` is asked again no sooner than the server said
  /// (``URLSessionFetcher/retryAfter(_:)``); one that asks for more than `maximumDelay` is not
  /// retried, and the load fails with it. Raise `maximumDelay` to wait longer.
  ///
  /// ```swift
  /// let cache = try LoadingCache(
  ///   layers: [MemoryLayer<URL, Data>()], origin: URLSessionFetcher(),
  ///   configuration: .init(retryPolicy: .urlSession(maximumAttempts: 4)))
  /// ```
  ///
  /// - Parameters:
  ///   - maximumAttempts: The most origin calls per load, at least 1. Default 3.
  ///   - initialDelay: The delay before the first retry. Default 100 ms.
  ///   - multiplier: The factor each further delay grows by, at least 1. Default 2.
  ///   - maximumDelay: The longest delay. Default 10 s.
  ///   - jitter: The random share of each delay, in 0...1. Default 0.2.
  /// - Returns: A policy whose `classify` is ``URLSessionFetcher/classify(_:)`` and whose
  ///   `retryAfter` is ``URLSessionFetcher/retryAfter(_:)``.
  public static func urlSession(
    maximumAttempts: Int = 3,
    initialDelay: Duration = .milliseconds(100),
    multiplier: Double = 2,
    maximumDelay: Duration = .seconds(10),
    jitter: Double = 0.2
  ) -> RetryPolicy {
    RetryPolicy(
      maximumAttempts: maximumAttempts, initialDelay: initialDelay, multiplier: multiplier,
      maximumDelay: maximumDelay, jitter: jitter, classify: { URLSessionFetcher.classify($0) },
      retryAfter: { URLSessionFetcher.retryAfter($0) })
  }
}
