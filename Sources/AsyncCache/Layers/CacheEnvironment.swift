public import Synchronization

/// What a cache or a chain hands to the layers put in it: its clock and its logger, for the
/// layers created without their own.
///
/// A ``LoadingCache`` passes the clock and logger its configuration was given to its chain, and
/// a ``CacheChain`` passes them on to its tiers (nested chains and operators pass them on in
/// turn). A layer whose configuration names no clock or no logger follows the first it is
/// handed, so that one clock, set once on the cache, drives every layer:
///
/// ```swift
/// let clock = ManualClock()
/// let cache = try LoadingCache(
///     layers: [MemoryLayer<String, Data>(), try await SQLiteLayer<String, Data>(url: url)],
///     origin: origin,
///     configuration: .init(clock: clock))   // both layers follow `clock`
/// ```
///
/// A layer given its own clock or logger keeps it. A layer that follows takes the first clock
/// handed to it (a cache hands its clock down, the wall clock included), so a layer shared by
/// two caches follows the first, and a cache given no clock over a chain given one takes the
/// chain's. Put a layer in its cache before using it: from then on it reads expiry on that
/// clock, for the entries written before too. Timers that are not about expiry (a Redis layer's
/// circuit breaker, a SQLite layer's write retries) stay on the clock given to the layer, or real
/// time. Layers of your own get the environment through ``AsyncCacheLayer/follow(_:)``.
public struct CacheEnvironment: Sendable {
  /// The clock to follow; `nil` when the cache or chain was given none.
  public var clock: (any CacheClock)?
  /// The logger to follow; `nil` when the cache or chain was given none.
  public var logger: CacheLogger?

  /// What to tell of an invalidation of a tag that a layer learns from elsewhere (another
  /// instance, through a shared tier): the chain records it, and the cache over it turns later
  /// requests away from its loads in flight. `nil` when the cache or chain hands none.
  package var tagInvalidationHandler: TagInvalidationHandler?

  /// The tracer to follow (chains do; layers ignore it); `nil` when the cache or chain was
  /// given none.
  package var tracer: CacheTracing?

  /// The observer of layer lookups to follow (chains do; layers ignore it); `nil` when the
  /// cache or chain was given none.
  package var onLookup: LayerLookupObserver?

  /// Creates an environment; `nil` for what it does not set.
  public init(clock: (any CacheClock)? = nil, logger: CacheLogger? = nil) {
    self.clock = clock
    self.logger = logger
  }

  /// Creates an environment with a handler of the tag invalidations layers learn from
  /// elsewhere.
  package init(
    clock: (any CacheClock)?, logger: CacheLogger?, tagInvalidationHandler: TagInvalidationHandler?,
    tracer: CacheTracing? = nil, onLookup: LayerLookupObserver? = nil
  ) {
    self.clock = clock
    self.logger = logger
    self.tagInvalidationHandler = tagInvalidationHandler
    self.tracer = tracer
    self.onLookup = onLookup
  }
}

/// What a layer learnt from elsewhere about tag invalidations.
package enum LearntInvalidation: Sendable, Equatable {
  /// The tag was invalidated at the instant.
  case tag(String, at: CacheInstant)
  /// Tags may have been invalidated, which is not known yet: a shared tier reported a change of
  /// its record without saying which, or announcements were lost while a subscription was down.
  case unknown
}

/// Told of the tag invalidations a layer learns from elsewhere.
package typealias TagInvalidationHandler = @Sendable (LearntInvalidation) -> Void

/// A value that a component was given, or that it follows from the cache or chain it was put
/// in, or else a default: the first value it is handed to follow wins. Safe from any context.
package final class Followed<Value: Sendable>: Sendable {
  private let state: Locked<(value: Value, isSet: Bool)>

  /// A value given to the component (kept for ever), or `nil` for one to follow, with `fallback`
  /// until then.
  package init(given: Value?, fallback: Value) {
    state = Locked((given ?? fallback, given != nil))
  }

  /// The value given, followed, or the fallback.
  package var value: Value { state.withLock { $0.value } }

  /// The value to hand on to the component's own parts: the one given or followed, `nil` for
  /// the fallback (so that a part follows what a later owner hands down instead).
  package var handedOn: Value? { state.withLock { $0.isSet ? $0.value : nil } }

  /// Follows `value` unless the component was given one or already follows one.
  ///
  /// - Returns: Whether the component now follows `value`.
  @discardableResult
  package func follow(_ value: Value?) -> Bool {
    guard let value else { return false }
    return state.withLock { state in
      guard !state.isSet else { return false }
      state = (value, true)
      return true
    }
  }
}

/// The clock of a layer: the one its configuration names, the one of the cache or chain it was
/// put in, or the wall clock until then. A wall clock is read without the lock, so that a memory
/// hit pays one relaxed atomic load for the indirection. Safe from any context.
@usableFromInline
package final class FollowedClock: CacheClock {
  private let followed: Followed<any CacheClock>
  /// The clock given to the layer, read without a lock: it never changes.
  private let given: (any CacheClock)?
  @usableFromInline let readsWallClock: Atomic<Bool>

  /// A layer's clock: `given`, or the wall clock until the layer follows another.
  @usableFromInline
  package init(given: (any CacheClock)?) {
    followed = Followed(given: given, fallback: WallClock())
    self.given = given
    readsWallClock = Atomic(given == nil || given is WallClock)
  }

  /// The clock this one reads.
  @usableFromInline
  package var clock: any CacheClock { given ?? followed.value }

  /// The clock to hand on to a layer's own parts (see ``Followed/handedOn``).
  package var handedOn: (any CacheClock)? { followed.handedOn }

  /// Whether the layer reads the wall clock, whose time a memory hit reads without a call
  /// through the existential (see `PublishedWallTime`).
  @inlinable
  package var isWallClock: Bool { readsWallClock.load(ordering: .relaxed) }

  /// Follows `clock` unless the layer was given one or already follows one.
  @discardableResult
  package func follow(_ clock: (any CacheClock)?) -> Bool {
    guard followed.follow(clock) else { return false }
    // Ordered after the new clock is stored: a reader that sees `false` reads the new clock.
    readsWallClock.store(clock is WallClock, ordering: .releasing)
    return true
  }

  @usableFromInline
  package var now: CacheInstant { isWallClock ? WallClock().now : clock.now }

  @usableFromInline
  package var coarseNow: CacheInstant { isWallClock ? WallClock().coarseNow : clock.coarseNow }

  @usableFromInline
  package var minimumResolution: Duration { clock.minimumResolution }

  @usableFromInline
  package func sleep(until deadline: CacheInstant, tolerance: Duration?) async throws {
    try await clock.sleep(until: deadline, tolerance: tolerance)
  }
}
