/// The decisions of a prefetcher, free of tasks and time: which keys to start loading, which to
/// cancel, and how far the current window is done.
///
/// The owner feeds it what happened (the window moved, a load finished, urgent work started
/// or stopped) and carries out the ``Action``s it returns. Loads start in window order, nearest
/// first, at most ``limit`` at a time, and none while paused. A load whose key leaves the
/// window is cancelled; a key that stays keeps its load and its outcome.
struct AsyncPrefetcherStateMachine<Key: Hashable & Sendable>: Sendable {
  /// What the owner must do.
  enum Action: Hashable, Sendable {
    /// Start loading `key` (the owner may find it cached and report it finished at once).
    case start(Key)
    /// Cancel the load of `key`: it left the window.
    case cancel(Key)
  }

  /// How a load ended.
  enum Outcome: Hashable, Sendable {
    case loaded
    case skipped
    case failed
    case cancelled
  }

  /// The most loads at a time.
  let limit: Int
  /// The keys of the current window, nearest first.
  private(set) var window: [Key] = []
  /// Loads started and not finished.
  private(set) var loading: Set<Key> = []
  /// Keys of the current window whose load ended (loaded, skipped or failed).
  private(set) var finished: Set<Key> = []
  /// Whether urgent work holds back new loads.
  private(set) var isPaused = false

  init(limit: Int) {
    self.limit = Swift.max(limit, 1)
  }

  /// How many keys of the current window are done, and how many it has.
  var progress: (done: Int, total: Int) { (finished.count, window.count) }

  /// The window moved to `keys` (nearest first): cancels the loads that left it and starts
  /// loads for the new keys, within the limit.
  mutating func moveWindow(to keys: [Key]) -> [Action] {
    var seen = Set<Key>()
    window = keys.filter { seen.insert($0).inserted }
    var actions: [Action] = []
    for key in loading where !seen.contains(key) {
      actions.append(.cancel(key))
    }
    for case .cancel(let key) in actions { loading.remove(key) }
    finished = finished.intersection(seen)
    return actions + fill()
  }

  /// The load of `key` ended with `outcome`; starts the next loads.
  mutating func loadEnded(_ key: Key, _ outcome: Outcome) -> [Action] {
    guard loading.remove(key) != nil else { return [] }
    // A cancelled load of a key still in the window (cancelled from outside) is tried again.
    if outcome != .cancelled, window.contains(key) { finished.insert(key) }
    return fill()
  }

  /// Urgent work started (`true`) or ended (`false`): while paused, no load starts.
  mutating func setPaused(_ paused: Bool) -> [Action] {
    isPaused = paused
    return fill()
  }

  /// Starts loads in window order up to the limit, unless paused.
  private mutating func fill() -> [Action] {
    guard !isPaused else { return [] }
    var actions: [Action] = []
    for key in window where loading.count < limit {
      guard !loading.contains(key), !finished.contains(key) else { continue }
      loading.insert(key)
      actions.append(.start(key))
    }
    return actions
  }
}
