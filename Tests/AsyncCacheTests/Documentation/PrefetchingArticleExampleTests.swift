import AsyncCache
import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

/// The "Prefetching and priorities" article's examples, compiled and run, so that it cannot
/// drift from the API. Its origin is gated, so each test decides when photos arrive, and each
/// reads the prefetcher's updates instead of sleeping.
@Suite(.timeLimit(.minutes(3)))
struct PrefetchingArticleExampleTests {
  struct Photo: Codable, Sendable, Equatable {
    var id: String
  }

  struct HTTPError: Error, Equatable {
    var status: Int
  }

  struct Offline: Error {}

  /// The article's `api`: a photo is released by the test, and "missing" is a 404.
  struct API: Sendable {
    let origin = GatedFetcher<String, Photo> { id in
      if id == "missing" { throw HTTPError(status: 404) }
      return Photo(id: id)
    }

    func photo(_ id: String) async throws -> Photo { try await origin.fetch(id) }

    /// The bulk endpoint: every photo but "missing", and the batches it was asked for.
    let batches = Locked<[[String]]>([])
    func photos(_ ids: [String]) async throws -> [String: Photo] {
      batches.withLock { $0.append(ids) }
      return Dictionary(uniqueKeysWithValues: ids.filter { $0 != "missing" }.map { ($0, Photo(id: $0)) })
    }
  }

  /// The article's `logger`: keeps what it is told.
  final class Logger: Sendable {
    private let recorded = Locked<[String]>([])

    func info(_ line: String) { recorded.withLock { $0.append("info: \(line)") } }
    func warning(_ line: String) { recorded.withLock { $0.append("warning: \(line)") } }
    var lines: [String] { recorded.withLock { $0 } }
  }

  /// The article's `progressBar`.
  final class ProgressBar {
    var fraction = 0.0
  }

  static let photoIDs = (0..<20).map { "p\($0)" }

  /// Reads `updates` until one satisfies `condition` and returns it; `nil` if the sequence ended.
  static func read(
    _ updates: inout EventSequence<PrefetchUpdate<String>>.AsyncIterator,
    until condition: (PrefetchUpdate<String>) -> Bool
  ) async -> PrefetchUpdate<String>? {
    while let update = await updates.next() {
      if condition(update) { return update }
    }
    return nil
  }

  // MARK: Prefetch a gallery

  @Test func theGalleryExampleWorks() async throws {
    let api = API()
    let photoIDs = Self.photoIDs
    let (visibleIndexChanges, indexChanged) = AsyncStream.makeStream(of: Int.self)

    // From PrefetchingAndPriorities.md, "Prefetch a gallery" (the task group in a task of its
    // own, so that the test can move the index):
    let photos = try LoadingCache(
      layers: [MemoryLayer<String, Photo>(configuration: .init(countLimit: 200))],
      origin: ClosureFetcher { id in try await api.photo(id) })
    let prefetcher = try AsyncPrefetcher(cache: photos, keys: photoIDs)
    var updates = prefetcher.events().makeAsyncIterator()
    let gallery = Task {
      try await withThrowingDiscardingTaskGroup { group in
        group.addTask { try await prefetcher.run() }  // ends when the group is cancelled
        for await index in visibleIndexChanges {
          await prefetcher.setCurrentIndex(index)  // cancels what left the window
        }
        group.cancelAll()
      }
    }

    // The default window: the 5 items after the current one, at most 2 at a time, nearest first.
    await api.origin.waitForFetches(1, for: "p1")
    await api.origin.waitForFetches(1, for: "p2")
    #expect(api.origin.heldCount() == 2)

    // A cell on screen asks for its photo: an urgent request, which pauses the prefetcher.
    let id = "p0"
    let cell = Task {
      // From the article:
      let photo = try await photos.value(for: id)
      return photo
    }
    await api.origin.waitForFetches(1, for: "p0")
    let paused = await Self.read(&updates) { if case .paused = $0.event { true } else { false } }
    #expect(paused?.progress.isPaused == true)
    #expect(await prefetcher.isPaused)
    api.origin.release("p0")
    #expect(try await cell.value == Photo(id: "p0"))
    _ = await Self.read(&updates) { if case .resumed = $0.event { true } else { false } }

    // The user jumps ahead: the loads of p1 and p2 are cancelled, p11 and p12 start.
    indexChanged.yield(10)
    await api.origin.waitForFetches(1, for: "p11")
    await api.origin.waitForFetches(1, for: "p12")
    #expect(api.origin.wasCancelled("p1") && api.origin.wasCancelled("p2"))
    api.origin.open()
    let done = PrefetchProgress(completed: 5, total: 5, currentIndex: 10, isPaused: false)
    _ = await Self.read(&updates) { $0.progress == done }
    #expect((11...15).allSatisfy { photos.cachedValue(for: "p\($0)") == Photo(id: "p\($0)") })
    #expect(photos.cachedValue(for: "p1") == nil, "a cancelled load stores nothing")

    // The index changes end: the group is cancelled, and run() returns with its updates.
    indexChanged.finish()
    try await gallery.value
    let rest = await Self.read(&updates) { _ in false }
    #expect(rest == nil, "the updates finished when the prefetcher stopped")
  }

