/// The answer of a lookup that must not suspend: see ``SynchronousLookupLayer``.
public enum SynchronousLookup<Value: Sendable>: Sendable {
  /// The layer holds an unexpired entry for the key, with this value.
  case found(Value)
  /// The layer holds no entry for the key.
  case missing
  /// The layer cannot tell without suspending (an operator whose function is `async`, say):
  /// ask ``AsyncCacheLayer/entry(for:)``.
  case unavailable
}

/// A layer that can often answer a lookup without suspending: a ``MemoryLayer``, and the
/// operators over one whose functions are synchronous.
///
/// A ``LoadingCache`` whose top layer is one answers hits in ``LoadingCache/value(for:)`` and
/// ``LoadingCache/cachedValue(for:)`` synchronously, as it does for a bare ``MemoryLayer``: a
/// memory layer keyed by a string identifier behind ``AsyncCacheLayer/mappingKeys(_:)-39ac1``
/// serves domain keys without an `async` call.
///
/// The operators' functions then run on every hit, on the caller's thread: keep them cheap.
/// A value transform that decodes JSON on top of a memory layer of `Data` decodes on every hit;
/// keep decoded values in memory instead, and put the decoding in front of a lower layer.
///
/// The synchronous answer must agree with ``AsyncCacheLayer/entry(for:)``: the same value, or a
/// miss, with the same side effects (recency, statistics). It carries no expiry: it serves hits,
/// and a layer never returns an expired entry.
public protocol SynchronousLookupLayer<Key, Value>: AsyncCacheLayer {
  /// Looks `key` up if the layer can without suspending.
  ///
  /// Safe from any context. Never suspends.
  ///
  /// - Throws: What ``AsyncCacheLayer/entry(for:)`` would throw for `key`.
  nonisolated func lookUpWithoutSuspending(_ key: Key) throws -> SynchronousLookup<Value>
}

extension MemoryLayer: SynchronousLookupLayer {
  /// Looks `key` up, as ``entry(for:)`` does: a memory layer always knows at once.
  ///
  /// Safe from any context. Never suspends. O(1) expected.
  @inlinable @inline(__always)
  public nonisolated func lookUpWithoutSuspending(_ key: Key) -> SynchronousLookup<Value> {
    guard let value = value(for: key) else { return .missing }
    return .found(value)
  }
}

/// A layer's synchronous lookup as a function. The operators build theirs where their types
/// are known (in the caller's module, from inlinable code), so that a lookup through a stack of
/// them is one indirect call into specialized, inlined code.
@usableFromInline
typealias SynchronousLookupFunction<Key, Value: Sendable> = @Sendable (Key) throws -> SynchronousLookup<Value>

/// A layer that built its synchronous lookup when it was made: the operators.
@usableFromInline
protocol SynchronousLookupSource<Key, Value>: AsyncCacheLayer {
  /// The lookup, or `nil` when it was not built (the operator was made in code that did not know
  /// its base layer's type).
  nonisolated var synchronousLookup: SynchronousLookupFunction<Key, Value>? { get }
}

extension AsyncCacheLayer {
  /// This layer's synchronous lookup, or `nil` when it has none.
  @inlinable
  nonisolated var synchronousLookupFunction: SynchronousLookupFunction<Key, Value>? {
    if let source = self as? any SynchronousLookupSource<Key, Value>, let lookup = source.synchronousLookup {
      return lookup
    }
    if let layer = self as? any SynchronousLookupLayer<Key, Value> { return { try layer.lookUpWithoutSuspending($0) } }
    return nil
  }
}

extension SynchronousLookup {
  /// This answer with its value converted by `transform`.
  @inlinable
  func map<NewValue>(_ transform: (Value) throws -> NewValue) rethrows -> SynchronousLookup<NewValue> {
    switch self {
    case .found(let value): .found(try transform(value))
    case .missing: .missing
    case .unavailable: .unavailable
    }
  }
}

// MARK: - Operators

extension KeyMappedLayer: SynchronousLookupSource {}
extension ValueMappedLayer: SynchronousLookupSource {}
extension ConditionalLayer: SynchronousLookupSource {}
extension PostProcessedLayer: SynchronousLookupSource {}

extension KeyMappedLayer: SynchronousLookupLayer where Base: SynchronousLookupLayer {
  /// Looks the transformed key up in the base layer, when the transform is synchronous;
  /// ``SynchronousLookup/unavailable`` otherwise.
  @inlinable @inline(__always)
  public nonisolated func lookUpWithoutSuspending(_ key: Key) throws -> SynchronousLookup<Value> {
    try Self.lookUp(key, transform: transform, in: base)
  }

  @inlinable @inline(__always)
  static func lookUp(
    _ key: Key, transform: OperatorFunction<Key, Base.Key>, in base: Base
  ) throws -> SynchronousLookup<Value> {
    guard transform.isSynchronous else { return .unavailable }
    let baseKey = try transformingNow("the key transform in front of \(Base.self) for key \(describeKey(key))") {
      try transform.synchronous!(key)
    }
    return try base.lookUpWithoutSuspending(baseKey)
  }
}

