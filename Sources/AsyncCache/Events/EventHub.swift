public import Synchronization  // Atomic

/// An event that an observer's bounded buffer can report its losses with: what an
/// ``EventSequence`` delivers.
public protocol DropReportingEvent: Sendable {
  /// The event that stands for `count` events the observer's buffer dropped, `last` being the
  /// latest of them (an event that carries state, such as a prefetcher's progress, passes it on).
  static func dropped(count: Int, last: Self) -> Self
}

/// Fans a component's events out to its observers: bounded buffers (each an
/// ``EventSequence``) and, for components that offer one, a synchronous handler.
///
/// Producers check ``isObserved`` (one relaxed atomic load) before they build an event, so no
/// event exists while nobody listens. One buffer may observe several hubs (a loading cache's
/// and its memory layers'); each subscription carries the index of the layer it observes.
///
/// Lock order: a hub's lock, then a buffer's. Neither is held while calling out, and producers
/// may emit while holding locks of their own: both locks are leaves. A handler is called on the
/// producer's thread: a hub with one must be emitted to outside the producer's locks.
@usableFromInline
package final class EventHub<Event: DropReportingEvent>: Sendable {
  @usableFromInline
  struct Subscriber: Sendable {
    @usableFromInline let buffer: EventBuffer<Event>
    @usableFromInline let layer: Int
    /// Whether this hub finishing ends the buffer's sequence: the hub of the sequence's owner.
    let endsSequence: Bool
  }

  @usableFromInline let observerCount = Atomic<Int>(0)
  @usableFromInline let subscribers = Locked<[Subscriber]>([])
  /// The producer is gone (``finishAll()``): a new observer's sequence ends at once.
  let isFinished = Atomic<Bool>(false)
  /// Called with every event, before the buffers get it; counts as an observer.
  @usableFromInline let handler: (@Sendable (Event) -> Void)?

  /// Creates a hub; `handler`, if any, is called with every event, synchronously.
  @usableFromInline
  package init(handler: (@Sendable (Event) -> Void)? = nil) {
    self.handler = handler
    if handler != nil { observerCount.store(1, ordering: .relaxed) }
  }

  /// Whether anyone observes this hub now. A producer that reads `false` builds no event.
  @inlinable
  package var isObserved: Bool { observerCount.load(ordering: .relaxed) != 0 }

  /// Hands `event` to the handler, then appends it to every observer's buffer. Inlinable, so
  /// that it is specialized for the event type: unspecialized, copying an event costs metadata
  /// lookups.
  @inlinable
  package func emit(_ event: Event) {
    handler?(event)
    for subscriber in subscribers.withLock({ $0 }) { subscriber.buffer.append(event) }
  }

  /// Appends an eviction of `key` to every observer's buffer, with the index each gave the layer.
  @inlinable
  func emitEviction<Key>(of key: Key, reason: EvictionReason) where Event == CacheEvent<Key> {
    handler?(.eviction(key: key, reason: reason, layer: 0))
    for subscriber in subscribers.withLock({ $0 }) {
      subscriber.buffer.append(.eviction(key: key, reason: reason, layer: subscriber.layer))
    }
  }

  /// A new observer's sequence, buffering at most `limit` events (at least 1).
  package func events(bufferingNewest limit: Int) -> EventSequence<Event> {
    EventSequence(capacity: limit, observing: [(self, 0)])
  }

  func subscribe(_ buffer: EventBuffer<Event>, layer: Int = 0, endsSequence: Bool = true) {
    let finished = subscribers.withLock { subscribers -> Bool in
      if isFinished.load(ordering: .relaxed) { return endsSequence }
      subscribers.append(Subscriber(buffer: buffer, layer: layer, endsSequence: endsSequence))
      observerCount.store(subscribers.count + (handler == nil ? 0 : 1), ordering: .relaxed)
      return false
    }
    if finished { buffer.finish() }
  }

  func unsubscribe(_ buffer: EventBuffer<Event>) {
    subscribers.withLock { subscribers in
      subscribers.removeAll { $0.buffer === buffer }
      observerCount.store(subscribers.count + (handler == nil ? 0 : 1), ordering: .relaxed)
    }
  }

  /// Ends every observer's sequence once it has read what its buffer holds (the producer is
  /// going away).
  package func finishAll() {
    let finished = subscribers.withLock { subscribers in
      isFinished.store(true, ordering: .relaxed)
      defer {
        subscribers = []
        observerCount.store(handler == nil ? 0 : 1, ordering: .relaxed)
      }
      return subscribers
    }
    for subscriber in finished where subscriber.endsSequence { subscriber.buffer.finish() }
  }
}

