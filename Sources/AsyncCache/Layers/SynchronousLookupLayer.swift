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
  @inlinable
  public nonisolated func lookUpWithoutSuspending(_ key: Key) -> SynchronousLookup<Value> {
    guard let value = value(for: key) else { return .missing }
    return .found(value)
  }
}

/// A layer's synchronous lookup as a function. Operators build theirs where their types are
/// known (in the caller's module, from inlinable code), so that a lookup through a stack of them
/// runs specialized code, one indirect call per operator.
@usableFromInline
typealias SynchronousLookupFunction<Key, Value: Sendable> = @Sendable (Key) throws -> SynchronousLookup<Value>

/// A layer that built its synchronous lookup when it was made: the operators.
@usableFromInline
protocol SynchronousLookupSource<Key, Value>: AsyncCacheLayer {
  /// The lookup, or `nil` when the layer cannot answer without suspending.
  nonisolated var synchronousLookup: SynchronousLookupFunction<Key, Value>? { get }
}

extension AsyncCacheLayer {
  /// This layer's synchronous lookup, or `nil` when it has none.
  @inlinable
  nonisolated var synchronousLookupFunction: SynchronousLookupFunction<Key, Value>? {
    if let memory = self as? MemoryLayer<Key, Value> { return { memory.lookUpWithoutSuspending($0) } }
    if let source = self as? any SynchronousLookupSource<Key, Value> { return source.synchronousLookup }
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

extension KeyMappedLayer: SynchronousLookupLayer, SynchronousLookupSource {
  /// Looks the transformed key up in the base layer, when the transform is synchronous and the
  /// base layer can answer without suspending; ``SynchronousLookup/unavailable`` otherwise.
  @inlinable
  public nonisolated func lookUpWithoutSuspending(_ key: Key) throws -> SynchronousLookup<Value> {
    try synchronousLookup?(key) ?? .unavailable
  }
}

extension ValueMappedLayer: SynchronousLookupLayer, SynchronousLookupSource {
  /// Looks `key` up in the base layer and decodes the value, when decoding is synchronous and
  /// the base layer can answer without suspending; ``SynchronousLookup/unavailable`` otherwise.
  @inlinable
  public nonisolated func lookUpWithoutSuspending(_ key: Key) throws -> SynchronousLookup<Value> {
    try synchronousLookup?(key) ?? .unavailable
  }
}

extension ConditionalLayer: SynchronousLookupLayer, SynchronousLookupSource {
  /// Looks `key` up in the base layer if the predicate accepts it, when the predicate is
  /// synchronous and the base layer can answer without suspending;
  /// ``SynchronousLookup/unavailable`` otherwise.
  @inlinable
  public nonisolated func lookUpWithoutSuspending(_ key: Key) throws -> SynchronousLookup<Value> {
    try synchronousLookup?(key) ?? .unavailable
  }
}

extension PostProcessedLayer: SynchronousLookupLayer, SynchronousLookupSource {
  /// Looks `key` up in the base layer and post-processes the value, when post-processing is
  /// synchronous and the base layer can answer without suspending;
  /// ``SynchronousLookup/unavailable`` otherwise.
  @inlinable
  public nonisolated func lookUpWithoutSuspending(_ key: Key) throws -> SynchronousLookup<Value> {
    try synchronousLookup?(key) ?? .unavailable
  }
}
