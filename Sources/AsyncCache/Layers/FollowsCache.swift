/// A configuration's setting that, unless set, follows the cache or chain its component is put
/// in (see ``CacheEnvironment``): the clock and the logger of the layers' configurations.
///
/// Reading it gives the value set, or the default (``WallClock``, ``CacheLogger/disabled``)
/// until the component follows another; its projection (`$clock`, `$logger`) tells which: the
/// value set, or `nil` for one to follow. Setting it stops the component from following.
@propertyWrapper
public struct FollowsCache<Value: Sendable>: Sendable {
  /// The value set on the configuration, or `nil` when the component follows its cache's or
  /// chain's.
  public var projectedValue: Value?
  /// What reading an unset value gives.
  private let fallback: Value

  /// A setting with `given`, or `nil` to follow, reading as `fallback` until set.
  package init(given: Value?, otherwise fallback: Value) {
    projectedValue = given
    self.fallback = fallback
  }

  /// The value set, or the default.
  public var wrappedValue: Value {
    get { projectedValue ?? fallback }
    set { projectedValue = newValue }
  }
}

extension FollowsCache where Value == any CacheClock {
  /// A configuration's clock: `given`, or `nil` to follow, reading as the ``WallClock`` until set.
  package static func clock(_ given: (any CacheClock)?) -> Self { Self(given: given, otherwise: WallClock()) }
}

extension FollowsCache where Value == CacheLogger {
  /// A configuration's logger: `given`, or `nil` to follow, reading as ``CacheLogger/disabled``
  /// until set.
  package static func logger(_ given: CacheLogger?) -> Self { Self(given: given, otherwise: .disabled) }
}
