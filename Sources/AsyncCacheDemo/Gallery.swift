import AsyncCache
import Synchronization

/// A photo service: the slow origin of the gallery.
final class PhotoLibrary: AsyncFetcher, Sendable {
  private let calls = Atomic<Int>(0)

  func fetch(_ id: Int) async throws -> String {
    calls.wrappingAdd(1, ordering: .relaxed)
    try await Task.sleep(for: Self.latency(of: id))
    return "photo-\(id).jpg"
  }

  /// 20 to 40 ms, scattered over the photos but the same for a photo in every pass and every
  /// run, so that the passes compare.
  static func latency(of id: Int) -> Duration {
    .milliseconds(20 + id * 7_919 % 21)
  }

  var callCount: Int { calls.load(ordering: .relaxed) }
}

/// A user paging through a gallery at a steady pace, once without prefetching and once with an
/// ``AsyncPrefetcher`` following them, to show what prefetching buys: photos that are already
/// there when the user reaches them.
struct Gallery {
  /// The photos, in the order the user sees them.
  let photos: [Int]
  /// How long the user looks at a photo before moving to the next one.
  let step = Duration.milliseconds(50)

  /// The next 5 photos, 2 loads at a time, into memory: the prefetcher's defaults, spelled out.
  /// An offset of 1 leaves the photo on screen out of the window: the screen requests it itself.
  static let prefetching = AsyncPrefetcher<Int, String>.Configuration(
    window: PrefetchWindow(direction: .upcoming, range: 5, offset: 1),
    maximumConcurrentLoads: 2,
    destination: .allLayers,
    priority: .low
  )

  init(photoCount: Int) {
    photos = Array(1...photoCount)
  }

  /// What one pass through the gallery measured.
  struct Pass {
    /// Photos already in memory when the user reached them.
    var cachedOnArrival = 0
    /// The time the user spent waiting for photos, in all and at worst.
    var waited = Duration.zero
    var longestWait = Duration.zero
    var elapsed = Duration.zero
    var originCalls = 0
    /// What the prefetcher did, when there was one.
    var prefetches: PrefetchActivity?
  }

  /// Runs both passes and prints what they measured.
  func present(title: String) async throws {
    print(
      """
      \(title): a user moves through \(photos.count) photos, one every \(Demo.format(step)), in front of an \
      origin that takes 20 to 40 ms per photo; each pass starts with an empty memory cache
      """)
    let plain = try await passWithoutPrefetching()
    report("without prefetching", plain)
    let prefetched = try await passWithPrefetching()
    report("with prefetching (the next 5 photos, 2 at a time)", prefetched)
    if let activity = prefetched.prefetches {
      print(
        "  prefetcher: \(activity.loaded) photos loaded, \(activity.skipped) skipped (cached), "
          + "\(activity.failed) failed, \(activity.cancelled) cancelled; paused \(times(activity.pauses)) "
          + "while the user waited for a photo")
    }
  }

  /// The baseline: every photo is requested when it comes on screen, and not before.
  func passWithoutPrefetching() async throws -> Pass {
    let library = PhotoLibrary()
    var pass = try await walk(through: Self.makeCache(origin: library), following: nil)
    pass.originCalls = library.callCount
    return pass
  }

  /// The same walk, with a prefetcher loading the photos ahead of the user.
  func passWithPrefetching() async throws -> Pass {
    let library = PhotoLibrary()
    let cache = try Self.makeCache(origin: library)
    let prefetcher = try AsyncPrefetcher(cache: cache, keys: photos, configuration: Self.prefetching)
    // Subscribed before the prefetcher runs, so that the monitor sees its first update. The
    // sequence finishes when the prefetcher stops, which ends the monitor on its own: it is not
    // cancelled, and its buffer has no limit, so it counts every update.
    let updates = prefetcher.events(bufferingNewest: .max)
    async let activity = PrefetchMonitor(photoCount: photos.count).follow(updates)
    var pass = try await withThrowingTaskGroup { group in
      group.addTask { try await prefetcher.run() }
      let pass = try await walk(through: cache, following: prefetcher)
      // The user is done: cancelling run() stops the prefetcher once its loads have ended.
      group.cancelAll()
      return pass
    }
    pass.originCalls = library.callCount
    pass.prefetches = await activity
    return pass
  }

  /// A cache in memory only, and new for each pass: both passes start cold, and no disk left
  /// by an earlier run can make a photo look prefetched.
  static func makeCache(origin: PhotoLibrary) throws -> LoadingCache<Int, String> {
    try LoadingCache(layers: [MemoryLayer<Int, String>(configuration: .init(countLimit: 1_000))], origin: origin)
  }

  /// The user's walk: at each photo, the screen shows it at once when memory has it, and
  /// requests it otherwise; the user moves on after `step`, or once the photo shows if it took
  /// longer.
  func walk(
    through cache: LoadingCache<Int, String>,
    following prefetcher: AsyncPrefetcher<Int, String>?
  ) async throws -> Pass {
    let clock = ContinuousClock()
    let start = clock.now
    var pass = Pass()
    for (index, photo) in photos.enumerated() {
      let arrival = clock.now
      if cache.cachedValue(for: photo) != nil {
        // Shown at once: a synchronous hit in memory, without suspending.
        pass.cachedOnArrival += 1
      } else {
        // The urgent request: it joins the photo's prefetch if one is under way (the
        // prefetcher keeps the load of the photo on screen even though, with an offset of 1,
        // it has left the window), and pauses prefetching while the user waits.
        _ = try await cache.value(for: photo)
        let wait = arrival.duration(to: clock.now)
        pass.waited += wait
        pass.longestWait = max(pass.longestWait, wait)
      }
      await prefetcher?.setCurrentIndex(index)
      try await clock.sleep(until: arrival.advanced(by: step))
    }
    pass.elapsed = start.duration(to: clock.now)
    return pass
  }

  func times(_ count: Int) -> String {
    count == 1 ? "once" : "\(count) times"
  }

  func report(_ what: String, _ pass: Pass) {
    let share = Int((Double(pass.cachedOnArrival) / Double(photos.count) * 100).rounded())
    print(
      "  \(what): \(pass.cachedOnArrival) of \(photos.count) photos (\(share)%) were cached on arrival; "
        + "the user waited \(Demo.format(pass.waited)) in all, \(Demo.format(pass.longestWait)) at most: "
        + "\(Demo.format(pass.elapsed)), origin calls: \(pass.originCalls)")
  }
}
