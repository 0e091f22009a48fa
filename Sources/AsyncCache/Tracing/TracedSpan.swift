/// A cache's tracer, its span type hidden: what the loads, the chain and its reads call.
package struct CacheTracing: Sendable {
  /// The tracer given to the cache or chain.
  package let tracer: any CacheTracer

  package init(_ tracer: any CacheTracer) {
    self.tracer = tracer
  }

  /// Whether layer operations get spans of their own.
  package var tracesLayerOperations: Bool { tracer.tracesLayerOperations }

  /// Runs `body` in a span named `name`; an error thrown by `body` (but a cancellation) sets the
  /// span's `error.type`, and the tracer records it as it leaves the span.
  package func span<T>(_ name: String, _ body: (TracedSpan) async throws -> T) async rethrows -> T {
    try await Self.span(name, of: tracer, body)
  }

  private static func span<Tracer: CacheTracer, T>(
    _ name: String, of tracer: Tracer, _ body: (TracedSpan) async throws -> T
  ) async rethrows -> T {
    try await tracer.withSpan(name) { span in
      let traced = TracedSpan(
        string: { tracer.setAttribute($0, $1, on: span) },
        int: { tracer.setAttribute($0, $1, on: span) },
        bool: { tracer.setAttribute($0, $1, on: span) },
        error: { error in
          tracer.setAttribute("error.type", tracer.errorType(of: error), on: span)
          tracer.recordError(error, on: span)
        })
      do {
        return try await body(traced)
      } catch {
        // The tracer's `withSpan` records the error it sees thrown; a cancellation is not a
        // failure of the work.
        if !(error is CancellationError) { tracer.setAttribute("error.type", tracer.errorType(of: error), on: span) }
        throw error
      }
    }
  }
}

/// A span a cache operation runs in: where it sets the attributes it learns as it goes.
package struct TracedSpan {
  private let string: (String, String) -> Void
  private let int: (String, Int) -> Void
  private let bool: (String, Bool) -> Void
  private let error: (any Error) -> Void

  fileprivate init(
    string: @escaping (String, String) -> Void, int: @escaping (String, Int) -> Void,
    bool: @escaping (String, Bool) -> Void, error: @escaping (any Error) -> Void
  ) {
    self.string = string
    self.int = int
    self.bool = bool
    self.error = error
  }

  package func set(_ name: String, _ value: String) { string(name, value) }
  package func set(_ name: String, _ value: Int) { int(name, value) }
  package func set(_ name: String, _ value: Bool) { bool(name, value) }
  /// Records that the span's work failed with `error`, which is not thrown out of the span,
  /// and its `error.type`.
  package func record(_ error: any Error) { self.error(error) }
}
