/// How a ``LoadingCache`` reads the expiry of an entry: fresh, due for a refresh ahead of time,
/// stale, or kept only in case the origin fails.
///
/// An entry stored by the cache lives for its lifetime (its time-to-live, after jitter), then
/// for a *grace* period: the longer of ``LoadingCache/Configuration-swift.struct/staleWhileRevalidate``
/// and ``LoadingCache/Configuration-swift.struct/staleIfError``. Its stored ``CacheEntry/expiresAt``
/// is the end of the grace, so every layer keeps it that long and a back-filled copy expires
/// with its source; the instant it turns stale is `expiresAt - grace`. Nothing else is stored,
/// so any layer, persistent ones included, carries an entry's freshness without a format of
/// its own.
///
/// Pure and synchronous; instants are nanoseconds since 1970, `Int64.max` for never.
@usableFromInline
struct FreshnessRules: Sendable, Hashable {
  /// What a read may do with an entry.
  @usableFromInline
  enum State: Sendable, Hashable {
    /// Serve it.
    case fresh
    /// Serve it, and refresh it in the background: it was read late in its lifetime.
    case refreshDue
    /// Serve it, and extend it to a full lifetime from now: sliding expiry, and less than half
    /// of its lifetime is left.
    case extendDue
    /// Serve it at once (stale-while-revalidate), and refresh it in the background.
    case stale
    /// Load afresh, and serve it only if the load fails (stale-if-error).
    case staleIfError
    /// Never serve it.
    case expired
  }

  /// How long a stale entry is served at once while it is refreshed, in nanoseconds.
  @usableFromInline let staleWhileRevalidate: Int64
  /// How long a stale entry is kept to be served when a load fails, in nanoseconds.
  @usableFromInline let staleIfError: Int64
  /// The fraction of its lifetime after which a read refreshes a fresh entry, if any.
  @usableFromInline let refreshAhead: Double?
  /// The largest share of a lifetime jitter takes off (see ``state(expiry:now:lifetime:)``).
  @usableFromInline let jitter: Double
  /// Whether reads extend entries (sliding expiry) once half their lifetime has passed.
  @usableFromInline let sliding: Bool

  @usableFromInline
  init(
    staleWhileRevalidate: Duration, staleIfError: Duration, refreshAhead: Double?, jitter: Double = 0,
    sliding: Bool = false
  ) {
    self.staleWhileRevalidate = Swift.min(Swift.max(staleWhileRevalidate.saturatingNanoseconds, 0), Self.longestGrace)
    self.staleIfError = Swift.min(Swift.max(staleIfError.saturatingNanoseconds, 0), Self.longestGrace)
    self.refreshAhead = refreshAhead
    self.jitter = jitter
    self.sliding = sliding
  }

  /// The longest grace that counts, in nanoseconds: 100 years. A longer one (`.seconds(Int64.max)`
  /// for "for ever") is taken as this, so that an expiry stays within the instants a clock holds
  /// (nanoseconds since 1970 reach 2262): saturated, it would read as never expiring, and the
  /// entry would never turn stale.
  @inlinable
  static var longestGrace: Int64 { 100 * 365 * 86_400 * 1_000_000_000 }

  /// How long an entry is kept after it turns stale, in nanoseconds.
  @inlinable
  var grace: Int64 { Swift.max(staleWhileRevalidate, staleIfError) }

  /// Whether a hit must look at the entry's expiry: with no grace and no refresh ahead, an
  /// entry a layer returns is fresh.
  @inlinable
  var checksHits: Bool { grace > 0 || refreshAhead != nil || sliding }

  /// The expiry to store for an entry that is fresh for `lifetime` from `now`.
  @inlinable
  func expiry(now: CacheInstant, lifetime: Duration) -> CacheInstant {
    now.advanced(by: lifetime).advanced(by: .nanoseconds(grace))
  }

  /// The state at `now` of an entry that expires at `expiry`; `lifetime` gives the lifetime the
  /// configuration gives it (read only for a refresh ahead, and only while the entry is fresh).
  ///
  /// The write time is not stored, so a refresh ahead falls due when the fresh time left is at
  /// most `(1 - refreshAhead)` of the shortest lifetime jitter could have made (see
  /// ``lead(lifetime:share:)``): never on a freshly loaded entry, however the jitter fell. An
  /// entry inserted with a much shorter time-to-live than the configured one falls due sooner.
  /// A sliding extension falls due the same way, after half the lifetime. Instants are compared
  /// as integers, so the point is exact to the nanosecond.
  @inlinable
  func state(expiry: Int64, now: Int64, lifetime: () -> Duration?) -> State {
    state(expiry: expiry, now: now) { share in
      lifetime().map { lead(lifetime: $0.saturatingNanoseconds, share: share) }
    }
  }

  /// The state at `now` of an entry that expires at `expiry`; `lead` gives, for the share of a
  /// refresh ahead or an extension, the fresh time left at which it falls due (see
  /// ``lead(lifetime:share:)``), or `nil` when the entry has no lifetime to reckon it from. The
  /// hit path's form: a loading cache whose values all have one lifetime knows its lead already.
  @inlinable
  func state(expiry: Int64, now: Int64, lead: (Double) -> Int64?) -> State {
    state(expiry: expiry, now: now, lead: lead, limits: .none)
  }

  /// The limits an entry's metadata puts on serving it stale (see
  /// ``EntryMetadata/staleWhileRevalidateLimit``), in nanoseconds; `Int64.max` for none.
  @usableFromInline
  struct StaleLimits: Sendable, Hashable {
    @usableFromInline var whileRevalidating: Int64
    @usableFromInline var ifError: Int64

