/// An origin that answers with more than a value: what it knows about the value (its
/// ``EntryMetadata``: validators, tags), how long it stays fresh, and — given the entry the cache
/// holds — that the value did not change, so that it need not be sent again.
///
/// A ``LoadingCache`` whose origin conforms calls ``fetchEntry(_:current:)`` instead of
/// ``AsyncFetcher/fetch(_:)``. When a load replaces an entry the cache still holds (a refresh, a
/// refresh ahead, a stale-while-revalidate refresh, or a load that passed over a stale entry),
/// `current` is that entry, so the origin can ask whether it changed (HTTP's `If-None-Match` with
/// its ``EntryMetadata/entityTag``). Answering ``FetchedEntry/notModified(metadata:timeToLive:)``
/// keeps the entry, with a new lifetime, in every layer: a *revalidation*, counted apart from the
/// loads that brought a value (``LoadingCache/Statistics/revalidations``, ``LoadSource/revalidated``).
///
/// ```swift
/// struct Pages: EntryFetcher {
///   func fetchEntry(_ key: URL, current: CacheEntry<Data>?) async throws -> FetchedEntry<Data> {
///     // Ask the server whether the page changed, with the entity tag the cache holds.
///     if current?.metadata.entityTag == #""v1""# { return .notModified() }
///     return .value(try await download(key), metadata: EntryMetadata(entityTag: #""v1""#, tags: ["pages"]))
///   }
/// }
/// ```
///
/// ``AsyncFetcher/fetch(_:)`` comes for free: it fetches without a current entry.
public protocol EntryFetcher<Key, Value>: AsyncFetcher {
  // Restated from `AsyncFetcher` so that a conformance infers them from `fetchEntry` alone
  // (otherwise the default `fetch(_:)` below leaves them undetermined).
  associatedtype Key
  associatedtype Value

  /// Loads `key`; `current` is the entry the cache holds for it and is about to replace, if any.
  ///
  /// Answer ``FetchedEntry/notModified(metadata:timeToLive:)`` only when `current` is not `nil`:
  /// otherwise the load fails with ``AsyncCacheError/Code/invalidState``.
  func fetchEntry(_ key: Key, current: CacheEntry<Value>?) async throws -> FetchedEntry<Value>
}

extension EntryFetcher {
  /// The value of ``fetchEntry(_:current:)`` without a current entry.
  ///
  /// - Throws: What ``fetchEntry(_:current:)`` throws; ``AsyncCacheError/Code/invalidState``
  ///   when it answers ``FetchedEntry/notModified(metadata:timeToLive:)`` all the same.
  public func fetch(_ key: Key) async throws -> Value {
    switch try await fetchEntry(key, current: nil) {
    case .value(let value, _, _): return value
    case .notModified: throw FetchedEntry<Value>.notModifiedWithoutEntry(key)
    }
  }
}

/// What an ``EntryFetcher`` answers for a key.
public enum FetchedEntry<Value: Sendable>: Sendable {
  /// A value, what the origin knows about it, and how long it stays fresh: `nil` for the
  /// cache's own lifetime; otherwise the shorter of this and the cache's (a cache-wide lifetime
  /// bounds what an origin asks for). A lifetime of zero or less means *do not keep it* (HTTP's
  /// `no-store`): the value answers the load's requests and is stored in no layer, and the
  /// entry it replaces, if any, is removed (it is older than the value).
  ///
  /// Refresh ahead and sliding expiry reckon from the cache's own lifetime, not from the
  /// origin's: with an origin lifetime much shorter than the cache's, turn them off (refresh
  /// ahead would find such entries due at once).
  case value(Value, metadata: EntryMetadata = EntryMetadata(), timeToLive: Duration? = nil)
  /// The entry the cache holds (the `current` the fetcher was given) did not change: the cache
  /// keeps its value for a new lifetime (`timeToLive`, bounded as for
  /// ``value(_:metadata:timeToLive:)``), with `metadata` in place of its own when given (new
  /// validators), and counts a revalidation.
  case notModified(metadata: EntryMetadata? = nil, timeToLive: Duration? = nil)

  /// Whether the answer is to be stored: not with a lifetime of zero or less.
  var isStored: Bool {
    switch self {
    case .value(_, _, let timeToLive), .notModified(_, let timeToLive): timeToLive.map { $0 > .zero } ?? true
    }
  }

  /// The error of an origin that answered ``notModified(metadata:timeToLive:)`` for `key`
  /// without an entry to keep.
  static func notModifiedWithoutEntry(_ key: some Sendable) -> AsyncCacheError {
    .invalidState(
      "the origin answered notModified for key \(String(describing: key).prefix(200).debugDescription), "
        + "but the cache held no entry to keep (fetchEntry(_:current:) was given none)")
  }
}

/// A ``FetchedEntry``-answering origin made of a closure.
///
/// ```swift
/// let origin = ClosureEntryFetcher<URL, Data> { url, current in
///   current == nil ? .value(try await download(url)) : .notModified()
/// }
/// ```
public struct ClosureEntryFetcher<Key: Hashable & Sendable, Value: Sendable>: EntryFetcher {
  private let body: @Sendable (Key, CacheEntry<Value>?) async throws -> FetchedEntry<Value>

  /// An origin that answers with `body`.
  public init(
    _ body: @escaping @Sendable (_ key: Key, _ current: CacheEntry<Value>?) async throws -> FetchedEntry<Value>
  ) {
    self.body = body
  }

  public func fetchEntry(_ key: Key, current: CacheEntry<Value>?) async throws -> FetchedEntry<Value> {
    try await body(key, current)
  }
}

// MARK: - Fetcher operators that keep revalidation

extension KeyMappedFetcher: EntryFetcher where Base: EntryFetcher {
  /// Fetches the transformed key from the base origin, with the entry held: the base
  /// revalidates it as it would under its own key.
  public func fetchEntry(_ key: Key, current: CacheEntry<Value>?) async throws -> FetchedEntry<Value> {
    let baseKey = try await transforming("the key transform in front of \(Base.self) for key \(describeKey(key))") {
      try await transform(key)
    }
    return try await base.fetchEntry(baseKey, current: current)
  }
}

extension PostProcessedFetcher: EntryFetcher where Base: EntryFetcher {
  /// Fetches `key` from the base origin with the entry held (whose value is a post-processed
  /// one: the base should revalidate by its metadata), and post-processes a new value.
  public func fetchEntry(_ key: Key, current: CacheEntry<Value>?) async throws -> FetchedEntry<Value> {
    switch try await base.fetchEntry(key, current: current) {
    case .value(let value, let metadata, let timeToLive):
      let processed = try await transforming(
        "post-processing the value of \(Base.self) for key \(describeKey(key))"
      ) {
        try await transform(key, value)
      }
      return .value(processed, metadata: metadata, timeToLive: timeToLive)
    case .notModified(let metadata, let timeToLive):
      return .notModified(metadata: metadata, timeToLive: timeToLive)
    }
  }
}

extension AnyFetcher: EntryFetcher {
  /// Asks the wrapped origin with the entry held when it is an ``EntryFetcher``; otherwise
  /// fetches a value.
  public func fetchEntry(_ key: Key, current: CacheEntry<Value>?) async throws -> FetchedEntry<Value> {
    guard let entryBase = base as? any EntryFetcher<Key, Value> else { return .value(try await base.fetch(key)) }
    return try await entryBase.fetchEntry(key, current: current)
  }
}
