import AsyncCacheTesting
import Synchronization
import TestSupport
import Testing

@testable import AsyncCache

@Suite("FreshnessRules") struct FreshnessRulesTests {
  @Test func anEntryGoesFromFreshToStaleToStaleIfErrorToExpired() {
    // Fresh for 100 s, then served while it is refreshed for 20 s, then kept 50 s for errors.
    let rules = FreshnessRules(staleWhileRevalidate: .seconds(20), staleIfError: .seconds(50), refreshAhead: nil)
    let second: Int64 = 1_000_000_000
    #expect(rules.grace == 50 * second)
    let expiry = rules.expiry(now: CacheInstant(nanosecondsSince1970: 0), lifetime: .seconds(100))
    #expect(expiry.nanosecondsSince1970 == 150 * second)
    let state = { (now: Int64) in rules.state(expiry: expiry.nanosecondsSince1970, now: now, lifetime: { nil }) }
    #expect(state(0) == .fresh)
    #expect(state(100 * second - 1) == .fresh)
    #expect(state(100 * second) == .stale)
    #expect(state(120 * second - 1) == .stale)
    #expect(state(120 * second) == .staleIfError)
    #expect(state(150 * second - 1) == .staleIfError)
    #expect(state(150 * second) == .expired)
    #expect(rules.state(expiry: .max, now: .max - 1, lifetime: { nil }) == .fresh, "never expires, never stale")
  }

  @Test func aRefreshAheadFallsDueAfterItsShareOfTheLifetime() {
    let rules = FreshnessRules(staleWhileRevalidate: .zero, staleIfError: .zero, refreshAhead: 0.75)
    #expect(rules.grace == 0)
    let second: Int64 = 1_000_000_000
    let expiry = rules.expiry(now: CacheInstant(nanosecondsSince1970: 0), lifetime: .seconds(100)).nanosecondsSince1970
    #expect(rules.state(expiry: expiry, now: 75 * second - 1, lifetime: { .seconds(100) }) == .fresh)
    #expect(rules.state(expiry: expiry, now: 75 * second, lifetime: { .seconds(100) }) == .refreshDue)
    #expect(rules.state(expiry: expiry, now: 100 * second, lifetime: { .seconds(100) }) == .expired)
    #expect(rules.state(expiry: expiry, now: 90 * second, lifetime: { nil }) == .fresh, "no lifetime, no refresh ahead")
    #expect(rules.checksHits)
    #expect(!FreshnessRules(staleWhileRevalidate: .zero, staleIfError: .zero, refreshAhead: nil).checksHits)
  }

  @Test(arguments: [Int64(0), 1_767_225_600_000_000_000, 4_000_000_000_000_000_000])
  func aRefreshAheadFallsDueAtExactlyItsShareOfTheLifetime(writtenAt start: Int64) {
    // Nanoseconds since 1970 near 2026 are beyond `Double`'s 2^53: reckoned in `Double`, the
    // point moved by hundreds of nanoseconds.
    let rules = FreshnessRules(staleWhileRevalidate: .seconds(30), staleIfError: .zero, refreshAhead: 0.8)
    let second: Int64 = 1_000_000_000
    let expiry = rules.expiry(now: CacheInstant(nanosecondsSince1970: start), lifetime: .seconds(100))
    let state = { (now: Int64) in
      rules.state(expiry: expiry.nanosecondsSince1970, now: start + now, lifetime: { .seconds(100) })
    }
    #expect(state(80 * second - 100) == .fresh)
    #expect(state(80 * second - 1) == .fresh)
    #expect(state(80 * second) == .refreshDue)
    #expect(state(100 * second - 1) == .refreshDue)
    #expect(state(100 * second) == .stale)
    #expect(rules.lead(lifetime: 100 * second, share: 0.8) == 20 * second)
    #expect(rules.lead(lifetime: 3, share: 0.5) == 1, "rounded to the nearest nanosecond")
    #expect(rules.lead(lifetime: .max, share: 0.8) > 0)
  }

  @Test func withJitterARefreshAheadIsReckonedFromTheShortestLifetime() {
    let rules = FreshnessRules(staleWhileRevalidate: .zero, staleIfError: .zero, refreshAhead: 0.8, jitter: 0.1)
    let second: Int64 = 1_000_000_000
    // The shortest lifetime is 90 s; 20% of it is 18 s.
    #expect(rules.lead(lifetime: 100 * second, share: 0.8) == 18 * second)
    let expiry = rules.expiry(now: CacheInstant(nanosecondsSince1970: 0), lifetime: .seconds(90)).nanosecondsSince1970
    #expect(rules.state(expiry: expiry, now: 72 * second - 1, lifetime: { .seconds(100) }) == .fresh)
    #expect(rules.state(expiry: expiry, now: 72 * second, lifetime: { .seconds(100) }) == .refreshDue)
  }

  @Test func aSlidingExtensionFallsDueAfterHalfTheLifetime() {
    let rules = FreshnessRules(
      staleWhileRevalidate: .seconds(20), staleIfError: .zero, refreshAhead: nil, sliding: true)
    #expect(rules.checksHits)
    let second: Int64 = 1_000_000_000
    // Fresh for 100 s, stale for 20 s more.
    let expiry = rules.expiry(now: CacheInstant(nanosecondsSince1970: 0), lifetime: .seconds(100)).nanosecondsSince1970
    let state = { (now: Int64) in rules.state(expiry: expiry, now: now, lifetime: { .seconds(100) }) }
    #expect(state(50 * second - 1) == .fresh)
    #expect(state(50 * second) == .extendDue)
    #expect(state(100 * second - 1) == .extendDue)
    #expect(state(100 * second) == .stale, "a stale entry is refreshed, not extended")
    #expect(rules.state(expiry: expiry, now: 60 * second, lifetime: { nil }) == .fresh, "no lifetime to extend by")
  }

  /// Every rule a cache may be configured with, and the lifetimes its hits reckon with.
  static let marginCases: [(rules: FreshnessRules, lifetime: Duration?)] = {
    let rules = [
      FreshnessRules(staleWhileRevalidate: .zero, staleIfError: .zero, refreshAhead: nil),
      FreshnessRules(staleWhileRevalidate: .seconds(60), staleIfError: .zero, refreshAhead: nil),
      FreshnessRules(staleWhileRevalidate: .seconds(20), staleIfError: .seconds(50), refreshAhead: nil),
      FreshnessRules(staleWhileRevalidate: .zero, staleIfError: .zero, refreshAhead: 0.8),
      FreshnessRules(staleWhileRevalidate: .seconds(30), staleIfError: .zero, refreshAhead: 0.8, jitter: 0.1),
      FreshnessRules(staleWhileRevalidate: .zero, staleIfError: .zero, refreshAhead: nil, sliding: true),
      FreshnessRules(staleWhileRevalidate: .seconds(5), staleIfError: .zero, refreshAhead: 0.5, sliding: true),
      FreshnessRules(staleWhileRevalidate: .zero, staleIfError: .seconds(Int64.max), refreshAhead: 0.8),
    ]
    return rules.flatMap { rules in
      [Duration.seconds(100), .nanoseconds(3), .seconds(Int64.max), nil].map { (rules, $0) }
    }
  }()

