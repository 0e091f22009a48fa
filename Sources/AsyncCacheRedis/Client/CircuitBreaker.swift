import AsyncCache

/// When a ``RedisLayer`` stops sending to a server that keeps failing, and when it tries again.
///
/// The breaker counts consecutive failures that say the server is unwell: a connection that
/// cannot be made, a timeout, a broken connection, a protocol error. An error reply (`OOM`,
/// `WRONGTYPE`) is an answer, and counts as a success. A failed connection attempt (or
/// handshake) opens the breaker at once; other failures open it after ``failureThreshold`` in a
/// row. While it is open, every operation fails at once with ``RedisError/Code/unavailable``,
/// without touching the network, so a chain falls through to its next layer in microseconds
/// instead of waiting out a timeout per request.
///
/// Once the delay has passed, one operation is let through as a probe (the others still fail
/// fast). Its success closes the breaker; its failure opens it again for twice the delay, up
/// to ``maximumDelay``, counted from when the probe went (a probe that waited out its connect
/// timeout adds no time, but for the first delay). A server that answers but cannot serve yet (`LOADING` its dataset
/// after a restart, `MASTERDOWN` for a replica) fails the probe too. Each delay is shortened by a random factor between 0.5 and 1 (jitter),
/// so that a fleet of instances does not probe a recovering server in step. Reconnecting
/// after a server restart follows the same schedule: with the default maximum, a server that
/// is back is probed, and used again, within a second (while requests come to probe it).
///
/// What an outage logs, once per layer whichever of its servers (and its subscription) see it:
/// one warning when the first breaker opens (the server cannot be reached), the probes that
/// fail at debug (``RedisLayerEvent/probeFailed(server:until:lastError:)``, told apart from a
/// first opening, ``RedisLayerEvent/circuitOpened(server:until:lastError:)``), and one notice
/// when the last breaker closes (or the subscription is back).
/// Connections discarded on the way are info (debug while the breaker is open).
public struct RedisCircuitBreakerPolicy: Sendable, Hashable {
  /// Failures in a row (other than failed connection attempts) that open the breaker.
  /// Default 5.
  public var failureThreshold: Int
  /// How long the breaker stays open the first time, before jitter. Default 100 ms.
  public var initialDelay: Duration
  /// The longest the breaker stays open, before jitter: the longest a server that is back waits
  /// for a probe. Default 1 second, or the initial delay if that is longer.
  public var maximumDelay: Duration

  /// Creates a policy.
  public init(
    failureThreshold: Int = 5, initialDelay: Duration = .milliseconds(100), maximumDelay: Duration? = nil
  ) {
    self.failureThreshold = failureThreshold
    self.initialDelay = initialDelay
    self.maximumDelay = maximumDelay ?? Swift.max(.seconds(1), initialDelay)
  }

  /// The delay after the `openings`-th opening in a row, with `jitter` in 0.5...1.
  func delay(afterOpenings openings: Int, jitter: Double) -> Duration {
    var delay = initialDelay
    var doublings = openings - 1
    while doublings > 0 && delay < maximumDelay {
      delay *= 2
      doublings -= 1
    }
    let capped = Swift.min(delay, maximumDelay)
    return jitter >= 1 ? capped : capped * jitter
  }
}

/// The breaker's state machine. Not thread-safe: the pool keeps it under its lock.
struct CircuitBreaker {
  enum State: Hashable {
    case closed
    case open(until: CacheInstant)
    case halfOpen(probing: Bool)
  }

  enum Admission: Hashable {
    /// Go ahead.
    case pass
    /// Go ahead as the probe: report the outcome, or ``CircuitBreaker/abandonProbe()``.
    case probe
    /// Fail fast; the next probe may go at `retryAt` (`nil`: when the probe in flight ends).
    case reject(retryAt: CacheInstant?)
  }

  /// How a failure opened the breaker.
  struct Opening: Hashable {
    /// Operations fail fast until then.
    var until: CacheInstant
    /// The failure was the probe's: the breaker was open already, and opens again.
    var isReopening: Bool
  }

  let policy: RedisCircuitBreakerPolicy
  private(set) var state = State.closed
  /// When the probe in flight was let through.
  private(set) var probeStartedAt: CacheInstant?
  private(set) var consecutiveFailures = 0
  /// Openings since the last success, which set the next delay.
  private(set) var openings = 0

  init(policy: RedisCircuitBreakerPolicy) {
    self.policy = policy
  }

  /// Whether an operation may go at `now`.
  mutating func admit(at now: CacheInstant) -> Admission {
    switch state {
    case .closed:
      return .pass
    case .open(let until):
      guard now >= until else { return .reject(retryAt: until) }
      state = .halfOpen(probing: true)
      probeStartedAt = now
      return .probe
    case .halfOpen(let probing):
      guard !probing else { return .reject(retryAt: nil) }
      state = .halfOpen(probing: true)
      probeStartedAt = now
      return .probe
    }
  }

  /// Records an answer; returns whether this closed an open breaker.
  mutating func recordSuccess() -> Bool {
    consecutiveFailures = 0
    openings = 0
    probeStartedAt = nil
    defer { state = .closed }
    return state != .closed
  }

  /// Records a failure; returns how it opened the breaker, when it did.
  ///
  /// A failed probe opens it again for the next delay counted from when the probe was let
  /// through, not from its failure: a probe that took its whole connect timeout (a server that
  /// drops packets) does not add that time to the wait for the next one, which is still at
  /// least the (jittered) first delay after the failure.
  mutating func recordFailure(at now: CacheInstant, opensAtOnce: Bool, jitter: Double) -> Opening? {
    consecutiveFailures += 1
    let from: CacheInstant
    switch state {
    case .open:
      // An operation admitted before the breaker opened: it is open already.
      return nil
    case .closed:
      guard opensAtOnce || consecutiveFailures >= policy.failureThreshold else { return nil }
      from = now
    case .halfOpen:
      from = Swift.min(probeStartedAt ?? now, now)
    }
    let isReopening = state != .closed
    openings += 1
    // At least a jittered first delay after the failure, so that probes of a server that drops
    // packets (a probe as long as the delay) do not follow each other back to back, nor in step
    // across a fleet.
    let until = Swift.max(
      from.advanced(by: policy.delay(afterOpenings: openings, jitter: jitter)),
      now.advanced(by: policy.delay(afterOpenings: 1, jitter: jitter)))
    state = .open(until: until)
    probeStartedAt = nil
    return Opening(until: until, isReopening: isReopening)
  }

  /// The probe ended without telling whether the server is well (it was cancelled): the next
  /// operation becomes the probe.
  mutating func abandonProbe() {
    if case .halfOpen(probing: true) = state { state = .halfOpen(probing: false) }
  }
}
