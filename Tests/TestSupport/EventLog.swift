import AsyncCache

/// Collects events (or lines describing them) from handlers that run on any thread.
package final class EventLog<Event: Sendable>: Sendable {
  private let events = Locked<[Event]>([])

  package init() {}

  /// Records `event`.
  package func append(_ event: Event) {
    events.withLock { $0.append(event) }
  }

  /// A handler that records what it is given, for an `eventHandler:` parameter.
  package var handler: @Sendable (Event) -> Void { { event in self.append(event) } }

  /// The events recorded so far, in order.
  package var all: [Event] { events.withLock { $0 } }
}