extension ValueMappedLayer: SynchronousLookupLayer where Base: SynchronousLookupLayer {
  /// Looks `key` up in the base layer and decodes the value, when decoding is synchronous;
  /// ``SynchronousLookup/unavailable`` otherwise.
  @inlinable @inline(__always)
  public nonisolated func lookUpWithoutSuspending(_ key: Key) throws -> SynchronousLookup<Value> {
    try Self.lookUp(key, transform: transform, in: base)
  }

  @inlinable @inline(__always)
  static func lookUp(
    _ key: Key, transform: ValueTransform<Base.Value, Value>, in base: Base
  ) throws -> SynchronousLookup<Value> {
    guard transform.decoder.isSynchronous else { return .unavailable }
    return try base.lookUpWithoutSuspending(key).map { stored in
      try transformingNow("decoding the value of \(Base.self) for key \(describeKey(key))") {
        try transform.decoder.synchronous!(stored)
      }
    }
  }
}

extension ConditionalLayer: SynchronousLookupLayer where Base: SynchronousLookupLayer {
  /// Looks `key` up in the base layer if the predicate accepts it, when the predicate is
  /// synchronous; ``SynchronousLookup/unavailable`` otherwise.
  @inlinable @inline(__always)
  public nonisolated func lookUpWithoutSuspending(_ key: Key) throws -> SynchronousLookup<Value> {
    try Self.lookUp(key, predicate: predicate, in: base)
  }

  @inlinable @inline(__always)
  static func lookUp(_ key: Key, predicate: OperatorFunction<Key, Bool>, in base: Base) throws -> SynchronousLookup<
    Value
  > {
    guard predicate.isSynchronous else { return .unavailable }
    let accepted: Bool
    do {
      accepted = try predicate.synchronous!(key)
    } catch {
      throw AsyncCache.conditionFailure(error, in: Base.self, key: key)
    }
    return accepted ? try base.lookUpWithoutSuspending(key) : .missing
  }
}

extension PostProcessedLayer: SynchronousLookupLayer where Base: SynchronousLookupLayer {
  /// Looks `key` up in the base layer and post-processes the value, when post-processing is
  /// synchronous; ``SynchronousLookup/unavailable`` otherwise.
  @inlinable @inline(__always)
  public nonisolated func lookUpWithoutSuspending(_ key: Key) throws -> SynchronousLookup<Value> {
    try Self.lookUp(key, transform: transform, in: base)
  }

  @inlinable @inline(__always)
  static func lookUp(
    _ key: Key, transform: OperatorFunction<(key: Key, value: Value), Value>, in base: Base
  ) throws -> SynchronousLookup<Value> {
    guard transform.isSynchronous else { return .unavailable }
    return try base.lookUpWithoutSuspending(key).map { value in
      try transformingNow("post-processing the value of \(Base.self) for key \(describeKey(key))") {
        try transform.synchronous!((key, value))
      }
    }
  }
}

// MARK: - Operators that keep synchronous hits

extension SynchronousLookupLayer {
  /// ``AsyncCacheLayer/mappingKeys(_:)-39ac1`` over a layer that answers lookups without
  /// suspending: the result answers them too, so a ``LoadingCache`` on top of it keeps its
  /// synchronous hits.
  @inlinable
  public nonisolated func mappingKeys<NewKey: Hashable & Sendable>(
    _ transform: @escaping @Sendable (NewKey) throws -> Key
  ) -> KeyMappedLayer<NewKey, Self> {
    let function = OperatorFunction<NewKey, Key>.sync(transform)
    return KeyMappedLayer(
      base: self, transform: function,
      synchronousLookup: { [self] key in try KeyMappedLayer<NewKey, Self>.lookUp(key, transform: function, in: self) })
  }

  /// ``AsyncCacheLayer/mappingValues(_:)`` over a layer that answers lookups without
  /// suspending: the result answers them too when `transform` decodes synchronously.
  @inlinable
  public nonisolated func mappingValues<NewValue: Sendable>(
    _ transform: ValueTransform<Value, NewValue>
  ) -> ValueMappedLayer<NewValue, Self> {
    ValueMappedLayer(
      base: self, transform: transform,
      synchronousLookup: { [self] key in
        try ValueMappedLayer<NewValue, Self>.lookUp(key, transform: transform, in: self)
      })
  }

  /// ``AsyncCacheLayer/onlyIf(_:)-7sup4`` over a layer that answers lookups without suspending:
  /// the result answers them too.
  @inlinable
  public nonisolated func onlyIf(
    _ predicate: @escaping @Sendable (Key) throws -> Bool
  ) -> ConditionalLayer<Self> {
    let function = OperatorFunction<Key, Bool>.sync(predicate)
    return ConditionalLayer(
      base: self, predicate: function,
      synchronousLookup: { [self] key in try ConditionalLayer<Self>.lookUp(key, predicate: function, in: self) })
  }

  /// ``AsyncCacheLayer/postProcessing(_:)-2kw6w`` over a layer that answers lookups without
  /// suspending: the result answers them too.
  @inlinable
  public nonisolated func postProcessing(
    _ transform: @escaping @Sendable (Key, Value) throws -> Value
  ) -> PostProcessedLayer<Self> {
    let function = OperatorFunction<(key: Key, value: Value), Value>.sync { try transform($0.key, $0.value) }
    return PostProcessedLayer(
      base: self, transform: function,
      synchronousLookup: { [self] key in try PostProcessedLayer<Self>.lookUp(key, transform: function, in: self) })
  }
}