  @Test("the hit path's one comparison says fresh only where the rules do, and up to the instant they stop")
  func aPlainlyFreshHitIsFresh() {
    var random = SplitMix64(seed: 0xF2E5)
    let second: Int64 = 1_000_000_000
    for (rules, lifetime) in Self.marginCases {
      let lead = lifetime.flatMap { lifetime in
        rules.dueShare.map { rules.lead(lifetime: lifetime.saturatingNanoseconds, share: $0) }
      }
      let margin = rules.freshMargin(lead: lead)
      let state = { (expiry: Int64, now: Int64) in rules.state(expiry: expiry, now: now, lead: { _ in lead }) }
      let expiries: [Int64] = [.max, .max - 1, .min, .min + 1, 0, 1, 150 * second, 1_767_225_600 * second]
      var instants: [(expiry: Int64, now: Int64)] = []
      for expiry in expiries {
        instants += [.min, -1, 0, 1, expiry &- 1, expiry, .max].map { (expiry, $0) }
        let (edge, overflow) = expiry.subtractingReportingOverflow(margin)
        if !overflow { instants += [(expiry, edge &- 1), (expiry, edge), (expiry, edge &+ 1)] }
      }
      for _ in 0..<2000 {
        let expiry = Int64.random(in: 0...(200 * second), using: &random)
        instants.append((expiry, Int64.random(in: -second...(expiry + second), using: &random)))
      }
      for (expiry, now) in instants where FreshnessRules.isPlainlyFresh(expiry: expiry, now: now, margin: margin) {
        #expect(state(expiry, now) == .fresh, "\(rules), lifetime \(String(describing: lifetime)): \(expiry) at \(now)")
      }
      // Exact: the instant before the margin is plainly fresh, the margin's own instant is not
      // fresh (something falls due or it is stale).
      guard margin != .max, lifetime != nil || rules.dueShare == nil else { continue }
      let expiry = 1_767_225_600 * second
      #expect(FreshnessRules.isPlainlyFresh(expiry: expiry, now: expiry - margin - 1, margin: margin))
      #expect(!FreshnessRules.isPlainlyFresh(expiry: expiry, now: expiry - margin, margin: margin))
      if margin > 0 {
        #expect(state(expiry, expiry - margin) != .fresh, "\(rules), lifetime \(String(describing: lifetime))")
      }
    }
  }

  @Test("an entry that never expires is plainly fresh under any margin; under Int64.max no other is")
  func anEntryThatNeverExpiresIsPlainlyFresh() {
    for margin in [Int64(0), 30_000_000_000, .max] {
      // The layer reports `now` as `Int64.max` for such an entry: it reads no clock.
      #expect(FreshnessRules.isPlainlyFresh(expiry: .max, now: .max, margin: margin))
      #expect(FreshnessRules.isPlainlyFresh(expiry: .max, now: 0, margin: margin))
    }
    #expect(!FreshnessRules.isPlainlyFresh(expiry: .max - 1, now: .min, margin: .max))
    #expect(!FreshnessRules.isPlainlyFresh(expiry: 0, now: .min, margin: .max))
  }

  @Test("plainly fresh is fresh for any grace, lead and instants, near the margin and at Int64's ends")
  func aPlainlyFreshHitIsFreshForAnyInstants() {
    var random = SplitMix64(seed: 0x5EED)
    func anyInstant() -> Int64 {
      switch Int.random(in: 0..<4, using: &random) {
      case 0: Int64.random(in: .min ... .max, using: &random)
      case 1: Int64.random(in: 0...(1 << 40), using: &random)
      case 2: Int64.max - Int64.random(in: 0...(1 << 40), using: &random)
      default: Int64.min + Int64.random(in: 0...(1 << 40), using: &random)
      }
    }
    var told = 0
    for _ in 0..<100_000 {
      let share: Double? = [nil, 0.5, 0.8, 0.01].randomElement(using: &random)!
      let sliding = share == 0.5 && Bool.random(using: &random)
      let rules = FreshnessRules(
        staleWhileRevalidate: .nanoseconds(Swift.max(anyInstant(), 0)),
        staleIfError: .nanoseconds(Bool.random(using: &random) ? Swift.max(anyInstant(), 0) : 0),
        refreshAhead: sliding ? nil : share, sliding: sliding)
      let lead: Int64? = Bool.random(using: &random) ? nil : Swift.max(anyInstant(), 0)
      let margin = rules.freshMargin(lead: lead)
      let expiry = anyInstant()
      let now =
        Bool.random(using: &random) ? anyInstant() : expiry &- margin &- Int64.random(in: -2...2, using: &random)
      guard FreshnessRules.isPlainlyFresh(expiry: expiry, now: now, margin: margin) else { continue }
      told += 1
      #expect(
        rules.state(expiry: expiry, now: now, lead: { _ in lead }) == .fresh,
        "\(rules), lead \(String(describing: lead)): \(expiry) at \(now)")
    }
    #expect(told > 10_000)
  }

  @Test("an entry whose stale instant falls before Int64.min is stale, not fresh")
  func aStaleInstantBeforeTheFirstInstantIsStale() {
    let second: Int64 = 1_000_000_000
    let rules = FreshnessRules(staleWhileRevalidate: .seconds(70), staleIfError: .seconds(90), refreshAhead: 0.8)
    // Stale at `expiry - 90 s`, 60 s before `Int64.min`; served at once for 70 s.
    let expiry = Int64.min + 30 * second
    #expect(rules.state(expiry: expiry, now: .min, lead: { _ in 0 }) == .stale, "stale for 60 s")
    #expect(rules.state(expiry: expiry, now: .min + 10 * second - 1, lead: { _ in 0 }) == .stale)
    #expect(rules.state(expiry: expiry, now: .min + 10 * second, lead: { _ in 0 }) == .staleIfError, "70 s")
    #expect(rules.state(expiry: expiry, now: expiry, lead: { _ in 0 }) == .expired)
  }

  @Test("a grace of more than 100 years counts as 100 years, so that expiries stay within a clock's instants")
  func aGraceForEverIsAHundredYears() {
    let century = Duration.seconds(100 * 365 * 86_400)
    for forever in [Duration.seconds(Int64.max), .seconds(200 * 365 * 86_400)] {
      let rules = FreshnessRules(staleWhileRevalidate: forever, staleIfError: forever, refreshAhead: nil)
      #expect(rules.grace == century.saturatingNanoseconds)
      let now = CacheInstant(nanosecondsSince1970: 1_767_225_600_000_000_000)
      let expiry = rules.expiry(now: now, lifetime: .seconds(100)).nanosecondsSince1970
      #expect(expiry != .max, "an expiry that saturates reads as never")
      #expect(rules.state(expiry: expiry, now: now.advanced(by: .seconds(100)).nanosecondsSince1970) { nil } == .stale)
    }
  }
}

