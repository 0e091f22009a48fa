package import AsyncCache

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

extension EventSequence {
  /// Ends the sequence and returns the events it buffered, oldest first. For a sequence whose
  /// events were all produced already (events are buffered before the work they describe is
  /// seen done).
  package func drained() async -> [Event] {
    finish()
    var events: [Event] = []
    for await event in self { events.append(event) }
    return events
  }
}

extension EventSequence where Event: CustomStringConvertible {
  /// The next `count` events, as lines; fewer once the sequence ends.
  package func read(_ count: Int) async -> [String] {
    var iterator = makeAsyncIterator()
    var lines: [String] = []
    for _ in 0..<count {
      guard let event = await iterator.next() else { break }
      lines.append(event.description)
    }
    return lines
  }
}
