public import AsyncCache

// The layer's events: recorded (the last 100 kept), logged, and delivered to its observers.
extension SQLiteLayer {
  /// The events recorded since the layer was opened (at most the last 100), oldest first.
  public var recentEvents: [SQLiteLayerEvent] { events.withLock { $0 } }

  /// A sequence of the events the layer reports from now on (``SQLiteLayerEvent``), for one
  /// observer; see `EventSequence` for its buffering and its end. Events of the layer's opening
  /// happened before any sequence: ``recentEvents`` keeps them, and a
  /// ``Configuration-swift.struct/eventHandler`` sees them too.
  ///
  /// - Parameter limit: The most events the sequence buffers for a slow observer; past it, the
  ///   oldest are dropped and reported by a ``SQLiteLayerEvent/dropped(count:)``. At least 1.
  public nonisolated func events(bufferingNewest limit: Int = 1_000) -> EventSequence<SQLiteLayerEvent> {
    eventHub.events(bufferingNewest: limit)
  }

  /// Keeps `event` with the recent ones, logs it (at `level`, else at its own level) and delivers
  /// it to the observers.
  nonisolated func record(_ event: SQLiteLayerEvent, level: CacheLogLevel? = nil) {
    events.withLock { events in
      events.append(event)
      if events.count > 100 { events.removeFirst(events.count - 100) }
    }
    layerEnvironment.log(level ?? event.logLevel, event.description, metadata: event.logMetadata)
    eventHub.emit(event)
  }
}
