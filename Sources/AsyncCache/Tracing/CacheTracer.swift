/// Puts a cache's loads, origin calls and, optionally, layer operations in spans of a tracing
/// system: the shape of swift-distributed-tracing's `withSpan`, so that a tracer over it is a
/// few one-line methods in your package, and this one depends on none (see <doc:Tracing>).
///
/// ```swift
/// import Tracing
///
/// struct DistributedTracer: CacheTracer {
///     func withSpan<T>(_ operationName: String, _ operation: (any Span) async throws -> T) async rethrows -> T {
///         try await Tracing.withSpan(operationName) { try await operation($0) }
///     }
///     func setAttribute(_ name: String, _ value: String, on span: any Span) { span.attributes[name] = value }
///     func setAttribute(_ name: String, _ value: Int, on span: any Span) { span.attributes[name] = value }
///     func recordError(_ error: any Error, on span: any Span) { span.recordError(error); span.setStatus(.init(code: .error)) }
/// }
///
/// let cache = try LoadingCache(layers: layers, origin: origin, configuration: .init(tracer: DistributedTracer()))
/// ```
///
/// The cache starts a `cache.load` span for each load (a `cache.load_batch` span for each batch
/// of a batch origin), a `cache.origin.fetch` span for each origin call, retries included, and,
/// when ``tracesLayerOperations``, a span for each layer lookup and write of the chain;
/// <doc:Tracing> lists them with their attributes. A load's span is a
/// child of the span of the request that started the load, since the load's task inherits that
/// request's task-local values. Hits get no span, and cost nothing more with a tracer set.
public protocol CacheTracer: Sendable {
  /// What the tracing system hands an operation in a span: swift-distributed-tracing's `any Span`.
  associatedtype Span

  /// Runs `operation` in a new span named `operationName`, a child of the current task's span
  /// if it has one, and ends the span when `operation` returns or throws. An error thrown out of
  /// `operation` is the tracer's to record, as swift-distributed-tracing's `withSpan` does; the
  /// cache has set the span's `error.type` (``errorType(of:)``), but for a cancellation.
  ///
  /// It must call `operation` exactly once, on the calling task, and return what it returns
  /// (or throw what it throws): the load waits for it, and ``LoadingCache/close()`` waits for
  /// the load.
  func withSpan<T>(_ operationName: String, _ operation: (Span) async throws -> T) async rethrows -> T

  /// Sets the attribute `name` of `span` to a string.
  func setAttribute(_ name: String, _ value: String, on span: Span)

  /// Sets the attribute `name` of `span` to an integer. Default: its decimal string.
  func setAttribute(_ name: String, _ value: Int, on span: Span)

  /// Sets the attribute `name` of `span` to a Boolean. Default: `"true"` or `"false"`.
  func setAttribute(_ name: String, _ value: Bool, on span: Span)

  /// Records that the work of `span` failed with `error`, when the error is not thrown out of
  /// the span: a load that failed, or served a stale value after an error (its requests get the
  /// error; the load's own task does not throw). The cache has set the span's `error.type`.
  /// Default: nothing more.
  func recordError(_ error: any Error, on span: Span)

  /// Whether each layer lookup and write of the chain (a load's, a back-fill's, an insert's)
  /// gets a span of its own, as well as each load and origin call. Default `false`: layer
  /// operations are many, and usually fast.
  var tracesLayerOperations: Bool { get }
}

extension CacheTracer {
  public func setAttribute(_ name: String, _ value: Int, on span: Span) {
    setAttribute(name, String(value), on: span)
  }

  public func setAttribute(_ name: String, _ value: Bool, on span: Span) {
    setAttribute(name, value ? "true" : "false", on: span)
  }

  public func recordError(_ error: any Error, on span: Span) {}

  public var tracesLayerOperations: Bool { false }

  /// The `error.type` of `error`, as OpenTelemetry asks for it (a low-cardinality name): its
  /// type's name, with the code of the library's own errors (`AsyncCacheError.timedOut`).
  public func errorType(of error: any Error) -> String {
    openTelemetryErrorType(error)
  }
}

/// OpenTelemetry's `error.type` of `error`: its type's name, `AsyncCacheError.<code>` for the
/// library's own errors.
func openTelemetryErrorType(_ error: any Error) -> String {
  if let error = error as? AsyncCacheError { return "AsyncCacheError.\(error.code)" }
  return String(describing: type(of: error))
}
