public import AsyncCache

/// Something a ``RedisLayer`` did on its own that its owner may want to log or count.
public enum RedisLayerEvent: DropReportingEvent, CustomStringConvertible {
  /// A connection to `server` opened (and passed its handshake).
  case connected(server: String)
  /// A connection closed because of `reason` (a timeout, a protocol error, the server closing
  /// it); it is never reused.
  case connectionDiscarded(server: String, reason: RedisError)
  /// The circuit breaker opened after `lastError`: operations fail fast until `until`, then
  /// one probes the server. A probe that fails opens it again as
  /// ``probeFailed(server:until:lastError:)``.
  case circuitOpened(server: String, until: CacheInstant, lastError: RedisError)
  /// The probe that the open circuit breaker let through failed (`lastError`): the server
  /// still cannot be reached, or cannot serve yet. Operations fail fast until `until`, then
  /// another probes. Unlike ``circuitOpened(server:until:lastError:)``, the first failure of an
  /// outage, it is logged at debug.
  case probeFailed(server: String, until: CacheInstant, lastError: RedisError)
  /// A probe succeeded and the circuit breaker closed.
  case circuitClosed(server: String)
  /// A stored value under the layer's namespace was not one this layer can read (written by
  /// another program, or a coder that changed); it was treated as a miss.
  case valueDiscarded(key: String, reason: String)
  /// The layer read a Redis Cluster's topology and found it changed (or read it for the first
  /// time): `masters` serve its slots now.
  case topologyChanged(masters: [RedisEndpoint])
  /// The subscription to the invalidation `channel` broke or could not be made (`reason`);
  /// until it is back, writes by other instances do not reach the layers this one forwards to.
  case invalidationsInterrupted(channel: String, reason: String)
  /// The subscription to the invalidation `channel` is back; the layers it forwards to were
  /// emptied, since messages sent while it was away are lost.
  case invalidationsResubscribed(channel: String)
  /// An entry arrived already expired by the layer's clock (`now`), and was not stored (the
  /// key was deleted instead): most often the layer reads another clock than its writer.
  /// Logged as a warning the first time, then at debug.
  case expiredOnArrival(key: String, expiresAt: CacheInstant, now: CacheInstant)
  /// The observer's sequence fell behind and `count` events before this one were dropped from
  /// its buffer. Only an observer's sequence reports this.
  case dropped(count: Int)

  /// A sentence describing the event, for logs.
  public var description: String {
    switch self {
    case .connected(let server): "connected to \(server)"
    case .connectionDiscarded(let server, let reason): "connection to \(server) discarded: \(reason)"
    case .circuitOpened(let server, let until, let lastError):
      "circuit breaker for \(server) opened until \(until) after: \(lastError)"
    case .probeFailed(let server, let until, let lastError):
      "circuit breaker for \(server) probed and opened again until \(until) after: \(lastError)"
    case .circuitClosed(let server): "circuit breaker for \(server) closed: the server answers again"
    case .valueDiscarded(let key, let reason): "value for key \(key.debugDescription) discarded: \(reason)"
    case .invalidationsInterrupted(let channel, let reason):
      "invalidations on \(channel.debugDescription) interrupted: \(reason)"
    case .invalidationsResubscribed(let channel):
      "invalidations on \(channel.debugDescription) resubscribed; the layers they reach were emptied"
    case .topologyChanged(let masters):
      "cluster topology: \(masters.count) masters (\(masters.map(\.description).joined(separator: ", ")))"
    case .expiredOnArrival(let key, let expiresAt, let now):
      "entry for key \(key.debugDescription) " + ExpiredArrivals.describe(expiresAt: expiresAt, now: now)
    case .dropped(let count): "\(count) events dropped by a slow observer"
    }
  }
}

/// Where a layer's pieces (its pools, cluster client and subscription) report events: the
/// event, and the level to log it at when the piece knows better than the event's usual level
/// (`nil`): the first failure of an outage is a warning, the ones that follow it are debug.
typealias RedisEventSink = @Sendable (RedisLayerEvent, CacheLogLevel?) -> Void

/// Which of a layer's pieces (a server's pool, the subscription) cannot reach Redis now, so
/// that an outage logs one warning and one notice, however many pieces it reaches: a warning
/// when the first piece fails while every other answers, debug for the failures that follow,
/// a notice when the last failing piece answers again. A piece that has not failed again for
/// `staleAfter` (a pool nothing sends to any more, so that nothing probes it: a cluster's seed)
/// no longer holds the outage open. Safe from any context.
final class RedisOutage: Sendable {
  private let failing = Locked<[String: ContinuousClock.Instant]>([:])
  private let staleAfter: Duration

  /// - Parameter staleAfter: How long a piece's last failure holds the outage open; longer than
  ///   the longest wait between two probes of a piece that is tried.
  init(staleAfter: Duration = .seconds(5)) {
    self.staleAfter = staleAfter
  }

  /// `source` failed (a breaker opened or opened again, a subscription broke or could not be
  /// made): the level to log it at.
  func failed(_ source: String) -> CacheLogLevel {
    let now = ContinuousClock.now
    return failing.withLock { failing in
      prune(&failing, now: now)
      defer { failing[source] = now }
      return failing.isEmpty ? .warning : .debug
    }
  }

  /// `source` answers again (a breaker closed, a subscription is back): the level to log it at;
  /// `usual` when it was not failing.
  func answered(_ source: String, usual: CacheLogLevel) -> CacheLogLevel {
    let now = ContinuousClock.now
    return failing.withLock { failing in
      guard failing.removeValue(forKey: source) != nil else { return usual }
      prune(&failing, now: now)
      return failing.isEmpty ? .notice : .debug
    }
  }

  /// `source` is gone (a pool shut down): it no longer holds an outage open. Logs nothing.
  func forget(_ source: String) {
    _ = failing.withLock { $0.removeValue(forKey: source) }
  }

  private func prune(_ failing: inout [String: ContinuousClock.Instant], now: ContinuousClock.Instant) {
    failing = failing.filter { now - $0.value < staleAfter }
  }
}

extension RedisLayerEvent {
  /// ``dropped(count:)``: the layer's events carry no state to pass on.
  public static func dropped(count: Int, last: RedisLayerEvent) -> RedisLayerEvent { .dropped(count: count) }
}
