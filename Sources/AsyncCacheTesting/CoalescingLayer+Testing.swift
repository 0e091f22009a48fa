public import AsyncCache

extension CoalescingLayer {
  /// Returns once at least `count` requests wait for the lookup of `key` in flight, or once the
  /// calling task is cancelled.
  ///
  /// Await it to know that concurrent requests share a lookup before the test cancels one of
  /// them or lets the lookup finish, instead of yielding in a loop.
  ///
  /// ```swift
  /// let shared = fake.coalescingLookups()
  /// fake.hold(.lookup)
  /// let first = Task { try await shared.entry(for: "a") }
  /// let second = Task { try await shared.entry(for: "a") }
  /// await shared.waitForLookups(2, for: "a")   // both share one lookup
  /// first.cancel()                             // the lookup goes on for `second`
  /// ```
  public nonisolated func waitForLookups(_ count: Int, for key: Key) async {
    await waitForWaiters(count, for: key)
  }
}
