public import AsyncCache

/// An origin that holds every fetch until the test releases it.
///
/// Use it to make the interleavings of concurrent code deterministic: start requests, await
/// ``waitForFetches(_:for:)`` to know that the loads reached the origin, then ``release(_:)``
/// them (or let them be cancelled) in exactly the order the test wants.
///
/// ```swift
/// @Test func concurrentRequestsShareOneFetch() async throws {
///     let origin = GatedFetcher<String, Int> { $0.count }
///     let cache = try LoadingCache(layers: [MemoryLayer<String, Int>()], origin: origin)
///     async let a = cache.value(for: "abc")
///     async let b = cache.value(for: "abc")
///     await origin.waitForFetches(1, for: "abc")
///     origin.release("abc")
///     #expect(try await [a, b] == [3, 3])
///     #expect(origin.callCount(for: "abc") == 1)
/// }
/// ```
///
/// Releasing acts on the fetches held *at that moment*: a fetch that arrives later is held
/// until the next release. So await ``waitForFetches(_:for:)`` before releasing. Knowing that
/// requests wait for a load (`LoadingCache`) is not enough: the load may not have reached the
/// origin yet. Use ``open()`` to let every fetch through, present and future.
///
/// It counts calls per key, counts fetches that saw their task cancelled (a cancelled fetch
/// throws `CancellationError` at once), and records the priority each fetch ran at when it was
/// released. Safe from any context.
public final class GatedFetcher<Key: Hashable & Sendable, Value: Sendable>: AsyncFetcher, Sendable {
  private struct State {
    var calls: [Key] = []
    var releasedPriorities: [Key: [TaskPriority]] = [:]
  }

  private let respond: @Sendable (Key) throws -> Value
  private let waitroom = Waitroom<Key, Result<Value, any Error>>(holdsEverything: true)
  private let state = Locked(State())

  /// Creates a gated fetcher.
  ///
  /// - Parameter respond: The answer of a fetch released with ``release(_:)`` or
  ///   ``releaseAll()``, or let through by ``open()``.
  public init(respond: @escaping @Sendable (Key) throws -> Value) {
    self.respond = respond
  }

  /// Records the call and suspends until the test releases it (or returns at once if the gate
  /// is ``open()``).
  ///
  /// - Throws: What the test released it with; `CancellationError` if the task is cancelled
  ///   while held.
  public func fetch(_ key: Key) async throws -> Value {
    state.withLock { $0.calls.append(key) }
    let outcome: Result<Value, any Error>
    if let released = try await waitroom.waitIfHeld(key) {
      outcome = released
    } else {
      try Task.checkCancellation()
      outcome = answer(key)
    }
    let priority = Task.currentPriority
    state.withLock { $0.releasedPriorities[key, default: []].append(priority) }
    return try outcome.get()
  }

  private func answer(_ key: Key) -> Result<Value, any Error> {
    Result { try respond(key) }
  }

  // MARK: Releasing

  /// Releases every held fetch of `key` with the `respond` answer. Returns how many it released.
  @discardableResult
  public func release(_ key: Key) -> Int {
    waitroom.release(where: { $0 == key }, with: { .success(self.answer($0)) })
  }

  /// Releases every held fetch of `key` with `value`. Returns how many it released.
  @discardableResult
  public func release(_ key: Key, returning value: Value) -> Int {
    waitroom.release(where: { $0 == key }, with: { _ in .success(.success(value)) })
  }

  /// Releases the oldest held fetch of `key` with `value`; later ones stay held. Returns
  /// whether there was one.
  @discardableResult
  public func releaseOldest(_ key: Key, returning value: Value) -> Bool {
    waitroom.release(limit: 1, where: { $0 == key }, with: { _ in .success(.success(value)) }) == 1
  }

  /// Releases every held fetch of `key` with `error`. Returns how many it released.
  @discardableResult
  public func release(_ key: Key, throwing error: any Error) -> Int {
    waitroom.release(where: { $0 == key }, with: { _ in .success(.failure(error)) })
  }

  /// Releases every held fetch with the `respond` answer. Returns how many it released.
  @discardableResult
  public func releaseAll() -> Int {
    waitroom.release(where: { _ in true }, with: { .success(self.answer($0)) })
  }

  /// Releases every held fetch and lets every later fetch through at once.
  public func open() {
    waitroom.openAndReleaseAll { .success(self.answer($0)) }
  }

  // MARK: Observing

  /// Returns once at least `count` fetches of `key` (of any key when `nil`) are held, or once
  /// the calling task is cancelled (a test's time limit ends a wait for a fetch that never starts).
  public func waitForFetches(_ count: Int = 1, for key: Key? = nil) async {
    await waitroom.waitUntilPending(count) { key == nil || $0 == key }
  }

  /// The number of fetches held now, of `key` or of any key when `nil`.
  public func heldCount(for key: Key? = nil) -> Int {
    waitroom.pendingCount { key == nil || $0 == key }
  }

  /// The keys of the held fetches, oldest first.
  public var heldKeys: [Key] { waitroom.pendingKeys() }

  /// Every key fetched, in call order.
  public var calls: [Key] { state.withLock { $0.calls } }

  /// The number of fetches of any key.
  public var callCount: Int { state.withLock { $0.calls.count } }

  /// The number of fetches of `key`.
  public func callCount(for key: Key) -> Int {
    state.withLock { state in state.calls.reduce(0) { $0 + ($1 == key ? 1 : 0) } }
  }

  /// The number of held fetches of `key` (of any key when `nil`) whose task was cancelled.
  public func cancellationCount(for key: Key? = nil) -> Int {
    waitroom.cancellationCount { key == nil || $0 == key }
  }

  /// Whether a held fetch of `key` saw its task cancelled.
  public func wasCancelled(_ key: Key) -> Bool {
    cancellationCount(for: key) > 0
  }

  /// The priorities the fetches of `key` ran at when they were released, in release order.
  public func releasedPriorities(for key: Key) -> [TaskPriority] {
    state.withLock { $0.releasedPriorities[key, default: []] }
  }
}