    /// No limits: the cache's rules alone.
    @usableFromInline static let none = StaleLimits(whileRevalidating: .max, ifError: .max)

    @inlinable
    init(whileRevalidating: Int64, ifError: Int64) {
      self.whileRevalidating = whileRevalidating
      self.ifError = ifError
    }

    /// The limits `metadata` states.
    @inlinable
    init(_ metadata: EntryMetadata) {
      whileRevalidating = metadata.staleWhileRevalidateLimit.map { Swift.max($0.saturatingNanoseconds, 0) } ?? .max
      ifError = metadata.staleIfErrorLimit.map { Swift.max($0.saturatingNanoseconds, 0) } ?? .max
    }
  }

  /// The state at `now` of an entry that expires at `expiry`, as ``state(expiry:now:lead:)``
  /// tells it, with its stale serving narrowed to `limits`: past them, a stale entry is
  /// ``State/expired`` (kept only to be revalidated).
  @inlinable
  func state(expiry: Int64, now: Int64, lead: (Double) -> Int64?, limits: StaleLimits) -> State {
    guard expiry != .max else { return .fresh }
    guard now < expiry else { return .expired }
    // The grace is never negative: an overflow puts the stale instant before `Int64.min`, so
    // the entry is stale at any `now`.
    let (staleAt, overflow) = expiry.subtractingReportingOverflow(grace)
    if !overflow && now < staleAt {
      guard let share = dueShare, let lead = lead(share) else { return .fresh }
      // Left until stale, at most the lead: due. More than `Int64.max` left is not due.
      let (left, leftOverflows) = staleAt.subtractingReportingOverflow(now)
      guard !leftOverflows, left <= lead else { return .fresh }
      return sliding ? .extendDue : .refreshDue
    }
    // Stale for `now - staleAt`, less than the grace (`now < expiry`). Past an overflow it is
    // reckoned as `(now - expiry) + grace`: both negative instants, then a sum below the grace.
    let sinceStale = overflow ? (now &- expiry) &+ grace : now &- staleAt
    if sinceStale < Swift.min(staleWhileRevalidate, limits.whileRevalidating) { return .stale }
    // Within the grace: past stale-while-revalidate, it is stale-if-error's (the grace is the
    // longer of the two), unless the entry's limit ends that sooner.
    return sinceStale < Swift.min(grace, limits.ifError) ? .staleIfError : .expired
  }

  /// How long before its expiry an entry stops being plainly fresh, in nanoseconds, for a cache
  /// whose refresh ahead or extension falls due `lead` before the entry turns stale (`nil` when
  /// reads refresh and extend nothing, or when no entry has a lifetime to reckon it from): the
  /// grace, plus the lead. `Int64.max` when it does not fit: then no hit is told fresh by the
  /// margin alone, as a cache whose lead depends on the value must have it. See
  /// ``isPlainlyFresh(expiry:now:margin:)``.
  @inlinable
  func freshMargin(lead: Int64?) -> Int64 {
    guard dueShare != nil, let lead else { return grace }
    let (margin, overflow) = grace.addingReportingOverflow(Swift.max(lead, 0))
    return overflow ? .max : margin
  }

  /// Whether an entry that expires at `expiry` is fresh at `now` with nothing due, by one
  /// subtraction and one comparison against its ``freshMargin(lead:)``: the hit path's
  /// test before ``state(expiry:now:lead:)``. `true` only where that state is ``State/fresh``:
  /// always for an entry that never expires (`expiry` `Int64.max`), never otherwise under a
  /// margin of `Int64.max`, which stands for one too long to reckon.
  @inlinable
  @inline(__always)
  static func isPlainlyFresh(expiry: Int64, now: Int64, margin: Int64) -> Bool {
    let (freshUntil, overflow) = expiry.subtractingReportingOverflow(margin)
    return (!overflow && now < freshUntil && margin != .max) || expiry == .max
  }

  /// The share of a lifetime after which a read refreshes (``refreshAhead``) or extends (half,
  /// with ``sliding``) an entry; `nil` when reads do neither.
  @inlinable
  var dueShare: Double? { sliding ? 0.5 : refreshAhead }

  /// The fresh time left, in nanoseconds, at which a refresh ahead (or a sliding extension)
  /// falls due for an entry of `lifetime` nanoseconds: `(1 - share)` of the shortest lifetime
  /// jitter could have made.
  ///
  /// Reckoned as that shortest lifetime less its `share`, each rounded to the nearest
  /// nanosecond, so that the point is where a person would put it: 0.8 of 100 s falls due 80 s
  /// after the write, not a few hundred nanoseconds before (`Double` holds nanoseconds since
  /// 1970 only to ~256 ns, and `1 - 0.8` is not 0.2).
  @inlinable
  func lead(lifetime: Int64, share: Double) -> Int64 {
    guard lifetime > 0 else { return 0 }
    let shortest = jitter == 0 ? lifetime : Int64(exactly: (Double(lifetime) * (1 - jitter)).rounded()) ?? lifetime
    let elapsed = Int64(exactly: (Double(shortest) * share).rounded()) ?? shortest
    return shortest - Swift.min(Swift.max(elapsed, 0), shortest)
  }

  /// The state at `now` of `entry`.
  @inlinable
  func state<Value>(of entry: CacheEntry<Value>, at now: CacheInstant, lifetime: () -> Duration?) -> State {
    state(
      expiry: entry.expiresAt?.nanosecondsSince1970 ?? .max, now: now.nanosecondsSince1970,
      lead: { share in lifetime().map { lead(lifetime: $0.saturatingNanoseconds, share: share) } },
      limits: StaleLimits(entry.metadata))
  }
}
