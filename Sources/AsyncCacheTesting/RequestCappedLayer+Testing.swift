public import AsyncCache

extension RequestCappedLayer {
  /// Returns once at least `count` requests wait for a slot, or once the calling task is
  /// cancelled.
  ///
  /// Await it to know that a request has queued before the test cancels it or frees a slot,
  /// instead of yielding in a loop.
  ///
  /// ```swift
  /// let capped = try fake.cappingRequests(at: 1)
  /// fake.hold(.lookup)
  /// let first = Task { try await capped.entry(for: "a") }
  /// await fake.waitForHeld(1, .lookup)          // `first` holds the slot
  /// let second = Task { try await capped.entry(for: "b") }
  /// await capped.waitForWaitingRequests(1)     // `second` queues
  /// second.cancel()                            // and leaves at once
  /// ```
  public nonisolated func waitForWaitingRequests(_ count: Int) async {
    await waitForWaiting(count)
  }
}
