import TestSupport
import Testing

@testable import AsyncCache

/// An event of the tests: the `index`th beat of `producer`, or the report of beats dropped.
private enum Beat: DropReportingEvent, Hashable {
  case beat(producer: Int, index: Int)
  indirect case dropped(count: Int, last: Beat)

  static func of(_ index: Int) -> Beat { .beat(producer: 0, index: index) }
}

/// Returns once `count` tasks wait on `events`' buffer for an event, or once the calling task
/// is cancelled. The buffer has no watcher to resume, so this yields until it sees them.
private func waitForParkedReaders(_ count: Int, on events: EventSequence<Beat>) async {
  while events.subscription.buffer.parkedReaderCount < count && !Task.isCancelled { await Task.yield() }
}

@Suite("EventHub and EventSequence", .timeLimit(.minutes(3)))
struct EventHubTests {
  // MARK: - Buffering

  @Test("a sequence gets the events emitted after it was made, in order, and none from before")
  func inOrder() async {
    let hub = EventHub<Beat>()
    hub.emit(.of(0))
    let events = hub.events(bufferingNewest: 10)
    for index in 1...3 { hub.emit(.of(index)) }
    #expect(await events.drained() == [.of(1), .of(2), .of(3)])
    #expect(events.droppedCount == 0)
  }

  @Test("a full buffer drops the oldest events and reports them once, in their place, with the latest it lost")
  func dropsTheOldest() async {
    let hub = EventHub<Beat>()
    let events = hub.events(bufferingNewest: 2)
    for index in 1...5 { hub.emit(.of(index)) }
    #expect(await events.drained() == [.dropped(count: 3, last: .of(3)), .of(4), .of(5)])
    #expect(events.droppedCount == 3)
  }

  @Test("a limit below 1 buffers one event", arguments: [0, -5])
  func limitOfAtLeastOne(limit: Int) async {
    let hub = EventHub<Beat>()
    let events = hub.events(bufferingNewest: limit)
    hub.emit(.of(1))
    hub.emit(.of(2))
    #expect(await events.drained() == [.dropped(count: 1, last: .of(1)), .of(2)])
  }

  @Test("each report counts the losses since the last read; droppedCount counts them all")
  func reportsRestartAfterEachRead() async {
    let hub = EventHub<Beat>()
    let events = hub.events(bufferingNewest: 1)
    var iterator = events.makeAsyncIterator()
    hub.emit(.of(1))
    hub.emit(.of(2))
    #expect(await iterator.next() == .dropped(count: 1, last: .of(1)))
    #expect(await iterator.next() == .of(2))
    for index in 3...5 { hub.emit(.of(index)) }
    #expect(await iterator.next() == .dropped(count: 2, last: .of(4)))
    #expect(await iterator.next() == .of(5))
    #expect(events.droppedCount == 3)
  }

