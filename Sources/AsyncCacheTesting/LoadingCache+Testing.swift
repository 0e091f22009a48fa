public import AsyncCache

extension LoadingCache {
  /// Returns once at least `count` requests wait for a load of `key`.
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
}
