/// Loads the keys around a moving position ahead of need, as background work of a
/// ``LoadingCache``.
///
/// A gallery shows item `currentIndex` of a list of keys; the prefetcher keeps the items of its
/// ``Configuration-swift.struct/window`` (say the next five) loading, nearest first, at most
/// ``Configuration-swift.struct/maximumConcurrentLoads`` at a time, so they are cached by the
/// time the user gets there:
///
/// ```swift
/// let prefetcher = try AsyncPrefetcher(cache: images, keys: photoURLs)
/// try await withThrowingDiscardingTaskGroup { group in
///     group.addTask { try await prefetcher.run() }         // ends when the group is cancelled
///     for await index in visibleIndexChanges {
///         await prefetcher.setCurrentIndex(index)          // cancels what left the window
///     }
///     group.cancelAll()
/// }
/// ```
///
/// - Moving the index (``setCurrentIndex(_:)``) cancels the loads of keys that left the window
///   at once. A load that a request (``LoadingCache/value(for:)``) also waits for goes on for
///   that request. So does the load of the item the index moved onto, and of those nearer to
///   it than the window's offset: they are on screen, and a UI that moves the index before it
///   requests the item must not lose the prefetch it is about to join.
/// - Keys the top memory layer holds are skipped without asking any other layer. With
///   ``Destination-swift.enum/lowerLayers``, values go below the top layer only, so a large
///   prefetch does not evict what is on screen.
/// - Prefetches are background work: while requests wait for loads of the same cache, no new
///   prefetch starts (the prefetcher pauses and resumes on its own), and a request that needs a
///   key being prefetched joins that load and promotes it (see ``LoadingCache``).
/// - ``events(bufferingNewest:)`` reports every load and the progress of the window, to as
///   many observers as want it.
///
/// Its work runs in a task group owned by ``run()``, which returns when its task is cancelled
/// or ``stop()`` is called, once every load it started has ended, or has been handed over to
/// the requests that joined it (those loads are theirs). ``start()`` runs it in a task of its
/// own for code that is not structured. A prefetcher runs once.
///
/// Background work waits for urgent work without a time limit: under a steady stream of
/// requests' loads (a busy server), prefetching waits until they stop.
public final actor AsyncPrefetcher<Key: Hashable & Sendable, Value: Sendable> {
  /// Where prefetched values are stored.
  public enum Destination: Sendable, Hashable {
    /// Every layer of the cache, the top memory layer included: the value is ready for a
    /// synchronous hit.
    case allLayers
    /// Every layer but the top one (typically the persistent layers below memory), so that a
    /// large prefetch does not evict what is on screen. A key counts as cached when any layer
    /// has it.
    case lowerLayers
  }

  /// How a prefetcher chooses and runs its loads.
  public struct Configuration: Sendable {
    /// The items around the current index to prefetch. Default: the 5 upcoming items, starting
    /// with the one after the current.
    public var window: PrefetchWindow
    /// The most loads at a time; at least 1. Default 2: fewer than the connections an origin
    /// usually allows, so that requests never queue behind prefetches. A load whose key leaves
    /// the window stops counting at once, so the new window's loads start without waiting for
    /// an origin that is slow to notice the cancellation (``run()`` and ``stop()`` still
    /// return only once such calls have ended).
    public var maximumConcurrentLoads: Int
    /// Where values go. Default ``Destination-swift.enum/allLayers``.
    public var destination: Destination
    /// The priority prefetch loads run at until a request promotes them. Default `.low`.
    public var priority: TaskPriority
    /// Where the prefetcher logs its failed loads, pauses and runs (see <doc:CacheLogging>); `nil`
    /// (the default) for the cache's ``LoadingCache/Configuration-swift.struct/logger``.
    public var logger: CacheLogger?

    /// Creates a configuration.
    public init(
      window: PrefetchWindow = PrefetchWindow(),
      maximumConcurrentLoads: Int = 2,
      destination: Destination = .allLayers,
      priority: TaskPriority = .low,
      logger: CacheLogger? = nil
    ) {
      self.window = window
      self.maximumConcurrentLoads = maximumConcurrentLoads
      self.destination = destination
      self.priority = priority
      self.logger = logger
    }
  }

  private enum Lifecycle {
    case idle
    case running
    case finished
  }

  /// The cache the prefetcher loads through.
  public nonisolated let cache: LoadingCache<Key, Value>
  /// The prefetcher's configuration.
  public nonisolated let configuration: Configuration

  /// The list the current index points into.
  public private(set) var keys: [Key]
  /// The position the window is around, within `0..<keys.count` (0 for an empty list).
  public private(set) var currentIndex: Int

  private var machine: AsyncPrefetcherStateMachine<Key>
  /// The loads running now, by key: the ticket withdraws a load that left the window.
  private var tickets: [Key: PrefetchTicket] = [:]
  private var lifecycle = Lifecycle.idle
  /// The prefetcher's registration with its cache, whose ``LoadingCache/close()`` stops it.
  private var registration: UInt64?
  /// `stop()` was called: the run loop starts nothing more.
  private var isStopping = false
  private var stopWaiters: [CheckedContinuation<Void, Never>] = []
  /// Wakes the run loop up to start loads: the index moved, a load ended, urgent work changed.
  private let wakeups: AsyncStream<Void>
  private let wakeup: AsyncStream<Void>.Continuation
  private nonisolated let eventHub = EventHub<PrefetchUpdate<Key>>()

  /// Creates a prefetcher of `keys` through `cache`, around `currentIndex`. It starts loading
  /// when it runs (``run()`` or ``start()``).
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` when
  ///   ``Configuration-swift.struct/maximumConcurrentLoads`` is below 1, or when the destination
  ///   is ``Destination-swift.enum/lowerLayers`` and the cache's chain has a single layer.
  public init(
    cache: LoadingCache<Key, Value>,
    keys: [Key],
    currentIndex: Int = 0,
    configuration: Configuration = Configuration()
  ) throws {
    guard configuration.maximumConcurrentLoads >= 1 else {
      throw AsyncCacheError.invalidConfiguration(
        "AsyncPrefetcher.Configuration.maximumConcurrentLoads must be at least 1; it is \(configuration.maximumConcurrentLoads)"
      )
    }
    if configuration.destination == .lowerLayers, cache.chain.tiers.count < 2 {
      throw AsyncCacheError.invalidConfiguration(
        "AsyncPrefetcher destination .lowerLayers needs a cache with at least two layers; this one has 1"
      )
    }
    self.cache = cache
    self.configuration = configuration
    self.keys = keys
    self.currentIndex = Self.clamp(currentIndex, count: keys.count)
    var machine = AsyncPrefetcherStateMachine<Key>(limit: configuration.maximumConcurrentLoads)
    _ = machine.moveWindow(to: Self.window(configuration.window, around: self.currentIndex, in: keys))
    self.machine = machine
    (wakeups, wakeup) = AsyncStream.makeStream(of: Void.self, bufferingPolicy: .bufferingNewest(1))
  }

  // MARK: Moving

  /// Moves the window around `index` (clamped to the list): loads of keys that left it are
  /// cancelled at once (except those on screen: the item at `index` and those nearer to it
  /// than the window's offset), and the new keys start loading, nearest first.
  public func setCurrentIndex(_ index: Int) {
    currentIndex = Self.clamp(index, count: keys.count)
    windowChanged()
  }

  /// Replaces the list of keys (items were added, removed or reordered) and moves the window
  /// around `index`, or around the same index when `nil`. Keys that stay in the window keep
  /// their loads.
  public func setKeys(_ keys: [Key], currentIndex index: Int? = nil) {
    self.keys = keys
    currentIndex = Self.clamp(index ?? currentIndex, count: keys.count)
    windowChanged()
  }

  /// The progress of the current window.
  public var progress: PrefetchProgress {
    let (done, total) = machine.progress
    return PrefetchProgress(completed: done, total: total, currentIndex: currentIndex, isPaused: machine.isPaused)
  }

  /// Whether urgent loads hold prefetching back now.
  public var isPaused: Bool { machine.isPaused }

  // MARK: Running

  /// Prefetches until the calling task is cancelled or ``stop()`` is called, then cancels the
  /// loads still running and returns once they have ended (a load that a request joined goes
  /// on for the request); the ``events(bufferingNewest:)`` sequences finish then.
  ///
  /// The cache's ``LoadingCache/close()`` stops it too.
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidState`` when the prefetcher runs or ran already;
  ///   ``AsyncCacheError/Code/closed`` when its cache was closed.
  public func run() async throws {
    try begin("run()")
    await runLoop()
  }

  /// Runs the prefetcher in a task of its own, for code that is not structured; ``stop()``
  /// ends it. Does nothing when it runs already.
  ///
  /// - Throws: ``AsyncCacheError/Code/invalidState`` when the prefetcher has stopped;
  ///   ``AsyncCacheError/Code/closed`` when its cache was closed.
  public func start() throws {
    if lifecycle == .running { return }
    try begin("start()")
    Task { await self.runLoop() }
  }

  /// Stops the prefetcher and returns once its loads have ended and ``run()`` has returned.
  /// A prefetcher that never ran will not run. Calling it again does nothing.
  public func stop() async {
    switch lifecycle {
    case .idle:
      lifecycle = .finished
      finishUpdates()
    case .running:
      isStopping = true
      wakeup.finish()
      await withCheckedContinuation { stopWaiters.append($0) }
    case .finished:
      break
    }
  }

  private func begin(_ operation: String) throws {
    switch lifecycle {
    case .idle:
      registration = try cache.registerPrefetcher { [weak self] in await self?.stop() }
      lifecycle = .running
    case .running:
      throw AsyncCacheError.invalidState("AsyncPrefetcher.\(operation): the prefetcher is running already")
    case .finished:
      throw AsyncCacheError.invalidState("AsyncPrefetcher.\(operation): the prefetcher has stopped; make a new one")
    }
  }

  private func runLoop() async {
    let observer = cache.addUrgencyObserver { [wakeup] in wakeup.yield() }
    // Room in the memory layer's admission window for the keys loaded ahead and for those read
    // since the oldest of them was loaded (one per step, offset included): they wait there
    // until they are read.
    let reservation =
      configuration.destination == .lowerLayers
      ? nil : cache.reserveAdmissionWindow(entries: configuration.window.admissionRoom)
    logger.debug("running", metadata: ["keys": "\(keys.count)", "index": "\(currentIndex)"], source: Self.component)
    emit(.moved(index: currentIndex))
    wakeup.yield()
    await withDiscardingTaskGroup { group in
      // Ends when `stop()` finishes the stream or the task is cancelled.
      for await _ in wakeups {
        // A wakeup buffered before `stop()` starts nothing.
        guard !isStopping, !Task.isCancelled else { break }
        updatePause()
        for key in machine.nextLoads() {
          startLoad(key, in: &group)
        }
      }
      group.cancelAll()
    }
    cache.removeUrgencyObserver(observer)
    if let reservation { cache.releaseAdmissionWindow(reservation) }
    if let registration { cache.unregisterPrefetcher(registration) }
    logger.debug("stopped", source: Self.component)
    wakeup.finish()
    lifecycle = .finished
    finishUpdates()
    for waiter in stopWaiters { waiter.resume() }
    stopWaiters = []
  }

  private func startLoad(_ key: Key, in group: inout DiscardingTaskGroup) {
    let ticket = cache.makePrefetchTicket()
    tickets[key] = ticket
    emit(.started(key))
    let cache = cache
    let skipsTopLayer = configuration.destination == .lowerLayers
    group.addTask(priority: configuration.priority) {
      let outcome = await cache.prefetch(key, ticket: ticket, skipsTopLayer: skipsTopLayer)
      await self.loadEnded(key, ticket: ticket, outcome: outcome)
    }
  }

  private func loadEnded(_ key: Key, ticket: PrefetchTicket, outcome: PrefetchOutcome) {
    // A load withdrawn when its key left the window was reported, and its slot freed, then.
    guard tickets[key] === ticket else { return }
    tickets[key] = nil
    switch outcome {
    case .loaded:
      machine.loadEnded(key, .loaded)
      emit(.loaded(key))
    case .skipped:
      machine.loadEnded(key, .skipped)
      emit(.skipped(key))
    case .failed(let error):
      machine.loadEnded(key, .failed)
      logger.debug(
        "prefetch failed",
        metadata: ["key": CacheLogger.describe(key), "error": CacheLogger.describe(error)],
        source: Self.component)
      emit(.failed(key, error))
    case .cancelled:
      machine.loadEnded(key, .cancelled)
      emit(.cancelled(key))
    }
    wakeup.yield()
  }

  private func windowChanged() {
    let cancelled = machine.moveWindow(
      to: Self.window(configuration.window, around: currentIndex, in: keys), keeping: onScreenKeys())
    emit(.moved(index: currentIndex))
    for key in cancelled {
      guard let ticket = tickets.removeValue(forKey: key) else { continue }
      cache.withdraw(ticket, for: key)
      emit(.cancelled(key))
    }
    wakeup.yield()
  }

  /// The current item and those nearer to it than the window's offset, on either side: shown
  /// now, so requested now, and their loads must not be cancelled.
  private func onScreenKeys() -> Set<Key> {
    guard !keys.isEmpty else { return [] }
    let reach = Swift.min(Swift.max(configuration.window.offset - 1, 0), keys.count)
    let first = Swift.max(currentIndex - reach, 0)
    let last = Swift.min(currentIndex + reach, keys.count - 1)
    return Set(keys[first...last])
  }

  private func updatePause() {
    let urgent = cache.hasUrgentLoads
    guard urgent != machine.isPaused else { return }
    machine.setPaused(urgent)
    logger.trace(urgent ? "paused: requests are waiting for loads" : "resumed", source: Self.component)
    emit(urgent ? .paused : .resumed)
  }

  /// The logger in effect: the configuration's, or the cache's.
  private nonisolated var logger: CacheLogger { configuration.logger ?? cache.configuration.logger }

  private static var component: String { "AsyncPrefetcher" }

  private static func clamp(_ index: Int, count: Int) -> Int {
    Swift.min(Swift.max(index, 0), Swift.max(count - 1, 0))
  }

  private static func window(_ window: PrefetchWindow, around index: Int, in keys: [Key]) -> [Key] {
    window.indices(around: index, count: keys.count).map { keys[$0] }
  }

  // MARK: Updates

  /// A sequence of what the prefetcher does from now on, each with the progress of the current
  /// window, for one observer.
  ///
  /// Each call returns a new sequence, and any number can be observed at once; each buffers and
  /// ends as ``EventSequence`` describes, like every component's events. A sequence finishes
  /// when the prefetcher stops (one made after that is empty). Safe from any context.
  ///
  /// - Parameter limit: The most updates the sequence buffers for a slow observer; past it, the
  ///   oldest are dropped and reported by a ``PrefetchEvent/dropped(count:)`` that carries the
  ///   latest dropped progress, so a progress bar stays right. At least 1.
  public nonisolated func events(bufferingNewest limit: Int = 1_000) -> EventSequence<PrefetchUpdate<Key>> {
    eventHub.events(bufferingNewest: limit)
  }

  private func emit(_ event: PrefetchEvent<Key>) {
    guard eventHub.isObserved else { return }
    eventHub.emit(PrefetchUpdate(event: event, progress: progress))
  }

  private func finishUpdates() {
    eventHub.finishAll()
  }
}