  // MARK: Read the progress

  @Test func theProgressExampleWorks() async throws {
    let api = API()
    api.origin.open()  // this test is not about timing
    let photos = try LoadingCache(
      layers: [MemoryLayer<String, Photo>()], origin: ClosureFetcher { id in try await api.photo(id) })
    let prefetcher = try AsyncPrefetcher(
      cache: photos, keys: ["p0", "p1", "missing", "p3"], configuration: .init(window: PrefetchWindow(range: 3)))
    let progressBar = ProgressBar()
    let logger = Logger()
    // A second observer, which stops the prefetcher once its window is done.
    let stopper = prefetcher.events()

    // From the article:
    let updates = prefetcher.events()  // before run(), to see every update

    let run = Task { try await prefetcher.run() }
    let stop = Task {
      for await update in stopper where update.progress.completed == 3 { break }
      await prefetcher.stop()
    }

    // From the article (it ends when the prefetcher stops):
    for await update in updates {
      progressBar.fraction = update.progress.fractionCompleted
      if case .failed(let id, let error) = update.event {
        logger.warning("could not prefetch \(id): \(error)")
      }
    }

    try await run.value
    await stop.value
    #expect(progressBar.fraction == 1)
    #expect(logger.lines == ["warning: could not prefetch missing: HTTPError(status: 404)"])
    #expect(await prefetcher.progress == PrefetchProgress(completed: 3, total: 3, currentIndex: 0, isPaused: false))
  }

  // MARK: Urgent and background work

  @Test func theDemoteExampleWorks() async throws {
    let api = API()
    let photos = try LoadingCache(
      layers: [MemoryLayer<String, Photo>()], origin: ClosureFetcher { id in try await api.photo(id) })
    let id = "p7"
    // Releases the photo once the second request joined the first one's load.
    let release = Task {
      await api.origin.waitForFetches(1, for: id)
      await photos.waitForRequests(2, for: id)
      api.origin.release(id)
    }

    // From the article:
    let request = Task { try await photos.value(for: id) }  // the cell appears: urgent
    await api.origin.waitForFetches(1, for: id)  // (the test waits for the load to reach the origin)
    #expect(photos.hasUrgentLoads)
    // The cell scrolls out of view before the photo arrives:
    let demoted = photos.demote(id)  // background work from now on
    #expect(demoted)
    #expect(!photos.hasUrgentLoads)
    // The cell comes back: a new request joins the same load and promotes it.
    let photo = try await photos.value(for: id)

    await release.value
    #expect(photo == Photo(id: id))
    #expect(try await request.value == photo, "the demoted request got the value too")
    #expect(api.origin.callCount(for: id) == 1)
    #expect(!photos.demote(id), "no load of the key is left")
  }

  // MARK: Choose the window

  @Test func theWindowExampleWorks() {
    // From the article:
    let window = PrefetchWindow(direction: .both, range: 3, offset: 1)
    #expect(window.indices(around: 10, count: 100) == [11, 9, 12, 8, 13, 7])
    #expect(window.indices(around: 0, count: 100) == [1, 2, 3])  // nothing precedes the first item

    // What the article says of the defaults, of offset 0 and of the end of the list:
    #expect(PrefetchWindow().indices(around: 10, count: 100) == [11, 12, 13, 14, 15])
    #expect(PrefetchWindow(direction: .preceding, range: 2).indices(around: 10, count: 100) == [9, 8])
    #expect(PrefetchWindow(range: 2, offset: 0).indices(around: 10, count: 100) == [10, 11])
    #expect(window.indices(around: 99, count: 100) == [98, 97, 96])
  }

  // MARK: Choose the concurrency and the destination

