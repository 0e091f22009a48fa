/// The decisions of a prefetcher, free of tasks and time: which keys to start loading, which to
/// cancel, and how far the current window is done.
///
/// The owner feeds it what happened (the window moved, a load ended, urgent work started or
/// stopped), cancels the loads ``moveWindow(to:)`` returns, and asks ``nextLoads()`` which
/// loads to start when it is ready to start them. Loads start in window order, nearest first,
/// at most ``limit`` at a time, and none while paused. A load whose key leaves the window is
/// cancelled and stops counting at once; a key that stays keeps its load and its outcome.
struct AsyncPrefetcherStateMachine<Key: Hashable & Sendable>: Sendable {
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
  /// Loads started and not ended.
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

  /// The window moved to `keys` (nearest first; duplicates count once). Returns the keys whose
  /// loads left it, in the order they were in the old window: the owner must cancel them.
  ///
  /// Loads of keys in `onScreen` are kept even outside the window: those items are shown now
  /// and about to be requested, so their loads end on their own (and do not count in the
  /// progress); they are cancelled by a later move that leaves them off screen.
  mutating func moveWindow(to keys: [Key], keeping onScreen: Set<Key> = []) -> [Key] {
    var seen = Set<Key>()
    let previous = window
    window = keys.filter { seen.insert($0).inserted }
    func leaves(_ key: Key) -> Bool { !seen.contains(key) && !onScreen.contains(key) }
    var cancelled = previous.filter { loading.contains($0) && leaves($0) }
    // Loads kept for an earlier screen are no longer in `previous`.
    let previouslyInWindow = Set(previous)
    cancelled += loading.filter { !previouslyInWindow.contains($0) && leaves($0) }
    // A cancelled load stops counting at once, even while its origin call winds down: the
    // keys of the new window do not wait for it.
    for key in cancelled { loading.remove(key) }
    finished = finished.intersection(seen)
    return cancelled
  }

  /// The load of `key` ended with `outcome`. Returns `false` for a key that was not loading
  /// (its load was cancelled when it left the window).
  @discardableResult
  mutating func loadEnded(_ key: Key, _ outcome: Outcome) -> Bool {
    guard loading.remove(key) != nil else { return false }
    // A cancelled load of a key still in the window (cancelled from outside) is tried again.
    if outcome != .cancelled, window.contains(key) { finished.insert(key) }
    return true
  }

  /// Urgent work started (`true`) or ended (`false`): while paused, no load starts.
  mutating func setPaused(_ paused: Bool) {
    isPaused = paused
  }

  /// The keys to start loading now, in window order, up to the limit; none while paused.
  /// They count as loading from now on.
  mutating func nextLoads() -> [Key] {
    guard !isPaused else { return [] }
    var keys: [Key] = []
    for key in window where loading.count < limit {
      guard !loading.contains(key), !finished.contains(key) else { continue }
      loading.insert(key)
      keys.append(key)
    }
    return keys
  }
}