@Suite(.timeLimit(.minutes(3))) struct LoadingCacheFreshnessTests {
  let clock = ManualClock()
  let memory: MemoryLayer<String, Int>
  let events = LoadEventLines()

  init() throws {
    memory = try MemoryLayer(configuration: .init(clock: clock))
  }

  func cache(
    origin: some AsyncFetcher<String, Int>,
    below: [any AsyncCacheLayer<String, Int>] = [],
    configure: (inout LoadingCache<String, Int>.Configuration) -> Void
  ) throws -> LoadingCache<String, Int> {
    var configuration = LoadingCache<String, Int>.Configuration(clock: clock)
    configure(&configuration)
    let cache = try LoadingCache(layers: [memory] + below, origin: origin, configuration: configuration)
    events.observe(cache)
    return cache
  }

  /// A fetcher that answers `key` with the next number of a counter per key: 1, 2, 3...
  func countingOrigin() -> GatedFetcher<String, Int> {
    let counts = Locked<[String: Int]>([:])
    let origin = GatedFetcher<String, Int> { key in
      counts.withLock {
        $0[key, default: 0] += 1
        return $0[key]!
      }
    }
    return origin
  }

  // MARK: Stale-while-revalidate

  @Test func aStaleEntryIsServedAtOnceAndRefreshedExactlyOnceUnderConcurrentReads() async throws {
    let origin = countingOrigin()
    let cache = try cache(origin: origin) {
      $0.timeToLive = .seconds(60)
      $0.staleWhileRevalidate = .seconds(30)
    }
    let first = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    #expect(try await first.value == 1)
    #expect(memory.entry(for: "k")?.expiresAt == clock.now.advanced(by: .seconds(90)), "lifetime plus grace")

    clock.advance(by: .seconds(60))
    // A thousand concurrent stale reads (RELIABILITY.md, row 5): all served at once, one refresh.
    let values = try await withThrowingTaskGroup(of: Int.self) { group in
      for _ in 0..<1000 { group.addTask { try await cache.value(for: "k") } }
      return try await group.reduce(into: []) { $0.append($1) }
    }
    #expect(values == Array(repeating: 1, count: 1000))
    await origin.waitForFetches(1, for: "k")
    #expect(cache.cachedValue(for: "k") == 1, "still served while the refresh is held")
    #expect(origin.callCount == 2)
    #expect(origin.release("k") == 1)
    await cache.waitUntilIdle()
    #expect(try await cache.value(for: "k") == 2)
    #expect(memory.entry(for: "k")?.expiresAt == clock.now.advanced(by: .seconds(90)))
    #expect(origin.callCount == 2, "exactly one refresh")
    let statistics = cache.statistics
    #expect(statistics.refreshes == 1)
    #expect(statistics.refreshesCoalesced == 1000)  // 999 reads and the cachedValue peek
    #expect(statistics.staleServed == 1001)
    #expect(statistics.loads == 2)
    #expect(statistics.loadsInFlight == 0)
  }

  @Test func aRequestJoinsTheRefreshInFlightWhenTheEntryIsPastStaleWhileRevalidate() async throws {
    let origin = GatedFetcher<String, Int> { _ in 2 }
    try memory.insert(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(100))), for: "k")
    let cache = try cache(origin: origin) {
      $0.timeToLive = .seconds(60)
      $0.staleWhileRevalidate = .seconds(10)
      $0.staleIfError = .seconds(40)
    }
    // Stale at 60 s (100 - 40); served at once until 70 s.
    clock.advance(by: .seconds(65))
    #expect(try await cache.value(for: "k") == 1)
    await origin.waitForFetches(1, for: "k")
    clock.advance(by: .seconds(10))
    // Past stale-while-revalidate: this request waits, and joins the refresh.
    let late = Task { try await cache.value(for: "k") }
    await cache.waitForRequests(1, for: "k")
    #expect(origin.release("k") == 1)
    #expect(try await late.value == 2)
    #expect(origin.callCount == 1)
    #expect(cache.statistics.coalescedRequests == 1)
  }

  @Test func aStaleEntryBelowTheTopLayerIsServedBackfilledAndRefreshed() async throws {
    let origin = GatedFetcher<String, Int> { _ in 2 }
    let disk = FakeLayer<String, Int>(clock: clock)
    let expiry = clock.now.advanced(by: .seconds(30))
    disk.seed(CacheEntry(1, expiresAt: expiry), for: "k")
    let cache = try cache(origin: origin, below: [disk]) {
      $0.timeToLive = .seconds(60)
      $0.staleWhileRevalidate = .seconds(30)
    }
    // Stale from the start: 30 s of grace left.
    #expect(try await cache.value(for: "k") == 1)
    #expect(memory.entry(for: "k") == CacheEntry(1, expiresAt: expiry), "the back-filled copy expires with its source")
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    await cache.waitUntilIdle()
    let fresh = CacheEntry(2, expiresAt: clock.now.advanced(by: .seconds(90)))
    #expect(memory.entry(for: "k") == fresh)
    #expect(disk.storedEntries["k"] == fresh)
    #expect(cache.statistics.staleServed == 1)
    #expect(cache.statistics.refreshes == 1)
  }

  @Test func aRefreshTakesAFreshEntryFromALowerLayerWithoutAskingTheOrigin() async throws {
    let disk = FakeLayer<String, Int>(clock: clock)
    let cache = try cache(origin: UnimplementedFetcher<String, Int>(), below: [disk]) {
      $0.timeToLive = .seconds(60)
      $0.staleWhileRevalidate = .seconds(30)
    }
    try memory.insert(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(10))), for: "k")
    let newer = CacheEntry(7, expiresAt: clock.now.advanced(by: .seconds(500)))
    disk.seed(newer, for: "k")  // another process refreshed the shared layer
    #expect(try await cache.value(for: "k") == 1)
    await cache.waitUntilIdle()
    #expect(memory.entry(for: "k") == newer)
  }

  @Test func aWriteDuringARefreshWins() async throws {
    let origin = GatedFetcher<String, Int> { _ in 2 }
    let cache = try cache(origin: origin) {
      $0.timeToLive = .seconds(60)
      $0.staleWhileRevalidate = .seconds(30)
    }
    try memory.insert(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(10))), for: "k")
    #expect(try await cache.value(for: "k") == 1)
    await origin.waitForFetches(1, for: "k")
    try await cache.insert(5, for: "k")
    #expect(origin.release("k") == 1)
    await cache.waitUntilIdle()
    #expect(try await cache.value(for: "k") == 5)
  }

  @Test func aLoadThatFoundAStaleEntryStartsNoRefreshWhenAWriteOvertookIt() async throws {
    let disk = FakeLayer<String, Int>(clock: clock)
    disk.seed(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(10))), for: "k")
    let cache = try cache(origin: UnimplementedFetcher<String, Int>(), below: [disk]) {
      $0.timeToLive = .seconds(60)
      $0.staleWhileRevalidate = .seconds(30)
    }
    disk.hold(.lookup, phase: .afterApplying)
    let request = Task { try await cache.value(for: "k") }
    await disk.waitForHeld(1, .lookup)
    try await cache.removeValue(for: "k")
    disk.release(.lookup)
    #expect(try await request.value == 1, "the request had asked before the removal")
    await cache.waitUntilIdle()
    #expect(cache.statistics.refreshes == 0, "no one asked for the key since it was removed")
    #expect(cache.statistics.staleServed == 0)
  }

  @Test func aTopMemoryLayerThatKeepsEntriesNoLongerThanTheGraceIsRefused() throws {
    let short = try MemoryLayer<String, Int>(configuration: .init(timeToLive: .seconds(30), clock: clock))
    let error = #expect(throws: AsyncCacheError.self) {
      try LoadingCache(
        layers: [short], origin: UnimplementedFetcher<String, Int>(),
        configuration: .init(timeToLive: .seconds(60), staleIfError: .seconds(30), clock: clock))
    }
    #expect(error?.code == .invalidConfiguration)
    #expect(error?.message.contains("top MemoryLayer's timeToLive") == true)
  }

  @Test("a stale-if-error for ever still lets entries turn stale: past their lifetime they are loaded again")
  func aStaleIfErrorForEverLetsEntriesTurnStale() async throws {
    let calls = Atomic<Int>(0)
    let origin = GatedFetcher<String, Int> { _ in calls.add(1, ordering: .relaxed).newValue }
    origin.open()
    let cache = try LoadingCache(
      layers: [memory], origin: origin,
      configuration: .init(timeToLive: .seconds(100), staleIfError: .seconds(Int64.max), clock: clock))
    #expect(try await cache.value(for: "k") == 1)
    #expect(memory.entry(for: "k")?.expiresAt != nil, "kept for the grace, not for ever")
    clock.advance(by: .seconds(99))
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(by: .seconds(1))
    #expect(try await cache.value(for: "k") == 2, "past its lifetime: loaded again")
  }

  @Test("an entry that turned stale before the clock's first instant is served stale and refreshed")
  func anEntryStaleBeforeTheFirstInstantIsRefreshed() async throws {
    let second: Int64 = 1_000_000_000
    let early = ManualClock(now: CacheInstant(nanosecondsSince1970: .min + second))
    let memory = try MemoryLayer<String, Int>(configuration: .init(clock: early))
    // Written under a shorter grace (another instance's, say): stale 30 s before `Int64.min`
    // by this cache's 60 s.
    try memory.insert(CacheEntry(1, expiresAt: CacheInstant(nanosecondsSince1970: .min + 30 * second)), for: "k")
    let origin = GatedFetcher<String, Int> { _ in 2 }
    origin.open()
    let cache = try LoadingCache(
      layers: [memory], origin: origin,
      configuration: .init(timeToLive: .seconds(100), staleWhileRevalidate: .seconds(60), clock: early))
    #expect(try await cache.value(for: "k") == 1)
    await cache.waitUntilIdle()
    #expect(cache.statistics.staleServed == 1)
    #expect(cache.statistics.refreshes == 1)
    #expect(memory.value(for: "k") == 2)
  }

  @Test("with lifetimes per value, no hit is told fresh by the margin alone")
  func lifetimesPerValueReadTheWholeState() throws {
    let cache = try LoadingCache(
      layers: [memory], origin: UnimplementedFetcher<String, Int>(),
      configuration: .init(refreshAhead: 0.8, timeToLiveForValue: { _, value in .seconds(value) }, clock: clock))
    #expect(cache.freshMargin == .max)
    let fixed = try LoadingCache(
      layers: [memory], origin: UnimplementedFetcher<String, Int>(),
      configuration: .init(
        timeToLive: .seconds(100), staleWhileRevalidate: .seconds(10), refreshAhead: 0.8, clock: clock))
    #expect(fixed.freshMargin == 30 * 1_000_000_000, "a grace of 10 s and a lead of 20 s")
  }

  @Test func aFailedRefreshKeepsServingTheStaleValueAndTheNextReadTriesAgain() async throws {
    let origin = GatedFetcher<String, Int> { _ in 2 }
    let cache = try cache(origin: origin) {
      $0.timeToLive = .seconds(60)
      $0.staleWhileRevalidate = .seconds(30)
    }
    try memory.insert(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(20))), for: "k")
    #expect(try await cache.value(for: "k") == 1)
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", throwing: TestError()) == 1)
    await cache.waitUntilIdle()
    #expect(try await cache.value(for: "k") == 1, "the stale value is still served")
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    await cache.waitUntilIdle()
    #expect(try await cache.value(for: "k") == 2)
    let statistics = cache.statistics
    #expect(statistics.refreshes == 2)
    #expect(statistics.refreshFailures == 1)
    #expect(statistics.loadFailures == 1)
    #expect(statistics.staleServed == 2)
    // The failed refresh kept the stale value, and said why.
    #expect(statistics.staleServedOnError == 1)
    #expect(await events.all == ["failed k 1 TestError(boom)", "served stale k TestError(boom)"])
  }

  // MARK: Stale-if-error

  @Test func aFailedLoadServesTheStaleValueWithinStaleIfErrorAndReportsTheError() async throws {
    let origin = GatedFetcher<String, Int> { _ in 2 }
    let cache = try cache(origin: origin) {
      $0.timeToLive = .seconds(60)
      $0.staleIfError = .seconds(30)
    }
    try memory.insert(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(30))), for: "k")
    // Stale from the start, and no stale-while-revalidate: the request waits for the origin.
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k", throwing: TestError("down")) == 1)
    #expect(try await request.value == 1)
    #expect(await events.all == ["failed k 1 TestError(down)", "served stale k TestError(down)"])
    #expect(cache.statistics.staleServedOnError == 1)
    #expect(cache.statistics.loadFailures == 1)

    // A load that succeeds replaces it.
    let next = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    #expect(try await next.value == 2)
  }

  @Test func pastStaleIfErrorTheErrorReachesTheRequest() async throws {
    let origin = GatedFetcher<String, Int> { _ in 2 }
    let cache = try cache(origin: origin) {
      $0.timeToLive = .seconds(60)
      $0.staleIfError = .seconds(30)
    }
    try memory.insert(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(30))), for: "k")
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    clock.advance(by: .seconds(30))  // the entry expired while the origin was asked
    #expect(origin.release("k", throwing: TestError("down")) == 1)
    await #expect(throws: TestError("down")) { try await request.value }
    #expect(cache.statistics.staleServedOnError == 0)
  }

  @Test(arguments: [false, true])
  func aLayerThatFailsBelowAStaleEntryLeavesItToServe(batchOrigin: Bool) async throws {
    let broken = FakeLayer<String, Int>()
    broken.fail(.lookup, with: TestError("disk"))
    let chain = try CacheChain<String, Int>([.init(memory), .init(broken, failurePolicy: .propagate)])
    let configuration = LoadingCache<String, Int>.Configuration(
      timeToLive: .seconds(60), staleIfError: .seconds(30), clock: clock)
    let cache = try LoadingCache(
      chain: chain, origin: UnimplementedFetcher<String, Int>(),
      batchOrigin: batchOrigin ? ClosureBatchFetcher { _ in throw TestError("no origin call") } : nil,
      configuration: configuration)
    events.observe(cache)
    try memory.insert(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(30))), for: "k")
    try memory.insert(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(30))), for: "b")
    // Stale from the start: the loads look below, where the layer's failure is thrown.
    #expect(try await cache.value(for: "k") == 1)
    let result = await cache.values(for: ["b"])
    #expect(result.values == ["b": 1])
    #expect(result.failures.isEmpty)
    #expect(cache.statistics.staleServedOnError == 2)
    #expect(cache.statistics.loadFailures == 2)
    let served = await events.all.filter { $0.hasPrefix("served stale") }
    #expect(served.count == 2)
    #expect(served.allSatisfy { $0.contains("layerFailure") && $0.contains("TestError(disk)") })
    // With no stale entry above it, the layer's failure reaches the request.
    await #expect {
      try await cache.value(for: "none")
    } throws: {
      ($0 as? AsyncCacheError)?.code == .layerFailure
    }
  }

  @Test func aBulkRequestServesStaleValuesAndFallsBackOnErrors() async throws {
    let origin = GatedFetcher<String, Int> { _ in 2 }
    let cache = try cache(origin: origin) {
      $0.timeToLive = .seconds(60)
      $0.staleWhileRevalidate = .seconds(10)
      $0.staleIfError = .seconds(30)
    }
    try memory.insert(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(30))), for: "swr")
    try memory.insert(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(15))), for: "sie")
    let request = Task { await cache.values(for: ["swr", "sie"]) }
    await origin.waitForFetches(1, for: "sie")
    #expect(origin.release("sie", throwing: TestError()) == 1)
    let result = await request.value
    #expect(result.values == ["swr": 1, "sie": 1])
    #expect(result.failures.isEmpty)
    await origin.waitForFetches(1, for: "swr")
    #expect(origin.release("swr") == 1)
    await cache.waitUntilIdle()
    #expect(cache.cachedValue(for: "swr") == 2)
  }

  // MARK: Refresh ahead

  @Test func anEntryReadLateInItsLifetimeIsRefreshedBeforeItExpires() async throws {
    let origin = countingOrigin()
    let cache = try cache(origin: origin) {
      $0.timeToLive = .seconds(100)
      $0.refreshAhead = 0.8
    }
    origin.open()
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(by: .seconds(79))
    #expect(try await cache.value(for: "k") == 1)
    #expect(cache.statistics.refreshes == 0)
    clock.advance(by: .seconds(1))
    #expect(try await cache.value(for: "k") == 1, "still fresh: served, and refreshed")
    await cache.waitUntilIdle()
    #expect(cache.statistics.refreshes == 1)
    #expect(cache.statistics.staleServed == 0)
    #expect(memory.entry(for: "k") == CacheEntry(2, expiresAt: clock.now.advanced(by: .seconds(100))))
  }

  @Test func aRefreshAheadStartsAtExactlyEightyPercentOfTheLifetimeNotBefore() async throws {
    let origin = countingOrigin()
    let cache = try cache(origin: origin) {
      $0.timeToLive = .seconds(100)
      $0.refreshAhead = 0.8
    }
    origin.open()
    let start = clock.now
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(to: start.advanced(by: .seconds(80) - .nanoseconds(100)))
    #expect(try await cache.value(for: "k") == 1)
    clock.advance(to: start.advanced(by: .seconds(80) - .nanoseconds(1)))
    #expect(try await cache.value(for: "k") == 1)
    #expect(cache.cachedValue(for: "k") == 1)
    #expect(cache.statistics.refreshes == 0, "1 ns before the 80% point: no refresh")
    clock.advance(to: start.advanced(by: .seconds(80)))
    #expect(try await cache.value(for: "k") == 1)
    #expect(cache.statistics.refreshes == 1, "at the 80% point: a refresh")
    await cache.waitUntilIdle()
    #expect(cache.cachedValue(for: "k") == 2)
  }

  // MARK: Lifetimes

  // MARK: Sliding expiry

  @Test func slidingExpiryKeepsEntriesReadOftenAndLetsIdleOnesExpire() async throws {
    let origin = countingOrigin()
    let disk = FakeLayer<String, Int>(clock: clock)
    let cache = try cache(origin: origin, below: [disk]) {
      $0.timeToLive = .seconds(10)
      $0.slidingExpiration = true
    }
    let start = clock.now
    let first = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    #expect(try await first.value == 1)
    #expect(memory.entry(for: "k")?.expiresAt == start.advanced(by: .seconds(10)))

    // More than half the lifetime left: nothing moves.
    clock.advance(by: .seconds(4))
    #expect(try await cache.value(for: "k") == 1)
    #expect(memory.entry(for: "k")?.expiresAt == start.advanced(by: .seconds(10)))

    // Half of it gone: a full lifetime from now, in the top layer at once, below in the background.
    clock.advance(by: .seconds(1))
    #expect(try await cache.value(for: "k") == 1)
    #expect(memory.entry(for: "k")?.expiresAt == start.advanced(by: .seconds(15)))
    await cache.chain.waitForBackfills()
    #expect(disk.storedEntries["k"]?.expiresAt == start.advanced(by: .seconds(15)))
    #expect(disk.storedEntries["k"]?.value == 1)

    // Read once per half lifetime, it never expires.
    for _ in 0..<5 {
      clock.advance(by: .seconds(5))
      #expect(try await cache.value(for: "k") == 1)
      // Each extension's write below is a copy: one that starts while another is still being
      // written is refused (the extension after that makes up for it).
      await cache.chain.waitForBackfills()
    }
    #expect(memory.entry(for: "k")?.expiresAt == start.advanced(by: .seconds(40)))
    await cache.chain.waitForBackfills()
    #expect(disk.storedEntries["k"]?.expiresAt == start.advanced(by: .seconds(40)))

    // Idle for a full lifetime, it expires everywhere: the next read loads.
    clock.advance(by: .seconds(10))
    let reload = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    #expect(try await reload.value == 2)
    #expect(origin.callCount == 2)
    #expect(cache.statistics.loads == 2)
  }

  @Test func aLoadThatFindsAnEntryDueForExtensionBelowExtendsItInEveryLayer() async throws {
    let disk = FakeLayer<String, Int>(clock: clock)
    disk.seed(CacheEntry(7, expiresAt: clock.now.advanced(by: .seconds(4))), for: "k")
    let cache = try cache(origin: UnimplementedFetcher<String, Int>(), below: [disk]) {
      $0.timeToLive = .seconds(10)
      $0.slidingExpiration = true
    }
    #expect(try await cache.value(for: "k") == 7)
    let extended = CacheEntry(7, expiresAt: clock.now.advanced(by: .seconds(10)))
    #expect(memory.entry(for: "k") == extended)
    #expect(disk.storedEntries["k"] == extended)
  }

  @Test func extensionsKeepTheEntrysMetadataInEveryLayer() async throws {
    let metadata = EntryMetadata(entityTag: #""v1""#, tags: ["t"])
    let disk = FakeLayer<String, Int>(clock: clock)
    disk.seed(CacheEntry(7, expiresAt: clock.now.advanced(by: .seconds(4)), metadata: metadata), for: "k")
    let cache = try cache(origin: UnimplementedFetcher<String, Int>(), below: [disk]) {
      $0.timeToLive = .seconds(10)
      $0.slidingExpiration = true
    }
    // A load that finds the entry due below extends it everywhere, metadata kept.
    #expect(try await cache.value(for: "k") == 7)
    #expect(memory.entry(for: "k")?.metadata == metadata)
    #expect(disk.storedEntries["k"]?.metadata == metadata)
    // A hit that extends the top entry copies it below in the background, metadata kept.
    clock.advance(by: .seconds(6))
    #expect(try await cache.value(for: "k") == 7)
    await cache.chain.coordinator.waitUntil { $0.isIdle }
    let extended = CacheEntry(7, expiresAt: clock.now.advanced(by: .seconds(10)), metadata: metadata)
    #expect(memory.entry(for: "k") == extended)
    #expect(disk.storedEntries["k"] == extended)
  }

  @Test func anExtensionCopiesWhatTheTopLayerHoldsNeverTheValueReadWithAnotherVersionsMetadata() async throws {
    let disk = FakeLayer<String, Int>(clock: clock)
    let cache = try cache(origin: UnimplementedFetcher<String, Int>(), below: [disk]) {
      $0.timeToLive = .seconds(10)
      $0.slidingExpiration = true
    }
    let expiry = clock.now.advanced(by: .seconds(4))
    let (old, new) = (EntryMetadata(entityTag: #""v1""#), EntryMetadata(entityTag: #""v2""#))
    try await cache.chain.insert(CacheEntry(1, expiresAt: expiry, metadata: old), for: "k")
    // A hit saw (1, expiry); before it extends, a write of version 2 with the same absolute
    // expiry (an origin's Expires, say) ends.
    try await cache.chain.insert(CacheEntry(2, expiresAt: expiry, metadata: new), for: "k")
    cache.extend("k", value: 1, expiry: expiry.nanosecondsSince1970)
    await cache.chain.coordinator.waitUntil { $0.isIdle }
    await cache.chain.waitForBackfills()
    let below = try #require(disk.storedEntries["k"])
    #expect(below.value == 2 && below.metadata == new, "disk holds \(below.value) with \(below.metadata)")
  }

  @Test func anExtensionLosesToAWriteAndNeverOutlivesTheTopLayersOwnLimit() async throws {
    let capped = try MemoryLayer<String, Int>(configuration: .init(timeToLive: .seconds(6), clock: clock))
    let cache = try LoadingCache(
      layers: [capped], origin: UnimplementedFetcher<String, Int>(),
      configuration: .init(timeToLive: .seconds(10), slidingExpiration: true, clock: clock))
    try await cache.insert(1, for: "k")
    let written = try #require(capped.entry(for: "k")?.expiresAt)
    #expect(written == clock.now.advanced(by: .seconds(6)), "the layer's own limit")
    // A write replaced the entry the read saw: that read's extension does nothing.
    try await cache.insert(2, for: "k")
    #expect(capped.store.extendExpiry(of: "k", from: written.nanosecondsSince1970 - 1, to: .max) == nil)
    #expect(capped.entry(for: "k")?.expiresAt == written)
    // Due at once (4 s left of a 10 s lifetime), but the layer keeps entries 6 s: an extension
    // needs to gain half a lifetime, so reads extend it once per 5 s, not on every hit.
    let start = clock.now
    clock.advance(by: .seconds(4))
    #expect(try await cache.value(for: "k") == 2)
    #expect(capped.entry(for: "k")?.expiresAt == start.advanced(by: .seconds(6)), "a 4 s gain is not enough")
    clock.advance(by: .seconds(1))
    #expect(try await cache.value(for: "k") == 2)
    #expect(capped.entry(for: "k")?.expiresAt == start.advanced(by: .seconds(11)), "5 s from now plus 6, capped")
    clock.advance(by: .seconds(1))
    #expect(try await cache.value(for: "k") == 2)
    #expect(capped.entry(for: "k")?.expiresAt == start.advanced(by: .seconds(11)))
  }

  @Test func anExtensionStillWritingBelowNeverOvertakesALoadThatStartedAfterIt() async throws {
    let disk = FakeLayer<String, Int>(clock: clock)
    let origin = countingOrigin()
    let cache = try cache(origin: origin, below: [disk]) {
      $0.timeToLive = .seconds(10)
      $0.slidingExpiration = true
    }
    try await cache.insert(0, for: "k")
    // Read with 4 s left: the top entry is extended at once, the disk's in the background, held.
    disk.hold(.insert)
    clock.advance(by: .seconds(6))
    #expect(try await cache.value(for: "k") == 0)
    await disk.waitForHeld(1, .insert)
    // The top layer loses the entry (an eviction) and the disk's copy expires: the next request
    // loads from the origin while the extension still writes.
    memory.removeValue(for: "k")
    clock.advance(by: .seconds(5))
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    // The load either waits behind the extension to store its value, or gave up storing it.
    let coordinator = cache.chain.coordinator
    await coordinator.waitUntil { $0.queuedWriterCount(for: "k") == 1 || $0.readerCount(for: "k") < 2 }
    disk.release(.insert)
    #expect(try await request.value == 1)
    #expect(memory.entry(for: "k")?.value == 1, "the loaded value is stored on top")
    await coordinator.waitUntil { $0.isIdle }
    #expect(disk.storedEntries["k"]?.value == 1, "and below, after the extension's older copy")
    #expect(try await cache.value(for: "k") == 1)
    #expect(origin.callCount == 1)
  }

  @Test func aBackFillReadBeforeAnExtensionDoesNotWindItsExpiryBack() async throws {
    let disk = FakeLayer<String, Int>(clock: clock)
    let cache = try cache(origin: UnimplementedFetcher<String, Int>(), below: [disk]) {
      $0.timeToLive = .seconds(10)
      $0.slidingExpiration = true
    }
    let start = clock.now
    try await cache.insert(0, for: "k")
    memory.removeValue(for: "k")
    clock.advance(by: .seconds(6))
    // A load and a plain chain read both read the disk's entry, due for extension.
    disk.hold(.lookup, phase: .afterApplying)
    let load = Task { try await cache.value(for: "k") }
    await disk.waitForHeld(1, .lookup)
    let read = Task { try await cache.chain.entry(for: "k") }
    await disk.waitForHeld(2, .lookup)
    disk.releaseOne(.lookup)
    #expect(try await load.value == 0)
    #expect(memory.entry(for: "k")?.expiresAt == start.advanced(by: .seconds(16)))
    #expect(disk.storedEntries["k"]?.expiresAt == start.advanced(by: .seconds(16)))
    // The read found the entry from before the extension: it answers with it, but its copy is
    // older than the extension and must not replace it.
    disk.release(.lookup)
    #expect(try await read.value?.expiresAt == start.advanced(by: .seconds(10)))
    #expect(
      memory.entry(for: "k")?.expiresAt == start.advanced(by: .seconds(16)), "an older copy overwrote the extension")
    #expect(cache.chain.coordinator.isIdle)
  }

  @Test func slidingExpiryNeedsALifetimeAndExcludesRefreshAhead() throws {
    let withoutLifetime = #expect(throws: AsyncCacheError.self) {
      try cache(origin: UnimplementedFetcher<String, Int>()) { $0.slidingExpiration = true }
    }
    #expect(withoutLifetime?.message.contains("slidingExpiration needs a timeToLive") == true)
    let withRefreshAhead = #expect(throws: AsyncCacheError.self) {
      try cache(origin: UnimplementedFetcher<String, Int>()) {
        $0.timeToLive = .seconds(10)
        $0.slidingExpiration = true
        $0.refreshAhead = 0.8
      }
    }
    #expect(withRefreshAhead?.message.contains("slidingExpiration and refreshAhead cannot be combined") == true)
  }

  @Test func perEntryLifetimesAndJitterSetTheExpiry() async throws {
    let units = Locked([0.0, 0.5, 0.25])
    let cache = try cache(origin: ClosureFetcher { Int($0)! }) {
      $0.timeToLive = .seconds(600)
      $0.timeToLiveForValue = { _, value in value >= 100 ? .seconds(10) : value == 0 ? nil : .seconds(100) }
      $0.timeToLiveJitter = 0.25
      $0.staleWhileRevalidate = .seconds(5)
      $0.randomUnit = { units.withLock { $0.removeFirst() } }
    }
    #expect(try await cache.value(for: "1") == 1)
    #expect(try await cache.value(for: "100") == 100)
    #expect(try await cache.value(for: "0") == 0)
    #expect(try await cache.value(for: "2") == 2)
    // 100 s with no jitter, 10 s less 12.5%, never, 100 s less 6.25%; then 5 s of grace.
    #expect(memory.entry(for: "1")?.expiresAt == clock.now.advanced(by: .seconds(105)))
    #expect(memory.entry(for: "100")?.expiresAt == clock.now.advanced(by: .milliseconds(13_750)))
    #expect(memory.entry(for: "0")?.expiresAt == nil)
    #expect(memory.entry(for: "2")?.expiresAt == clock.now.advanced(by: .milliseconds(98_750)))
    // An insert uses its own time-to-live, or the configured one, without jitter.
    try await cache.insert(7, for: "i")
    #expect(memory.entry(for: "i")?.expiresAt == clock.now.advanced(by: .seconds(605)))
  }

  @Test func aPrefetchOfAServableTopValueStartsNoRefresh() async throws {
    let origin = countingOrigin()
    let cache = try cache(origin: origin) {
      $0.timeToLive = .seconds(100)
      $0.staleWhileRevalidate = .seconds(50)
      $0.refreshAhead = 0.5
      $0.staleIfError = .seconds(100)
    }
    // Stored expiries include the 100 s of the longer stale window: fresh for 40 s more (60% of its
    // lifetime gone), stale for 10 s, and past stale-while-revalidate for 10 s.
    try memory.insert(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(140))), for: "due")
    try memory.insert(CacheEntry(1, expiresAt: clock.now.advanced(by: .seconds(90))), for: "stale")
    try memory.insert(CacheEntry(99, expiresAt: clock.now.advanced(by: .seconds(40))), for: "ifError")
    for key in ["due", "stale"] {
      let outcome = await cache.prefetch(key, ticket: cache.makePrefetchTicket(), skipsTopLayer: false)
      guard case .skipped = outcome else {
        Issue.record("a prefetch of \(key) skips it, not \(outcome)")
        continue
      }
    }
    // A refresh would have been registered before `prefetch` returned.
    #expect(cache.statistics.loadsInFlight == 0, "no refresh outside the prefetcher's limit")
    #expect(cache.statistics.refreshes == 0)
    #expect(origin.callCount == 0)
    // An entry only good for stale-if-error is not served at once: the prefetch loads it.
    let prefetch = Task { await cache.prefetch("ifError", ticket: cache.makePrefetchTicket(), skipsTopLayer: false) }
    await origin.waitForFetches(1, for: "ifError")
    #expect(origin.release("ifError") == 1)
    guard case .loaded = await prefetch.value else {
      Issue.record("the prefetch of an entry past stale-while-revalidate loads it")
      return
    }
    #expect(memory.value(for: "ifError") == 1)
  }

  @Test func aThousandRequestsAtTheExpiryInstantCauseOneLoad() async throws {
    let origin = countingOrigin()
    let cache = try cache(origin: origin) { $0.timeToLive = .seconds(60) }
    let first = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    #expect(try await first.value == 1)
    clock.advance(by: .seconds(60))
    // RELIABILITY.md, row 5.
    let requests = (0..<1000).map { _ in Task { try await cache.value(for: "k") } }
    await cache.waitForRequests(1000, for: "k")
    await origin.waitForFetches(1, for: "k")
    #expect(origin.release("k") == 1)
    for request in requests { #expect(try await request.value == 2) }
    #expect(origin.callCount == 2)
    #expect(cache.statistics.coalescedRequests == 999)
  }

  // MARK: Negative caching

  @Test func notFoundIsRememberedForItsOwnTimeToLive() async throws {
    let present = Locked(false)
    let origin = GatedFetcher<String, Int> { key in
      guard present.withLock({ $0 }) else { throw AsyncCacheError(code: .notFound, message: "no \(key)") }
      return 1
    }
    origin.open()
    let cache = try cache(origin: origin) {
      $0.timeToLive = .seconds(600)
      $0.negativeCaching = .notFound(timeToLive: .seconds(10))
    }
    await #expect(throws: AsyncCacheError.self) { try await cache.value(for: "k") }
    present.withLock { $0 = true }
    clock.advance(by: .seconds(9))
    let error = await #expect(throws: AsyncCacheError.self) { try await cache.value(for: "k") }
    #expect(error?.code == .notFound)
    #expect(origin.callCount == 1, "the remembered error is thrown without asking the origin")
    #expect(cache.statistics.negativeHits == 1)
    #expect(cache.statistics.negativeEntries == 1)
    let bulk = await cache.values(for: ["k"])
    #expect(bulk.failures["k"] != nil)
    let prefetch = await cache.prefetch("k", ticket: cache.makePrefetchTicket(), skipsTopLayer: false)
    guard case .failed = prefetch else {
      Issue.record("a prefetch of a remembered key fails without a load, not \(prefetch)")
      return
    }
    #expect(origin.callCount == 1)
    #expect(cache.statistics.negativeHits == 3)
    clock.advance(by: .seconds(1))
    #expect(try await cache.value(for: "k") == 1, "the negative time-to-live is its own")
    #expect(origin.callCount == 2)
    #expect(memory.entry(for: "k")?.expiresAt == clock.now.advanced(by: .seconds(600)))
  }

  @Test func otherErrorsAreNotRememberedAndWritesForgetTheError() async throws {
    let origin = GatedFetcher<String, Int> { key in
      if key == "missing" { throw AsyncCacheError(code: .notFound, message: "no \(key)") }
      throw TestError()
    }
    origin.open()
    let cache = try cache(origin: origin) { $0.negativeCaching = .notFound(timeToLive: .seconds(10)) }
    await #expect(throws: TestError.self) { try await cache.value(for: "flaky") }
    await #expect(throws: TestError.self) { try await cache.value(for: "flaky") }
    #expect(origin.callCount(for: "flaky") == 2)
    await #expect(throws: AsyncCacheError.self) { try await cache.value(for: "missing") }
    try await cache.insert(3, for: "missing")
    #expect(try await cache.value(for: "missing") == 3)
    try await cache.removeValue(for: "missing")
    await #expect(throws: AsyncCacheError.self) { try await cache.value(for: "missing") }
    #expect(origin.callCount(for: "missing") == 2, "the write forgot the error")
    try await cache.removeAll()
    #expect(cache.statistics.negativeEntries == 0)
  }

  @Test func theOldestRememberedErrorsGoFirst() async throws {
    let origin = GatedFetcher<String, Int> { key in throw AsyncCacheError(code: .notFound, message: key) }
    origin.open()
    let cache = try cache(origin: origin) { $0.negativeCaching = .notFound(timeToLive: .seconds(10), countLimit: 2) }
    for key in ["a", "b", "c", "a"] {
      await #expect(throws: AsyncCacheError.self) { try await cache.value(for: key) }
    }
    // "a" was forgotten when "c" came, and asked again; "b" then went.
    #expect(origin.calls == ["a", "b", "c", "a"])
    await #expect(throws: AsyncCacheError.self) { try await cache.value(for: "c") }
    await #expect(throws: AsyncCacheError.self) { try await cache.value(for: "b") }
    #expect(origin.calls == ["a", "b", "c", "a", "b"])
    #expect(cache.statistics.negativeEntries == 2)
  }

  @Test func theRememberedErrorsStayTheNewestAcrossCompactions() {
    var negatives = NegativeEntries<Int>()
    for key in 0..<500 {
      negatives.remember(TestError("\(key)"), for: key % 7 == 0 ? 0 : key, expiry: 1_000, limit: 5)
      if key % 11 == 0 { negatives.forget(key - 1) }
    }
    // The last five keys remembered, 0 among them (remembered again at 497).
    let kept = (0..<500).filter { negatives.error(for: $0, now: 0) != nil }
    #expect(kept == [0, 495, 496, 498, 499])
    #expect(negatives.count == 5)
    #expect(negatives.error(for: 499, now: 1_000) == nil, "expired at its instant")
    #expect(negatives.count == 4)
  }

  @Test func anErrorOfALoadOvertakenByAWriteIsNotRemembered() async throws {
    let origin = GatedFetcher<String, Int> { _ in 1 }
    let cache = try cache(origin: origin) { $0.negativeCaching = .notFound(timeToLive: .seconds(10)) }
    let request = Task { try await cache.value(for: "k") }
    await origin.waitForFetches(1, for: "k")
    try await cache.removeValue(for: "k")
    #expect(origin.release("k", throwing: AsyncCacheError(code: .notFound, message: "gone")) == 1)
    await #expect(throws: AsyncCacheError.self) { try await request.value }
    #expect(cache.statistics.negativeEntries == 0)
  }

  // MARK: Configuration

  @Test(
    arguments: [
      ("timeToLive", { @Sendable (c: inout LoadingCache<String, Int>.Configuration) in c.timeToLive = .zero }),
      ("staleWhileRevalidate", { $0.staleWhileRevalidate = .seconds(-1) }),
      ("staleIfError", { $0.staleIfError = .seconds(-1) }),
      ("refreshAhead", { $0.refreshAhead = 1 }),
      ("timeToLiveJitter", { $0.timeToLiveJitter = 1 }),
      ("negativeCaching.timeToLive", { $0.negativeCaching = .notFound(timeToLive: .zero) }),
      ("negativeCaching.countLimit", { $0.negativeCaching = .notFound(timeToLive: .seconds(1), countLimit: 0) }),
    ] as [(String, @Sendable (inout LoadingCache<String, Int>.Configuration) -> Void)])
  func valuesOutOfRangeAreRefusedByName(
    name: String, configure: @Sendable (inout LoadingCache<String, Int>.Configuration) -> Void
  ) throws {
    let error = #expect(throws: AsyncCacheError.self) {
      try cache(origin: UnimplementedFetcher<String, Int>(), configure: configure)
    }
    #expect(error?.code == .invalidConfiguration)
    #expect(error?.message.contains("LoadingCache \(name) is") == true)
  }
}

/// Observes the caches a test creates: their retries, failures and stale values served after
/// failures, as lines.
final class LoadEventLines: Sendable {
  private let sequences = Locked<[CacheEvents<String>]>([])

  func observe(_ cache: LoadingCache<String, Int>) { sequences.withLock { $0.append(cache.events()) } }

  /// Ends the observation; what it saw, cache by cache.
  var all: [String] {
    get async {
      var lines: [String] = []
      for events in sequences.withLock({ $0 }) {
        for event in await events.drained() {
          switch event {
          case .retrying(let key, let attempt, _, _): lines.append("retrying \(key) \(attempt)")
          case .loadFailed(let key, let error, let attempts, _): lines.append("failed \(key) \(attempts) \(error)")
          case .servedStale(let key, let error): lines.append("served stale \(key) \(error)")
          default: break
          }
        }
      }
      return lines
    }
  }
}
