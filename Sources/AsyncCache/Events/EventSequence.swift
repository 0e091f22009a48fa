/// One observer's sequence of a component's events: ``CacheEvent``s from
/// ``LoadingCache/events(bufferingNewest:)`` or ``MemoryLayer/events(bufferingNewest:)``, and
/// the events of the SQLite and Redis layers from their `events(bufferingNewest:)`.
///
/// The observer is subscribed when the sequence is created, so nothing that happens after that
/// call is missed, and unsubscribed when the sequence and its iterators are gone, when the task
/// iterating it is cancelled, or when ``finish()`` is called. Events wait in a buffer of bounded
/// size: producers never wait for the observer, and an observer that falls behind loses the
/// oldest events, reported by a ``DropReportingEvent/dropped(count:last:)`` event in their place.
///
/// ```swift
/// let events = cache.events()
/// Task {
///     for await event in events {
///         if case .loadFailed(let key, let error, _, _) = event { log.warning("\(key): \(error)") }
///     }
/// }
/// ```
///
/// Iterate a sequence from one task: several iterators of one sequence share its buffer, each
/// event going to one of them. For several observers, call `events` once per observer.
public struct EventSequence<Event: DropReportingEvent>: AsyncSequence, Sendable {
  public typealias Element = Event
  public typealias Failure = Never

  let subscription: Subscription

  init(capacity: Int, observing hubs: [(hub: EventHub<Event>, layer: Int)]) {
    subscription = Subscription(capacity: capacity, hubs: hubs)
  }

  /// The number of events dropped so far because the buffer was full.
  public var droppedCount: Int { subscription.buffer.droppedCount }

  /// Unsubscribes: the sequence ends once the events already buffered are read.
  public func finish() { subscription.end() }

  public func makeAsyncIterator() -> AsyncIterator { AsyncIterator(subscription: subscription) }

  /// Reads the events of an ``EventSequence``.
  public struct AsyncIterator: AsyncIteratorProtocol {
    let subscription: Subscription

    /// The next event, waiting for one; `nil` once the sequence has ended, or when the calling
    /// task is cancelled, which ends the sequence (for every iterator of it).
    public mutating func next() async -> Event? {
      let event = await subscription.buffer.next()
      if event == nil { subscription.end() }
      return event
    }
  }

  /// The subscription of one buffer to the hubs it observes; ends with its last user.
  final class Subscription: Sendable {
    let buffer: EventBuffer<Event>
    let hubs: [EventHub<Event>]

    init(capacity: Int, hubs: [(hub: EventHub<Event>, layer: Int)]) {
      buffer = EventBuffer(capacity: capacity)
      self.hubs = hubs.map(\.hub)
      // The first hub is the owner's: the sequence ends when it finishes. The others (the
      // memory layers of a chain, say) may finish earlier, as the chain closes them.
      for (index, (hub, layer)) in hubs.enumerated() { hub.subscribe(buffer, layer: layer, endsSequence: index == 0) }
    }

    func end() {
      for hub in hubs { hub.unsubscribe(buffer) }
      buffer.finish()
    }

    deinit { end() }
  }
}

/// The events of a ``LoadingCache`` or a ``MemoryLayer``.
public typealias CacheEvents<Key: Hashable & Sendable> = EventSequence<CacheEvent<Key>>
