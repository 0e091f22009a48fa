/// When and how often a ``LoadingCache`` tries its origin again after it fails.
///
/// One retry loop runs per key, inside the key's load, so every request waiting for the key
/// shares it: three waiters and two retries make three origin calls, not nine. The delays are
/// slept on the cache's clock (a `ManualClock` in tests), and a load whose last waiter leaves is
/// cancelled during its delay as at any other time.
///
/// ```swift
/// let policy = RetryPolicy(
///     maximumAttempts: 4, initialDelay: .milliseconds(200), maximumDelay: .seconds(5),
///     classify: { error in (error as? HTTPError)?.status == 404 ? .fatal : .transient },
///     retryAfter: { error in (error as? HTTPError)?.retryAfter })
/// ```
///
/// An origin that says when to come back (an HTTP `Retry-After`) is asked again no sooner than
/// that: ``retryAfter`` reads the delay from the error, and a retry waits the longer of it and
/// the computed delay. One that asks for more than ``maximumDelay`` ends the retries at once:
/// the load fails with its error rather than keep its requests waiting that long, or ask sooner
/// than the origin allowed.
public struct RetryPolicy: Sendable {
  /// Whether a failure may go away if the origin is asked again.
  public enum ErrorKind: Sendable, Hashable {
    /// Asking again cannot help (a 404, a malformed request): the load fails at once.
    case fatal
    /// Asking again may help (a timeout, a 503): the load retries while attempts remain.
    case transient
  }

  /// The most calls to the origin per load, the first included; 1 (or less) never retries.
  public var maximumAttempts: Int
  /// The delay before the first retry.
  public var initialDelay: Duration
  /// The factor each further delay grows by (values under 1 count as 1).
  public var multiplier: Double
  /// The longest delay.
  public var maximumDelay: Duration
  /// How much of each delay is random, from 0 (none: exact delays) to 1 ("full jitter": any
  /// delay from zero to the computed one), so that many clients that failed together do not
  /// retry together. Values outside 0...1 are clamped.
  public var jitter: Double
  /// Sorts errors into fatal and transient. `CancellationError` is never retried.
  public var classify: @Sendable (any Error) -> ErrorKind
  /// The least delay a transient error asks for before the origin is asked again (an HTTP
  /// `Retry-After`), or `nil` when it asks for none. A retry waits at least that long; an error
  /// that asks for more than ``maximumDelay`` is not retried. Called on the load's task once per
  /// transient failure: keep it quick.
  public var retryAfter: @Sendable (any Error) -> Duration?

  /// Creates a policy.
  ///
  /// - Parameters:
  ///   - maximumAttempts: The most origin calls per load, at least 1. Default 3.
  ///   - initialDelay: The delay before the first retry. Default 100 ms.
  ///   - multiplier: The factor each further delay grows by, at least 1. Default 2.
  ///   - maximumDelay: The longest delay. Default 10 s.
  ///   - jitter: The random share of each delay, in 0...1. Default 0.2.
  ///   - classify: Sorts errors into fatal and transient. Default: every error is transient.
  ///   - retryAfter: Reads the least delay an error asks for before the next attempt, `nil` for
  ///     none. Default: no error asks for one.
  public init(
    maximumAttempts: Int = 3,
    initialDelay: Duration = .milliseconds(100),
    multiplier: Double = 2,
    maximumDelay: Duration = .seconds(10),
    jitter: Double = 0.2,
    classify: @escaping @Sendable (any Error) -> ErrorKind = { _ in .transient },
    retryAfter: @escaping @Sendable (any Error) -> Duration? = { _ in nil }
  ) {
    self.maximumAttempts = maximumAttempts
    self.initialDelay = initialDelay
    self.multiplier = multiplier
    self.maximumDelay = maximumDelay
    self.jitter = jitter
    self.classify = classify
    self.retryAfter = retryAfter
  }

  /// No retries: a failure of the origin fails the load at once.
  public static var never: RetryPolicy { RetryPolicy(maximumAttempts: 1) }

  /// The delay before retry number `retry` (1 for the first), before jitter:
  /// `initialDelay * multiplier^(retry - 1)`, at most `maximumDelay`.
  public func baseDelay(beforeRetry retry: Int) -> Duration {
    var delay = initialDelay
    for _ in 1..<Swift.max(retry, 1) {
      guard delay < maximumDelay else { break }
      delay = delay * Swift.max(multiplier, 1)
    }
    return Swift.min(delay, maximumDelay)
  }

  /// The delay before retry number `retry`, with `unit` (a random number in 0..<1) deciding
  /// the jitter: from `baseDelay * (1 - jitter)` up to `baseDelay`.
  func delay(beforeRetry retry: Int, unit: Double) -> Duration {
    let base = baseDelay(beforeRetry: retry)
    return base * (1 - Swift.min(Swift.max(jitter, 0), 1) * unit)
  }

  /// The delay before retry number `retry` after the transient `error`: the jittered delay, or
  /// the delay the error asks for (``retryAfter``) when that is longer; `nil` when the error asks
  /// for more than ``maximumDelay``, so the load gives up instead.
  func delay(beforeRetry retry: Int, after error: any Error, unit: Double) -> Duration? {
    let computed = delay(beforeRetry: retry, unit: unit)
    guard let requested = retryAfter(error) else { return computed }
    guard requested <= maximumDelay else { return nil }
    return Swift.max(computed, requested)
  }
}
