public import AsyncCache
import Testing

/// The error an unimplemented double throws after recording a test issue.
public struct UnimplementedError: Error, Sendable, CustomStringConvertible {
  /// What was called, e.g. `UnimplementedFetcher.fetch(42)`.
  public var call: String

  public var description: String { "\(call) is unimplemented" }
}

/// An origin that must not be used: any fetch records a test issue and throws
/// ``UnimplementedError``.
///
/// Inject it where a test expects every value to come from a layer:
///
/// ```swift
/// let cache = try LoadingCache(layers: [warmMemory], origin: UnimplementedFetcher<String, Int>())
/// #expect(try await cache.value(for: "cached") == 1)   // fails the test if it reaches the origin
/// ```
public struct UnimplementedFetcher<Key: Hashable & Sendable, Value: Sendable>: AsyncFetcher {
  private let name: String
  private let sourceLocation: SourceLocation

  /// Creates the double; issues point at the line that created it.
  public init(
    _ name: String = "UnimplementedFetcher",
    fileID: String = #fileID,
    filePath: String = #filePath,
    line: Int = #line,
    column: Int = #column
  ) {
    self.name = name
    self.sourceLocation = SourceLocation(fileID: fileID, filePath: filePath, line: line, column: column)
  }

  /// Records an issue and throws ``UnimplementedError``.
  public func fetch(_ key: Key) async throws -> Value {
    throw unimplemented("\(name).fetch(\(key))", at: sourceLocation)
  }
}

/// A layer that must not be used: every call records a test issue; lookups and writes then
/// throw ``UnimplementedError``.
public final actor UnimplementedLayer<Key: Hashable & Sendable, Value: Sendable>: AsyncCacheLayer {
  private nonisolated let name: String
  private nonisolated let sourceLocation: SourceLocation

  /// Creates the double; issues point at the line that created it.
  public init(
    _ name: String = "UnimplementedLayer",
    fileID: String = #fileID,
    filePath: String = #filePath,
    line: Int = #line,
    column: Int = #column
  ) {
    self.name = name
    self.sourceLocation = SourceLocation(fileID: fileID, filePath: filePath, line: line, column: column)
  }

  /// Records an issue and throws ``UnimplementedError``.
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    throw unimplemented("\(name).entry(for: \(key))", at: sourceLocation)
  }

  /// Records an issue and throws ``UnimplementedError``.
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    throw unimplemented("\(name).insert(_:for: \(key))", at: sourceLocation)
  }

  /// Records an issue and throws ``UnimplementedError``.
  public nonisolated func removeValue(for key: Key) async throws {
    throw unimplemented("\(name).removeValue(for: \(key))", at: sourceLocation)
  }

  /// Records an issue and throws ``UnimplementedError``.
  public nonisolated func removeAll() async throws {
    throw unimplemented("\(name).removeAll()", at: sourceLocation)
  }

  /// Records an issue.
  public nonisolated func handleMemoryPressure(_ level: MemoryPressureLevel) async {
    _ = unimplemented("\(name).handleMemoryPressure(\(level))", at: sourceLocation)
  }
}

private func unimplemented(_ call: String, at sourceLocation: SourceLocation) -> UnimplementedError {
  Issue.record("Unimplemented: \(call) was called", sourceLocation: sourceLocation)
  return UnimplementedError(call: call)
}
