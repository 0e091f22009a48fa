/// Which failures of the origin a ``LoadingCache`` remembers, and for how long.
///
/// Without negative caching, a key the origin does not have is asked for again on every
/// request. With it, the error of a failed load is kept for ``timeToLive`` (usually much shorter
/// than the values' time-to-live), and requests for the key throw it at once, without a load:
///
/// ```swift
/// var configuration = LoadingCache<Int, User>.Configuration(timeToLive: .seconds(300))
/// configuration.negativeCaching = .notFound(timeToLive: .seconds(10))
/// ```
///
/// The remembered errors live in the cache's memory only, never in its layers, since there is
/// no value to store. Writing or removing the key forgets its error. At most ``countLimit``
/// errors are kept; the oldest go first.
public struct NegativeCachingPolicy: Sendable {
  /// How long a remembered error is thrown without asking the origin again. Positive.
  public var timeToLive: Duration
  /// The most errors remembered at once, at least 1. Default 10,000.
  public var countLimit: Int
  /// Whether an error is remembered. Called once per failed load, after any retries.
  /// `CancellationError` is never remembered.
  public var remembers: @Sendable (any Error) -> Bool

  /// Creates a policy.
  ///
  /// - Parameters:
  ///   - timeToLive: How long a remembered error is thrown; positive.
  ///   - countLimit: The most errors remembered at once, at least 1. Default 10,000.
  ///   - remembers: Which errors are remembered. Called once per failed load.
  public init(
    timeToLive: Duration,
    countLimit: Int = 10_000,
    remembers: @escaping @Sendable (any Error) -> Bool
  ) {
    self.timeToLive = timeToLive
    self.countLimit = countLimit
    self.remembers = remembers
  }

  /// Remembers "not found": an ``AsyncCacheError`` whose code is ``AsyncCacheError/Code/notFound``.
  /// Throw one from the origin for a key it does not have.
  public static func notFound(timeToLive: Duration, countLimit: Int = 10_000) -> NegativeCachingPolicy {
    NegativeCachingPolicy(timeToLive: timeToLive, countLimit: countLimit) { error in
      (error as? AsyncCacheError)?.code == .notFound
    }
  }

  func validate() throws {
    guard timeToLive > .zero else {
      throw AsyncCacheError.invalidConfiguration(
        "LoadingCache negativeCaching.timeToLive is \(timeToLive.readable); it must be positive")
    }
    guard countLimit >= 1 else {
      throw AsyncCacheError.invalidConfiguration(
        "LoadingCache negativeCaching.countLimit is \(countLimit); it must be 1 or more")
    }
  }
}

/// The errors a ``LoadingCache`` remembers for keys (see ``NegativeCachingPolicy``): a table
/// with expiry, bounded by count, oldest out first. Lives in the in-flight table's state, under
/// its lock.
@usableFromInline
struct NegativeEntries<Key: Hashable & Sendable>: Sendable {
  private var entries: [Key: (error: any Error, expiry: Int64, stamp: UInt64)] = [:]
  /// Keys in the order they were remembered, with the stamp they were remembered with; a key
  /// remembered again (or forgotten) leaves a stale record here, skipped when reached.
  private var order: [(key: Key, stamp: UInt64)] = []
  private var head = 0
  private var nextStamp: UInt64 = 0

  @usableFromInline
  init() {}

  /// The number of errors remembered, expired ones included until they are found.
  var count: Int { entries.count }

  @usableFromInline
  var isEmpty: Bool { entries.isEmpty }

  /// The error remembered for `key`, if it has not expired at `now`; forgets an expired one.
  @usableFromInline
  mutating func error(for key: Key, now: Int64) -> (any Error)? {
    guard let entry = entries[key] else { return nil }
    guard now < entry.expiry else {
      entries[key] = nil
      return nil
    }
    return entry.error
  }

  /// Remembers `error` for `key` until `expiry`, forgetting the oldest errors beyond `limit`.
  mutating func remember(_ error: any Error, for key: Key, expiry: Int64, limit: Int) {
    nextStamp &+= 1
    entries[key] = (error, expiry, nextStamp)
    order.append((key, nextStamp))
    while entries.count > limit, head < order.count {
      let oldest = order[head]
      head += 1
      if entries[oldest.key]?.stamp == oldest.stamp { entries[oldest.key] = nil }
    }
    // Drop the records already passed, and those of keys forgotten or remembered again, once
    // they are most of the array: amortized O(1) per error remembered.
    if order.count > 64, order.count > 2 * entries.count {
      order.removeAll { entries[$0.key]?.stamp != $0.stamp }
      head = 0
    }
  }

  /// Forgets the error of `key`.
  @usableFromInline
  mutating func forget(_ key: Key) {
    entries[key] = nil
  }

  /// Forgets every error.
  @usableFromInline
  mutating func forgetAll() {
    entries = [:]
    order = []
    head = 0
  }
}
