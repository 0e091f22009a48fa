public import AsyncCache

/// A tracer that records the spans a cache starts (their names, attributes, errors, and the
/// span each one is a child of), so that a test can assert what a tracing system would get.
///
/// ```swift
/// @Test func aLoadIsTracedUnderItsRequest() async throws {
///     let tracer = RecordingTracer()
///     let cache = try LoadingCache(layers: [MemoryLayer<Int, Int>()], origin: origin,
///                                  configuration: .init(tracer: tracer))
///     _ = try await tracer.withSpan("request") { _ in try await cache.value(for: 1) }
///     let load = try #require(await tracer.waitForEndedSpans(named: "cache.load").first)
///     #expect(load.attributes["cache.source"] == "origin")
///     #expect(load.parent == tracer.spans(named: "request").first?.id)
/// }
/// ```
///
/// Like swift-distributed-tracing's `withSpan`, it records an error thrown out of a span's
/// operation on the span. A span is a child of the span of the task that starts it, as with task-local tracing
/// contexts: a load's span is a child of the span of the request that started the load, since
/// the load's task inherits that request's task-local values. A load's span ends after its
/// requests resume: await ``waitForEndedSpans(_:named:)`` instead of polling. Safe from any
/// context.
public final class RecordingTracer: CacheTracer, Sendable {
  /// A value of a span's attribute.
  public enum Attribute: Hashable, Sendable, CustomStringConvertible, ExpressibleByStringLiteral,
    ExpressibleByIntegerLiteral, ExpressibleByBooleanLiteral
  {
    case string(String)
    case int(Int)
    case bool(Bool)

    public init(stringLiteral value: String) { self = .string(value) }
    public init(integerLiteral value: Int) { self = .int(value) }
    public init(booleanLiteral value: Bool) { self = .bool(value) }

    public var description: String {
      switch self {
      case .string(let value): value
      case .int(let value): String(value)
      case .bool(let value): String(value)
      }
    }
  }

  /// A span recorded.
  public struct RecordedSpan: Sendable, CustomStringConvertible {
    /// The span's number, in the order the spans started, from 1.
    public let id: Int
    /// The name it was started with.
    public let name: String
    /// The number of the span it is a child of: the span of the task that started it, if any.
    public let parent: Int?
    /// Its attributes, by name.
    public internal(set) var attributes: [String: Attribute] = [:]
    /// The errors recorded on it, oldest first.
    public internal(set) var errors: [any Error] = []
    /// Whether its operation has returned or thrown.
    public internal(set) var isEnded = false

    public var description: String {
      let attributes = attributes.sorted { $0.key < $1.key }.map { "\($0.key)=\($0.value)" }
      return "#\(id) \(name) (parent \(parent.map(String.init) ?? "none")) [\(attributes.joined(separator: ", "))]"
        + (errors.isEmpty ? "" : " errors: \(errors)")
    }
  }

  /// A span handed to an operation: its number.
  public struct Span: Sendable {
    /// The number of the span (``RecordedSpan/id``).
    public let id: Int
  }

  private struct Watcher {
    var isSatisfied: @Sendable ([RecordedSpan]) -> Bool
    var continuation: UnsafeContinuation<Void, Never>
  }

  private struct State {
    var spans: [RecordedSpan] = []
    var nextWatcher: UInt64 = 0
    var watchers: [UInt64: Watcher] = [:]

    mutating func update(_ id: Int, _ change: (inout RecordedSpan) -> Void) -> [UnsafeContinuation<Void, Never>] {
      change(&spans[id - 1])
      var woken: [UnsafeContinuation<Void, Never>] = []
      for (key, watcher) in watchers where watcher.isSatisfied(spans) {
        watchers[key] = nil
        woken.append(watcher.continuation)
      }
      return woken
    }
  }

  /// The span of the current task, per tracer.
  @TaskLocal private static var current: [ObjectIdentifier: Int] = [:]

  private let state = Locked(State())

  /// Whether the cache traces each layer operation too (see
  /// ``AsyncCache/CacheTracer/tracesLayerOperations``).
  public let tracesLayerOperations: Bool

  /// Creates a tracer with no spans.
  ///
  /// - Parameter tracesLayerOperations: Whether the cache traces each layer lookup and write.
  ///   Default `false`.
  public init(tracesLayerOperations: Bool = false) {
    self.tracesLayerOperations = tracesLayerOperations
  }

  public func withSpan<T>(_ operationName: String, _ operation: (Span) async throws -> T) async rethrows -> T {
    let me = ObjectIdentifier(self)
    let parent = Self.current[me]
    let id = state.withLock { state in
      state.spans.append(RecordedSpan(id: state.spans.count + 1, name: operationName, parent: parent))
      return state.spans.count
    }
    defer { change(id) { $0.isEnded = true } }
    var context = Self.current
    context[me] = id
    do {
      return try await Self.$current.withValue(context) { try await operation(Span(id: id)) }
    } catch {
      // As swift-distributed-tracing's `withSpan` does.
      change(id) { $0.errors.append(error) }
      throw error
    }
  }

  public func setAttribute(_ name: String, _ value: String, on span: Span) {
    change(span.id) { $0.attributes[name] = .string(value) }
  }

  public func setAttribute(_ name: String, _ value: Int, on span: Span) {
    change(span.id) { $0.attributes[name] = .int(value) }
  }

  public func setAttribute(_ name: String, _ value: Bool, on span: Span) {
    change(span.id) { $0.attributes[name] = .bool(value) }
  }

  public func recordError(_ error: any Error, on span: Span) {
    change(span.id) { $0.errors.append(error) }
  }

  private func change(_ id: Int, _ change: (inout RecordedSpan) -> Void) {
    let woken = state.withLock { $0.update(id, change) }
    for continuation in woken { continuation.resume() }
  }

  /// Every span so far, in the order they started.
  public var spans: [RecordedSpan] { state.withLock { $0.spans } }

  /// The spans so far named `name`, in the order they started.
  public func spans(named name: String) -> [RecordedSpan] {
    state.withLock { $0.spans.filter { $0.name == name } }
  }

  /// The children of span `id`, in the order they started.
  public func children(of id: Int) -> [RecordedSpan] {
    state.withLock { $0.spans.filter { $0.parent == id } }
  }

  /// Returns once at least `count` spans named `name` (of any name when `nil`) have ended, with
  /// every ended span of that name, in the order they started.
  ///
  /// Returns at once if enough have ended already; when the calling task is cancelled, returns
  /// those ended so far, which may be fewer.
  @discardableResult
  public func waitForEndedSpans(_ count: Int = 1, named name: String? = nil) async -> [RecordedSpan] {
    let matches: @Sendable (RecordedSpan) -> Bool = { $0.isEnded && (name == nil || $0.name == name) }
    let isSatisfied: @Sendable ([RecordedSpan]) -> Bool = { $0.count(where: matches) >= count }
    let id = state.withLock { state -> UInt64 in
      state.nextWatcher += 1
      return state.nextWatcher
    }
    await withTaskCancellationHandler {
      await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
        let ready = state.withLock { state -> Bool in
          if isSatisfied(state.spans) || Task.isCancelled { return true }
          state.watchers[id] = Watcher(isSatisfied: isSatisfied, continuation: continuation)
          return false
        }
        if ready { continuation.resume() }
      }
    } onCancel: {
      let continuation = state.withLock { $0.watchers.removeValue(forKey: id)?.continuation }
      continuation?.resume()
    }
    return state.withLock { $0.spans.filter(matches) }
  }
}
