import AsyncCache
import AsyncCacheTesting
import TestSupport
import Testing

/// A coordinator that grants every claim, holds the claims of some keys until the test lets them
/// through, answers `claimUnlessHeld` with `nil` for the keys another process holds, and counts
/// the claims open at once per key.
final class GatedCoordinator: LoadCoordinator, Sendable {
  typealias Key = String
  typealias Value = String
  struct State {
    var gates: [String: [UInt64: UnsafeContinuation<Void, Never>]] = [:]
    var nextWaiter: UInt64 = 0
    var open: Set<String> = []
    var completions: [(key: String, error: (any Error)?)] = []
    var claimsWaiting = 0
    var openGrants: [String: Int] = [:]
    var mostOpenGrants: [String: Int] = [:]
  }
  let gated: Set<String>
  let heldElsewhere: Set<String>
  let state = Locked(State())
  init(gated: Set<String> = [], heldElsewhere: Set<String> = []) {
    self.gated = gated
    self.heldElsewhere = heldElsewhere
  }
  var completions: [(key: String, error: (any Error)?)] { state.withLock { $0.completions } }
  var claimsWaiting: Int { state.withLock { $0.claimsWaiting } }
  func openGate(_ key: String) {
    let waiting = state.withLock { s in
      s.open.insert(key)
      defer { s.gates[key] = [:] }
      return Array((s.gates[key] ?? [:]).values)
    }
    for c in waiting { c.resume() }
  }
  /// Waits until `key`'s gate opens, or the task is cancelled (a claim honours cancellation, as
  /// the protocol asks).
  private func pass(_ key: String) async {
    guard gated.contains(key) else { return }
    let id = state.withLock { s in
      s.nextWaiter += 1
      return s.nextWaiter
    }
    await waitForWatcher { continuation in
      state.withLock { s in
        if s.open.contains(key) { return false }
        s.gates[key, default: [:]][id] = continuation
        return true
      }
    } unregister: {
      self.state.withLock { $0.gates[key]?.removeValue(forKey: id) }
    }
  }
  func claim(_ key: String, supersedes: CacheInstant?) async throws -> LoadClaim<String> {
    state.withLock { $0.claimsWaiting += 1 }
    defer { state.withLock { $0.claimsWaiting -= 1 } }
    await pass(key)
    try Task.checkCancellation()
    grant(key)
    return .granted(token: 1)
  }
  private func grant(_ key: String) {
    state.withLock { s in
      s.openGrants[key, default: 0] += 1
      s.mostOpenGrants[key] = max(s.mostOpenGrants[key] ?? 0, s.openGrants[key]!)
    }
  }
  var mostOpenGrants: [String: Int] { state.withLock { $0.mostOpenGrants } }
  func claimUnlessHeld(_ key: String, supersedes: CacheInstant?) async throws -> LoadClaim<String>? {
    if heldElsewhere.contains(key) { return nil }
    await pass(key)
    grant(key)
    return .granted(token: 1)
  }
  func complete(_ key: String, token: UInt64, with result: Result<CacheEntry<String>, any Error>) async
    -> LeaseCompletion
  {
    let error: (any Error)? = if case .failure(let e) = result { e } else { nil }
    state.withLock {
      $0.completions.append((key, error))
      $0.openGrants[key, default: 0] -= 1
    }
    return .stored
  }
}

@Suite("A bulk request's keys that lose their requests, over a layer that coordinates loads", .timeLimit(.minutes(3)))
struct LoadCoordinatorBatchAbandonmentTests {
  /// memory (top) → a layer coordinated by `coordinator`, with a batch origin; single requests
  /// use an origin of their own.
  private func makeCache(
    _ coordinator: GatedCoordinator
  ) throws -> (LoadingCache<String, String>, GatedBatchOrigin<String, String>) {
    let origin = GatedBatchOrigin<String, String> { _, key in "origin \(key)" }
    let cache = try LoadingCache(
      layers: [try MemoryLayer<String, String>(), CoordinatedLayer(coordinator)],
      origin: ClosureFetcher { key in "single \(key)" }, batchOrigin: origin.fetcher())
    return (cache, origin)
  }

  private func waitUntil(_ condition: () -> Bool) async {
    while !condition() && !Task.isCancelled { await Task.yield() }
  }

  @Test("a key of a batch abandoned by its only request gives its granted claim up before the batch's origin call ends")
  func partiallyAbandonedBatchReleasesTheAbandonedKeysClaim() async throws {
    let coordinator = GatedCoordinator(gated: ["b"])
    let (cache, origin) = try makeCache(coordinator)
    // R1 asks for a and b in one batch; R2 joins b's load.
    let r1 = Task { await cache.values(for: ["a", "b"]) }
    await cache.waitForWaiters(1, for: "b")
    let r2 = Task { try await cache.value(for: "b") }
    await cache.waitForWaiters(2, for: "b")
    // R1 leaves while b's claim is still on its way: a (granted) has no request any more.
    r1.cancel()
    _ = await r1.value
    coordinator.openGate("b")
    // The batch asks its origin for b only.
    await waitUntil { origin.calls.count == 1 }
    #expect(origin.calls.first?.keys == ["b"])
    // a is not being loaded by anyone: its claim must be given up now, not when b's call ends
    // (another instance waits for a all that time).
    await waitUntil { coordinator.completions.contains { $0.key == "a" } }
    #expect(
      coordinator.completions.contains { $0.key == "a" },
      "a's lease is still held while the origin call for b runs")
    // A new request for a on this very process claims a again while the batch still holds a's
    // claim: against "a process holds at most one claim per key" (with Redis it waits for itself).
    let r3 = Task { try await cache.value(for: "a") }
    #expect(try await r3.value == "single a")
    #expect(coordinator.mostOpenGrants["a"] == 1, "two claims on a held at once by one process")
    origin.open()
    #expect(try await r2.value == "origin b")
    await waitUntil { coordinator.completions.count == 3 }
  }

  @Test("a held key whose only request left stops waiting for the other instance")
  func abandonedHeldKeyStopsWaiting() async throws {
    let coordinator = GatedCoordinator(gated: ["b"], heldElsewhere: ["b"])
    let (cache, origin) = try makeCache(coordinator)
    let r1 = Task { await cache.values(for: ["a", "b"]) }
    await cache.waitForWaiters(1, for: "a")
    let r2 = Task { try await cache.value(for: "a") }
    await cache.waitForWaiters(2, for: "a")
    await waitUntil { coordinator.claimsWaiting == 1 }
    // R1 (the only request for b) leaves; a is still wanted by R2, so the batch runs on.
    r1.cancel()
    _ = await r1.value
    await waitUntil { coordinator.claimsWaiting == 0 }
    #expect(coordinator.claimsWaiting == 0, "b's claim still waits for the other instance though no one wants b")
    origin.open()
    #expect(try await r2.value == "origin a")
    coordinator.openGate("b")
    await cache.waitUntilIdle()
  }
}