  @Test("random emits and reads keep the order, the drops and their reports of a simple model", arguments: [1, 2, 3])
  func model(seed: UInt64) async {
    var random = SplitMix64(seed: seed)
    let capacity = Int(random.next() % 6) + 1
    let hub = EventHub<Beat>()
    let events = hub.events(bufferingNewest: capacity)
    var iterator = events.makeAsyncIterator()
    // The model: the buffered events, oldest first, and the drops not reported yet.
    var buffered: [Beat] = []
    var unreported: (count: Int, last: Beat)?
    var totalDrops = 0
    for index in 0..<2_000 {
      if random.next() % 3 != 0 {
        hub.emit(.of(index))
        buffered.append(.of(index))
        if buffered.count > capacity {
          let lost = buffered.removeFirst()
          unreported = ((unreported?.count ?? 0) + 1, lost)
          totalDrops += 1
        }
      } else if let report = unreported {
        #expect(
          await iterator.next() == .dropped(count: report.count, last: report.last), "seed \(seed), step \(index)")
        unreported = nil
      } else if !buffered.isEmpty {
        #expect(await iterator.next() == buffered.removeFirst(), "seed \(seed), step \(index)")
      }
    }
    #expect(events.droppedCount == totalDrops)
    events.finish()
    var rest: [Beat] = []
    while let event = await iterator.next() { rest.append(event) }
    #expect(rest == (unreported.map { [Beat.dropped(count: $0.count, last: $0.last)] } ?? []) + buffered)
  }

  // MARK: - Observers

  @Test("a hub is observed while a sequence or a handler observes it, and only then")
  func isObserved() {
    let hub = EventHub<Beat>()
    #expect(!hub.isObserved)
    let first = hub.events(bufferingNewest: 1)
    let second = hub.events(bufferingNewest: 1)
    #expect(hub.isObserved)
    first.finish()
    #expect(hub.isObserved, "the second still observes")
    second.finish()
    #expect(!hub.isObserved)

    let handled = EventHub<Beat>(handler: { _ in })
    #expect(handled.isObserved, "a handler counts as an observer")
    handled.events(bufferingNewest: 1).finish()
    handled.finishAll()
    #expect(handled.isObserved, "for as long as the hub lives")
  }

  @Test("the handler gets every event, observed or not, and sequences get the same ones")
  func handler() async {
    let log = EventLog<Beat>()
    let hub = EventHub<Beat>(handler: log.handler)
    hub.emit(.of(0))
    let events = hub.events(bufferingNewest: 10)
    hub.emit(.of(1))
    hub.emit(.of(2))
    #expect(log.all == [.of(0), .of(1), .of(2)])
    #expect(await events.drained() == [.of(1), .of(2)])
  }

  @Test("each of many sequences gets every event")
  func manySubscribers() async {
    let hub = EventHub<Beat>()
    let sequences = (0..<20).map { _ in hub.events(bufferingNewest: 100) }
    for index in 0..<100 { hub.emit(.of(index)) }
    for events in sequences {
      #expect(await events.drained() == (0..<100).map { .of($0) })
    }
  }

  @Test("several iterators of one sequence share its buffer: each event goes to one of them")
  func iteratorsShareTheBuffer() async {
    let hub = EventHub<Beat>()
    let events = hub.events(bufferingNewest: 10)
    let readers = (0..<3).map { _ in
      Task {
        var iterator = events.makeAsyncIterator()
        return await iterator.next()
      }
    }
    await waitForParkedReaders(3, on: events)
    for index in 0..<3 { hub.emit(.of(index)) }
    var received: [Beat?] = []
    for reader in readers { received.append(await reader.value) }
    #expect(Set(received) == [.of(0), .of(1), .of(2)])
    #expect(events.subscription.buffer.parkedReaderCount == 0)
  }

  // MARK: - Unsubscribing

  @Test("a sequence let go with its iterators unsubscribes")
  func droppedSequenceUnsubscribes() {
    let hub = EventHub<Beat>()
    var iterator: EventSequence<Beat>.AsyncIterator?
    do {
      let events = hub.events(bufferingNewest: 4)
      iterator = events.makeAsyncIterator()
    }
    #expect(hub.isObserved, "the iterator keeps the subscription")
    #expect(iterator != nil)
    iterator = nil
    #expect(!hub.isObserved)
    #expect(hub.subscribers.withLock { $0.isEmpty })
  }

  @Test("a reader waiting for an event whose task is cancelled gets nil; the sequence ends and unsubscribes")
  func cancelledWaitingReader() async {
    let hub = EventHub<Beat>()
    let events = hub.events(bufferingNewest: 4)
    let other = hub.events(bufferingNewest: 4)
    let reader = Task {
      var seen: [Beat] = []
      for await event in events { seen.append(event) }
      return seen
    }
    await waitForParkedReaders(1, on: events)
    reader.cancel()
    #expect(await reader.value == [])
    #expect(events.subscription.buffer.parkedReaderCount == 0)
    #expect(hub.subscribers.withLock { $0.count } == 1, "only the other sequence is left")
    hub.emit(.of(1))
    #expect(await events.drained() == [], "nothing is delivered after the end")
    #expect(await other.drained() == [.of(1)], "other observers go on")
  }

  @Test("a reader whose task is cancelled before it asks gets nil, even with events buffered")
  func cancelledBeforeReading() async {
    let hub = EventHub<Beat>()
    let events = hub.events(bufferingNewest: 4)
    hub.emit(.of(1))
    let next = await Task {
      withUnsafeCurrentTask { $0?.cancel() }
      var iterator = events.makeAsyncIterator()
      return await iterator.next()
    }.value
    #expect(next == nil)
    #expect(!hub.isObserved)
  }

  @Test("finish ends the sequence once it is read: waiting readers get nil, later events are not kept")
  func finish() async {
    let hub = EventHub<Beat>()
    let events = hub.events(bufferingNewest: 4)
    let waiting = hub.events(bufferingNewest: 4)
    let reader = Task {
      var iterator = waiting.makeAsyncIterator()
      return await iterator.next()
    }
    await waitForParkedReaders(1, on: waiting)
    hub.emit(.of(1))
    #expect(await reader.value == .of(1), "a waiting reader is handed the event")
    hub.emit(.of(2))
    events.finish()
    hub.emit(.of(3))
    #expect(await events.drained() == [.of(1), .of(2)])
    #expect(hub.subscribers.withLock { $0.count } == 1)
  }

  // MARK: - The producer going away

  @Test("finishAll ends every sequence after what it holds; a sequence made later ends at once")
  func finishAll() async {
    let hub = EventHub<Beat>()
    let unread = hub.events(bufferingNewest: 4)
    let read = hub.events(bufferingNewest: 4)
    let reader = Task {
      var seen: [Beat] = []
      for await event in read { seen.append(event) }
      return seen
    }
    await waitForParkedReaders(1, on: read)
    hub.emit(.of(1))
    hub.emit(.of(2))
    hub.finishAll()
    #expect(!hub.isObserved)
    #expect(await reader.value == [.of(1), .of(2)], "a waiting reader ends")
    var iterator = unread.makeAsyncIterator()
    #expect(await iterator.next() == .of(1), "buffered events are still read")
    #expect(await iterator.next() == .of(2))
    #expect(await iterator.next() == nil)
    hub.emit(.of(3))
    let late = hub.events(bufferingNewest: 4)
    var lateIterator = late.makeAsyncIterator()
    #expect(await lateIterator.next() == nil)
    #expect(!hub.isObserved)
  }

  @Test("only the owner's hub ends a sequence that observes several; each gives its events its own layer index")
  func severalHubs() async {
    let owner = EventHub<CacheEvent<String>>()
    let layer = EventHub<CacheEvent<String>>()
    let events = EventSequence(capacity: 10, observing: [(owner, 0), (layer, 2)])
    layer.emitEviction(of: "k", reason: .countLimit)
    layer.finishAll()
    owner.emitEviction(of: "j", reason: .countLimit)
    let finishedLayer = EventHub<CacheEvent<String>>()
    finishedLayer.finishAll()
    let late = EventSequence(capacity: 10, observing: [(owner, 0), (finishedLayer, 1)])
    owner.finishAll()
    var evictions: [String] = []
    for await event in events {
      if case .eviction(let key, _, let index) = event { evictions.append("\(key)@\(index)") }
    }
    #expect(evictions == ["k@2", "j@0"], "the layer's end did not end the sequence; the owner's did")
    var lateCount = 0
    for await _ in late { lateCount += 1 }
    #expect(lateCount == 0, "a finished layer hub does not end a new sequence; its owner's end does")
  }

  // MARK: - Concurrency

  @Test("events emitted from many tasks at once all arrive, each producer's in the order it emitted them")
  func concurrentProducers() async {
    let (producers, perProducer) = (8, 500)
    let hub = EventHub<Beat>()
    let events = hub.events(bufferingNewest: producers * perProducer)
    let reader = Task {
      var seen: [Beat] = []
      var iterator = events.makeAsyncIterator()
      while seen.count < producers * perProducer, let event = await iterator.next() { seen.append(event) }
      return seen
    }
    await withTaskGroup(of: Void.self) { group in
      for producer in 0..<producers {
        group.addTask {
          for index in 0..<perProducer { hub.emit(.beat(producer: producer, index: index)) }
        }
      }
    }
    let seen = await reader.value
    #expect(seen.count == producers * perProducer)
    for producer in 0..<producers {
      let indexes = seen.compactMap { event -> Int? in
        guard case .beat(producer, let index) = event else { return nil }
        return index
      }
      #expect(indexes == Array(0..<perProducer), "producer \(producer)")
    }
    #expect(events.droppedCount == 0)
    #expect(events.subscription.buffer.parkedReaderCount == 0)
  }

  @Test(
    "with a small buffer and many producers, each producer's order holds and every event arrives or is counted lost")
  func concurrentProducersWithDrops() async {
    let (producers, perProducer) = (8, 500)
    let hub = EventHub<Beat>()
    let events = hub.events(bufferingNewest: 16)
    let reader = Task {
      // A slow reader, reading while the producers emit, to the end.
      var seen: [Beat] = []
      for await event in events {
        seen.append(event)
        await Task.yield()
      }
      return seen
    }
    await withTaskGroup(of: Void.self) { group in
      for producer in 0..<producers {
        group.addTask {
          for index in 0..<perProducer { hub.emit(.beat(producer: producer, index: index)) }
        }
      }
    }
    events.finish()
    let seen = await reader.value
    var reported = 0
    var delivered = 0
    var lastIndex = [Int](repeating: -1, count: producers)
    for event in seen {
      switch event {
      case .dropped(let count, _): reported += count
      case .beat(let producer, let index):
        delivered += 1
        #expect(index > lastIndex[producer], "producer \(producer): \(index) after \(lastIndex[producer])")
        lastIndex[producer] = index
      }
    }
    #expect(delivered + events.droppedCount == producers * perProducer, "every event arrived or was counted lost")
    #expect(reported == events.droppedCount, "every loss was reported")
    #expect(events.subscription.buffer.parkedReaderCount == 0)
  }
}
