package import AsyncCache

/// Collects events (or lines describing them) from handlers that run on any thread, and lets a
/// test wait until enough of them have come.
package final class EventLog<Event: Sendable>: Sendable {
  private struct Watcher {
    let count: Int
    let matches: @Sendable (Event) -> Bool
    let continuation: UnsafeContinuation<Void, Never>
  }

  private struct State {
    var events: [Event] = []
    var watchers: [UInt64: Watcher] = [:]
    var lastWatcherID: UInt64 = 0
  }

  private let state = Locked(State())

  package init() {}

  /// Records `event`, and resumes the waits it satisfies.
  package func append(_ event: Event) {
    let ready = state.withLock { state -> [UnsafeContinuation<Void, Never>] in
      state.events.append(event)
      guard !state.watchers.isEmpty else { return [] }
      let events = state.events
      let satisfied = state.watchers.filter { events.count(where: $0.value.matches) >= $0.value.count }
      for id in satisfied.keys { state.watchers[id] = nil }
      return satisfied.values.map(\.continuation)
    }
    for continuation in ready { continuation.resume() }
  }

  /// A handler that records what it is given, for an `eventHandler:` parameter.
  package var handler: @Sendable (Event) -> Void { { event in self.append(event) } }

  /// The events recorded so far, in order.
  package var all: [Event] { state.withLock { $0.events } }

  /// Returns once at least `count` of the events recorded match `matches`, or once the calling
  /// task is cancelled.
  package func waitFor(_ count: Int, where matches: @escaping @Sendable (Event) -> Bool) async {
    let id = state.withLock { state in
      state.lastWatcherID += 1
      return state.lastWatcherID
    }
    await waitForWatcher { continuation in
      state.withLock { state in
        guard state.events.count(where: matches) < count else { return false }
        state.watchers[id] = Watcher(count: count, matches: matches, continuation: continuation)
        return true
      }
    } unregister: {
      self.state.withLock { $0.watchers.removeValue(forKey: id)?.continuation }
    }
  }
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
