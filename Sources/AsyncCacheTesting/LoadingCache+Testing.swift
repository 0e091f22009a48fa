public import AsyncCache

extension LoadingCache {
  /// Returns once at least `count` requests wait for a load of `key`, or when the calling task
  /// is cancelled (a test's time limit ends a wait for something that never happens).
  ///
  /// Await it to know that concurrent requests have joined a load before the test cancels one
  /// of them or releases the origin, instead of yielding in a loop. Requests served by a layer
  /// never wait, so they are not counted.
  ///
  /// ```swift
  /// let first = Task { try await cache.value(for: 1) }
  /// let second = Task { try await cache.value(for: 1) }
  /// await cache.waitForRequests(2, for: 1)     // both joined the one load
  /// first.cancel()                             // the load goes on for `second`
  /// ```
  public func waitForRequests(_ count: Int, for key: Key) async {
    await waitForWaiters(count, for: key)
  }

  /// Returns once at least `count` background loads wait for urgent work to end before they ask
  /// the origin (prefetches, or demoted requests, held at the gate; see `LoadingCache`), or when
  /// the calling task is cancelled.
  ///
  /// ```swift
  /// photos.demote("far away")                  // its next attempt is background work
  /// let onScreen = Task { try await photos.value(for: "here") }
  /// await origin.waitForFetches(1, for: "here")
  /// clock.advance(by: .milliseconds(100))      // "far away"'s retry is due
  /// await photos.waitForLoadsWaitingForUrgentWork(1)
  /// #expect(origin.callCount(for: "far away") == 1)
  /// ```
  public func waitForLoadsWaitingForUrgentWork(_ count: Int) async {
    await waitForGate(count)
  }

  /// Returns once no load is in flight, background refreshes of stale entries included, or when
  /// the calling task is cancelled.
  ///
  /// Await it after releasing a refresh's fetch, before checking what the refresh stored:
  ///
  /// ```swift
  /// clock.advance(by: .seconds(61))            // the entry is stale
  /// #expect(try await cache.value(for: 1) == old)   // served at once; one refresh starts
  /// await origin.waitForFetches(1, for: 1)
  /// origin.release(1, returning: new)
  /// await cache.waitUntilIdle()
  /// #expect(try await cache.value(for: 1) == new)
  /// ```
  public func waitUntilIdle() async {
    await waitForNoLoads()
  }
}
