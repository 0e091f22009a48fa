/// Something that happened in an ``AsyncPrefetcher``.
public enum PrefetchEvent<Key: Hashable & Sendable>: Sendable {
  /// The prefetcher started, or the current index moved, or the key list changed: the window
  /// is now the one around `index`.
  case moved(index: Int)
  /// A key's load started.
  case started(Key)
  /// A key's value is now where the prefetcher puts it: it came from the origin, or from a
  /// lower layer into the top one.
  case loaded(Key)
  /// A key's value was already where the prefetcher puts it: the origin was not asked. (With
  /// ``AsyncPrefetcher/Destination-swift.enum/lowerLayers``, a value found in the third layer
  /// or below is still copied into the layers between it and the top one.)
  case skipped(Key)
  /// A key's load failed with this error (after the cache's retries). The key counts as done
  /// for this window and is not tried again until it leaves the window and comes back.
  case failed(Key, any Error)
  /// A key's load was cancelled: it left the window, or the prefetcher stopped. If a request
  /// was waiting for the same load, the load went on for it.
  case cancelled(Key)
  /// Urgent loads are in flight: no new prefetch starts until they end.
  case paused
  /// The urgent loads ended: prefetching goes on.
  case resumed
  /// The observer fell behind and `count` updates before this one were dropped from its buffer
  /// (see ``AsyncPrefetcher/events(bufferingNewest:)``); the update's progress is the latest
  /// dropped one's.
  case dropped(count: Int)

  /// The key the event is about, if it is about one.
  public var key: Key? {
    switch self {
    case .started(let key), .loaded(let key), .skipped(let key), .failed(let key, _), .cancelled(let key): key
    case .moved, .paused, .resumed, .dropped: nil
    }
  }
}

/// How far an ``AsyncPrefetcher`` is with its current window.
public struct PrefetchProgress: Sendable, Hashable {
  /// Keys of the window that are done: loaded, skipped because cached, or failed.
  public var completed: Int
  /// Keys in the window.
  public var total: Int
  /// The index the window is around.
  public var currentIndex: Int
  /// Whether urgent loads hold prefetching back.
  public var isPaused: Bool

  /// Creates a progress value.
  public init(completed: Int, total: Int, currentIndex: Int, isPaused: Bool) {
    self.completed = completed
    self.total = total
    self.currentIndex = currentIndex
    self.isPaused = isPaused
  }

  /// `completed / total`, from 0 to 1; 1 for an empty window.
  public var fractionCompleted: Double {
    total == 0 ? 1 : Double(completed) / Double(total)
  }
}

/// One element of an ``AsyncPrefetcher``'s events: what happened, and the progress after it.
public struct PrefetchUpdate<Key: Hashable & Sendable>: DropReportingEvent {
  /// What happened.
  public var event: PrefetchEvent<Key>
  /// The progress of the current window once it happened.
  public var progress: PrefetchProgress

  /// Creates an update.
  public init(event: PrefetchEvent<Key>, progress: PrefetchProgress) {
    self.event = event
    self.progress = progress
  }
}

extension PrefetchUpdate {
  /// A ``PrefetchEvent/dropped(count:)``, with the progress of `last`, the latest update dropped:
  /// a progress bar stays right.
  public static func dropped(count: Int, last: PrefetchUpdate) -> PrefetchUpdate {
    PrefetchUpdate(event: .dropped(count: count), progress: last.progress)
  }
}