  @Test func theDestinationExampleWorks() async throws {
    let api = API()
    api.origin.open()  // this test is not about timing
    let photoIDs = Self.photoIDs
    let temporary = try TemporaryDirectory()
    defer { temporary.remove() }
    let folder = temporary.appending("Photos")

    // From the article:
    let memory = try MemoryLayer<String, Photo>(configuration: .init(countLimit: 200))
    let disk = try await DiskLayer<String, Photo>(directory: folder)
    let photos = try LoadingCache(
      layers: [memory, disk],
      origin: ClosureFetcher { id in try await api.photo(id) })

    let prefetcher = try AsyncPrefetcher(
      cache: photos, keys: photoIDs,
      configuration: .init(
        window: PrefetchWindow(direction: .both, range: 20),
        maximumConcurrentLoads: 4,
        destination: .lowerLayers))

    let updates = prefetcher.events()
    let run = Task { try await prefetcher.run() }
    // Around the first of 20 items, the window holds the 19 others.
    for await update in updates where update.progress.completed == 19 { break }
    run.cancel()
    try await run.value

    #expect(memory.count == 0, "what is on screen was not evicted")
    #expect(await disk.count == 19)
    #expect(try await disk.entry(for: "p19")?.value == Photo(id: "p19"))
    #expect(api.origin.callCount == 19)
  }

  // MARK: Run and stop

  @Test func theStartAndStopExampleWorks() async throws {
    let api = API()
    let photos = try LoadingCache(
      layers: [MemoryLayer<String, Photo>()], origin: ClosureFetcher { id in try await api.photo(id) })
    let prefetcher = try AsyncPrefetcher(cache: photos, keys: Self.photoIDs)

    // From the article:
    try await prefetcher.start()  // runs in a task of its own; does nothing if it runs already
    try await prefetcher.start()
    await api.origin.waitForFetches(2)  // (the test waits for its loads to reach the origin)
    await prefetcher.stop()  // returns once its loads have ended

    #expect(api.origin.cancellationCount() == 2)
    #expect(photos.statistics.loadsInFlight == 0)
    let restarted = await #expect(throws: AsyncCacheError.self) { try await prefetcher.start() }
    #expect(restarted?.code == .invalidState)
    let rerun = await #expect(throws: AsyncCacheError.self) { try await prefetcher.run() }
    #expect(rerun?.code == .invalidState)
    await prefetcher.stop()  // stopped already: nothing happens
  }

  // MARK: Retry failed loads

  @Test func theRetryExampleWorks() async throws {
    let api = API()
    let logger = Logger()
    let clock = ManualClock()

    // From the article (with a manual clock):
    let photos = try LoadingCache(
      layers: [MemoryLayer<String, Photo>()],
      origin: ClosureFetcher { id in try await api.photo(id) },
      configuration: .init(
        clock: clock,
        retryPolicy: RetryPolicy(
          maximumAttempts: 4, initialDelay: .milliseconds(200), maximumDelay: .seconds(5),
          classify: { error in (error as? HTTPError)?.status == 404 ? .fatal : .transient })))

    let events = photos.events()
    let logging = Task {  // (the test keeps the task, to wait for it)
      for await event in events {
        switch event {
        case .retrying(let id, let attempt, let error, let delay):
          logger.info("photo \(id): attempt \(attempt) failed (\(error)), retry in \(delay)")
        case .loadFailed(let id, let error, let attempts, _):
          logger.warning("photo \(id): \(error) after \(attempts) attempts")
        case .servedStale(let id, let error):
          logger.warning("photo \(id): \(error); showing the stale copy")
        default:
          break
        }
      }
    }

    // A 503 is transient: two requests share one retry loop.
    let first = Task { try await photos.value(for: "p1") }
    let second = Task { try await photos.value(for: "p1") }
    await photos.waitForRequests(2, for: "p1")
    await api.origin.waitForFetches(1, for: "p1")
    api.origin.release("p1", throwing: HTTPError(status: 503))
    await clock.waitForSleepers(1)
    clock.advance(by: .milliseconds(200))  // the longest the first delay can be, with jitter
    await api.origin.waitForFetches(1, for: "p1")
    api.origin.release("p1")
    #expect(try await [first.value, second.value] == [Photo(id: "p1"), Photo(id: "p1")])
    #expect(api.origin.callCount(for: "p1") == 2)

    // A 404 is fatal: the load fails at once.
    let missing = Task { try await photos.value(for: "missing") }
    await api.origin.waitForFetches(1, for: "missing")
    api.origin.release("missing")
    await #expect(throws: HTTPError(status: 404)) { try await missing.value }
    #expect(api.origin.callCount(for: "missing") == 1)

    events.finish()
    await logging.value
    let lines = logger.lines
    #expect(lines.count == 2)
    #expect(lines.first?.hasPrefix("info: photo p1: attempt 1 failed (HTTPError(status: 503)), retry in 0.") == true)
    #expect(lines.last == "warning: photo missing: HTTPError(status: 404) after 1 attempts")
  }

  // MARK: Load many keys at once