/// One observer's events: a ring of at most `capacity` events, grown as events wait in it, that
/// drops the oldest when full and counts what it dropped.
@usableFromInline
final class EventBuffer<Event: DropReportingEvent>: Sendable {
  @usableFromInline
  struct State: Sendable {
    @usableFromInline var ring: [Event?] = []
    @usableFromInline let capacity: Int
    @usableFromInline var start = 0
    @usableFromInline var count = 0
    /// Events dropped since the observer last read; reported before the next event.
    @usableFromInline var pendingDrops = 0
    /// The latest of them.
    @usableFromInline var lastDropped: Event?
    @usableFromInline var totalDrops = 0
    /// Readers waiting for an event, oldest first (one per task calling `next()`).
    @usableFromInline var readers: [(id: UInt64, continuation: UnsafeContinuation<Event?, Never>)] = []
    @usableFromInline var nextReader: UInt64 = 0
    @usableFromInline var isFinished = false

    init(capacity: Int) {
      self.capacity = capacity
    }

    /// Buffers `event`, dropping the oldest when full.
    @inlinable
    mutating func push(_ event: Event) {
      if count == capacity {
        lastDropped = popOldest()
        pendingDrops += 1
        totalDrops += 1
      }
      if count == ring.count {
        // Full, but under capacity: grow, the oldest first.
        if start != 0 {
          ring = Array(ring[start...]) + ring[..<start]
          start = 0
        }
        ring.append(event)
      } else {
        ring[(start + count) % ring.count] = event
      }
      count += 1
    }

    /// The next event for the reader: the report of events dropped, if any, then the oldest.
    mutating func pop() -> Event? {
      if pendingDrops > 0, let last = lastDropped {
        defer {
          pendingDrops = 0
          lastDropped = nil
        }
        return Event.dropped(count: pendingDrops, last: last)
      }
      return popOldest()
    }

    @inlinable
    mutating func popOldest() -> Event? {
      guard count > 0 else { return nil }
      defer {
        ring[start] = nil
        start = (start + 1) % ring.count
        count -= 1
      }
      return ring[start]
    }
  }

  @usableFromInline let state: Locked<State>

  init(capacity: Int) {
    state = Locked(State(capacity: Swift.max(capacity, 1)))
  }

  /// Hands `event` to a waiting reader, or buffers it, dropping the oldest when full.
  @inlinable
  func append(_ event: Event) {
    let reader = state.withLock { state -> UnsafeContinuation<Event?, Never>? in
      if state.isFinished { return nil }
      // A reader waits only while nothing is buffered or pending.
      if !state.readers.isEmpty { return state.readers.removeFirst().continuation }
      state.push(event)
      return nil
    }
    reader?.resume(returning: event)
  }

  /// The next event; `nil` once the buffer is finished and read, or when the calling task is
  /// cancelled (which finishes the buffer).
  func next() async -> Event? {
    let id = state.withLock { state in
      state.nextReader &+= 1
      return state.nextReader
    }
    return await withTaskCancellationHandler {
      await withUnsafeContinuation { (continuation: UnsafeContinuation<Event?, Never>) in
        let ready = state.withLock { state -> Event?? in
          if Task.isCancelled {
            state.isFinished = true
            return .some(nil)
          }
          if let event = state.pop() { return .some(event) }
          if state.isFinished { return .some(nil) }
          state.readers.append((id, continuation))
          return .none
        }
        if case .some(let event) = ready { continuation.resume(returning: event) }
      }
    } onCancel: {
      // Cancelling a reader ends the sequence, as for `AsyncStream`.
      let reader = state.withLock { state -> UnsafeContinuation<Event?, Never>? in
        state.isFinished = true
        guard let index = state.readers.firstIndex(where: { $0.id == id }) else { return nil }
        return state.readers.remove(at: index).continuation
      }
      reader?.resume(returning: nil)
    }
  }

  /// Ends the sequence after the buffered events; readers waiting now get `nil`.
  func finish() {
    let readers = state.withLock { state in
      state.isFinished = true
      defer { state.readers = [] }
      return state.readers
    }
    for reader in readers { reader.continuation.resume(returning: nil) }
  }

  /// Events dropped in all since the observer subscribed.
  var droppedCount: Int { state.withLock { $0.totalDrops } }

  /// The readers waiting for an event. For tests.
  var parkedReaderCount: Int { state.withLock { $0.readers.count } }
}
