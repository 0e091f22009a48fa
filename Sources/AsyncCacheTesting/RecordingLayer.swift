public import AsyncCache

/// A layer that records every call made to it, in order, and forwards it to another layer.
///
/// ```swift
/// let memory = RecordingLayer(try MemoryLayer<String, Int>())
/// let chain = try CacheChain<String, Int>([memory, disk])
/// _ = try await chain.value(for: "a")
/// #expect(memory.calls == [.entry("a"), .insert("a", expiresAt: nil)])
/// ```
///
/// Safe from any context.
public final actor RecordingLayer<Base: AsyncCacheLayer>: AsyncCacheLayer {
  public typealias Key = Base.Key
  public typealias Value = Base.Value

  /// A call to a layer.
  public enum Call: Hashable, Sendable, CustomStringConvertible {
    /// ``AsyncCache/AsyncCacheLayer/entry(for:)``.
    case entry(Key)
    /// ``AsyncCache/AsyncCacheLayer/insert(_:for:)`` with the entry's expiry.
    case insert(Key, expiresAt: CacheInstant?)
    /// ``AsyncCache/AsyncCacheLayer/revalidate(_:for:replacing:)`` with the new expiry.
    case revalidate(Key, expiresAt: CacheInstant?)
    /// ``AsyncCache/AsyncCacheLayer/removeValue(for:)``.
    case removeValue(Key)
    /// ``AsyncCache/AsyncCacheLayer/removeAll()``.
    case removeAll
    /// ``AsyncCache/AsyncCacheLayer/invalidate(tag:at:)``.
    case invalidate(tag: String, at: CacheInstant)
    /// ``AsyncCache/AsyncCacheLayer/handleMemoryPressure(_:)``.
    case memoryPressure(MemoryPressureLevel)
    /// ``AsyncCache/AsyncCacheLayer/close()``.
    case close

    public var description: String {
      switch self {
      case .entry(let key): "entry(\(key))"
      case .insert(let key, let expiresAt):
        "insert(\(key), expiresAt: \(expiresAt.map(String.init(describing:)) ?? "nil"))"
      case .revalidate(let key, let expiresAt):
        "revalidate(\(key), expiresAt: \(expiresAt.map(String.init(describing:)) ?? "nil"))"
      case .removeValue(let key): "removeValue(\(key))"
      case .removeAll: "removeAll"
      case .invalidate(let tag, let instant): "invalidate(tag: \(tag.debugDescription), at: \(instant))"
      case .memoryPressure(let level): "memoryPressure(\(level))"
      case .close: "close"
      }
    }
  }

  /// The layer the calls are forwarded to.
  public nonisolated let base: Base
  private let log = Locked<[Call]>([])

  /// Wraps `base`.
  public init(_ base: Base) {
    self.base = base
  }

  /// The calls made so far, oldest first.
  public nonisolated var calls: [Call] { log.withLock { $0 } }

  /// Forgets the calls made so far.
  public nonisolated func clearCalls() {
    log.withLock { $0.removeAll() }
  }

  /// Records ``Call/entry(_:)``, then asks the base layer.
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    record(.entry(key))
    return try await base.entry(for: key)
  }

  /// Records ``Call/insert(_:expiresAt:)``, then forwards the entry to the base layer.
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    record(.insert(key, expiresAt: entry.expiresAt))
    try await base.insert(entry, for: key)
  }

  /// Records ``Call/revalidate(_:expiresAt:)``, then asks the base layer.
  public nonisolated func revalidate(
    _ entry: CacheEntry<Value>, for key: Key, replacing held: CacheEntry<Value>
  ) async throws -> Bool {
    record(.revalidate(key, expiresAt: entry.expiresAt))
    return try await base.revalidate(entry, for: key, replacing: held)
  }

  /// Records ``Call/removeValue(_:)``, then forwards it to the base layer.
  public nonisolated func removeValue(for key: Key) async throws {
    record(.removeValue(key))
    try await base.removeValue(for: key)
  }

  /// Records ``Call/removeAll``, then forwards it to the base layer.
  public nonisolated func removeAll() async throws {
    record(.removeAll)
    try await base.removeAll()
  }

  /// Records ``Call/invalidate(tag:at:)``, then forwards it to the base layer.
  public nonisolated func invalidate(tag: String, at instant: CacheInstant) async throws {
    record(.invalidate(tag: tag, at: instant))
    try await base.invalidate(tag: tag, at: instant)
  }

  /// Records ``Call/memoryPressure(_:)``, then forwards it to the base layer.
  public nonisolated func handleMemoryPressure(_ level: MemoryPressureLevel) async {
    record(.memoryPressure(level))
    await base.handleMemoryPressure(level)
  }

  /// Passes the environment on to the wrapped layer.
  public nonisolated func follow(_ environment: CacheEnvironment) {
    base.follow(environment)
  }

  /// Records ``Call/close``, then closes the base layer.
  public nonisolated func close() async throws {
    record(.close)
    try await base.close()
  }

  private nonisolated func record(_ call: Call) {
    log.withLock { $0.append(call) }
  }
}