  @Test func theBulkExampleWorks() async throws {
    let api = API()
    api.origin.open()  // this test is not about timing
    let logger = Logger()
    var shown: [String: Photo] = [:]
    func show(_ photos: [String: Photo]) { shown = photos }
    let photos = try LoadingCache(
      layers: [MemoryLayer<String, Photo>()], origin: ClosureFetcher { id in try await api.photo(id) })
    let visibleIDs = ["p1", "missing", "p2", "p1"]
    let albumIDs = ["p1", "p2", "p3"]

    // From the article:
    let page = await photos.values(for: visibleIDs)  // what could be loaded, and what not
    show(page.values)
    for (id, error) in page.failures {
      logger.warning("photo \(id) failed: \(error)")
    }

    let album = try await photos.allValues(for: albumIDs)  // every photo, or the first error

    #expect(shown == ["p1": Photo(id: "p1"), "p2": Photo(id: "p2")])
    #expect(logger.lines == ["warning: photo missing failed: HTTPError(status: 404)"])
    #expect(album == ["p1": Photo(id: "p1"), "p2": Photo(id: "p2"), "p3": Photo(id: "p3")])
    #expect(api.origin.callCount(for: "p1") == 1, "asked once, then answered from memory")
    await #expect(throws: HTTPError(status: 404)) { try await photos.allValues(for: ["p1", "missing"]) }
  }

  @Test func theBatchOriginExampleWorks() async throws {
    let api = API()
    let visibleIDs = ["p1", "p2", "missing"]

    // From the article:
    let photos = try LoadingCache(
      layers: [MemoryLayer<String, Photo>()],
      origin: ClosureFetcher { id in try await api.photo(id) },
      batchOrigin: ClosureBatchFetcher(maximumBatchSize: 50) { ids in
        try await api.photos(ids)  // [String: Photo]
      })
    let page = await photos.values(for: visibleIDs)  // one call for the missing ones

    #expect(page.values == ["p1": Photo(id: "p1"), "p2": Photo(id: "p2")])
    #expect((page.failures["missing"] as? AsyncCacheError)?.code == .notFound)
    #expect(api.batches.withLock { $0 } == [["p1", "p2", "missing"]])
    #expect(api.origin.callCount == 0, "single requests' origin was not asked")
  }

  // MARK: Testing a prefetcher

  @Test func theWindowFollowsTheIndex() async throws {
    // From the article, as it is:
    let origin = GatedFetcher<String, String> { "photo \($0)" }
    let photos = try LoadingCache(layers: [MemoryLayer<String, String>()], origin: origin)
    let prefetcher = try AsyncPrefetcher(
      cache: photos, keys: ["a", "b", "c", "d", "e"],
      configuration: .init(window: PrefetchWindow(range: 2)))
    let updates = prefetcher.events()  // made before run(): sees every update
    let run = Task { try await prefetcher.run() }

    await origin.waitForFetches(1, for: "b")  // the window after "a": "b" and "c"
    await origin.waitForFetches(1, for: "c")
    await prefetcher.setCurrentIndex(2)  // the window after "c": "d" and "e"
    #expect(origin.wasCancelled("b"))  // before setCurrentIndex returned
    #expect(!origin.wasCancelled("c"))  // on screen now: its load goes on
    origin.open()  // every fetch goes through from now on

    for await update in updates where update.progress.completed == 2 { break }
    #expect(photos.cachedValue(for: "d") == "photo d")
    #expect(photos.cachedValue(for: "e") == "photo e")
    #expect(photos.cachedValue(for: "b") == nil)

    run.cancel()
    try await run.value  // returns once every load has ended
  }

  @Test func aPrefetchIsRetriedOnTheManualClock() async throws {
    let origin = GatedFetcher<String, String> { "photo \($0)" }

    // From the article:
    let clock = ManualClock()
    let photos = try LoadingCache(
      layers: [MemoryLayer<String, String>()], origin: origin,
      configuration: .init(clock: clock, retryPolicy: RetryPolicy(maximumAttempts: 2, jitter: 0)))

    // The prefetcher runs, and "b" is in its window:
    let prefetcher = try AsyncPrefetcher(
      cache: photos, keys: ["a", "b"], configuration: .init(window: PrefetchWindow(range: 1)))
    let updates = prefetcher.events()
    let run = Task { try await prefetcher.run() }

    // From the article:
    await origin.waitForFetches(1, for: "b")
    origin.release("b", throwing: Offline())
    await clock.waitForSleepers(1)  // the retry waits for its delay
    clock.advance(by: .milliseconds(100))
    await origin.waitForFetches(1, for: "b")
    origin.release("b", throwing: Offline())
    for await update in updates {
      if case .failed("b", _) = update.event { break }
    }

    #expect(origin.callCount(for: "b") == 2)
    #expect(await prefetcher.progress.completed == 1, "a failed key counts as done")
    run.cancel()
    try await run.value
  }
}
