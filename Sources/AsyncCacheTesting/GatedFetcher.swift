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
/// It counts calls per key, counts fetches that saw their task cancelled (a cancelled fetch
/// throws `CancellationError` at once), and records the priority each fetch ran at when it was
/// released. Safe from any context.
public final class GatedFetcher<Key: Hashable & Sendable, Value: Sendable>: AsyncFetcher, Sendable {
  private struct State {
    var calls: [Key] = []
    var open = false
    var releasedPriorities: [Key: [TaskPriority]] = [:]
  }

  private let respond: @Sendable (Key) throws -> Value
  private let waitroom = Waitroom<Key, Result<Value, any Error>>()
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
    let isOpen = state.withLock { state in
      state.calls.append(key)
      return state.open
    }
    let outcome: Result<Value, any Error>
    if isOpen {
      try Task.checkCancellation()
      outcome = Result { try respond(key) }
    } else {
      outcome = try await waitroom.wait(for: key)
    }
    let priority = Task.currentPriority
    state.withLock { $0.releasedPriorities[key, default: []].append(priority) }
    return try outcome.get()
  }

  // MARK: Releasing

  /// Releases every held fetch of `key` with the `respond` answer. Returns how many it released.
  @discardableResult
  public func release(_ key: Key) -> Int {
    waitroom.release(key, with: Result { try respond(key) }.map { Result.success($0) })
  }

  /// Releases every held fetch of `key` with `value`. Returns how many it released.
  @discardableResult
  public func release(_ key: Key, returning value: Value) -> Int {
    waitroom.release(key, with: .success(.success(value)))
  }

  /// Releases the oldest held fetch of `key` with `value`; later ones stay held. Returns
  /// whether there was one.
  @discardableResult
  public func releaseOldest(_ key: Key, returning value: Value) -> Bool {
    waitroom.release(key, limit: 1, with: .success(.success(value))) == 1
  }

  /// Releases every held fetch of `key` with `error`. Returns how many it released.
  @discardableResult
  public func release(_ key: Key, throwing error: any Error) -> Int {
    waitroom.release(key, with: .success(.failure(error)))
  }

  /// Releases every held fetch with the `respond` answer. Returns how many it released.
  @discardableResult
  public func releaseAll() -> Int {
    waitroom.releaseAll { key in .success(Result { try self.respond(key) }) }
  }

  /// Releases every held fetch and lets every later fetch through at once.
  public func open() {
    state.withLock { $0.open = true }
    releaseAll()
  }

  // MARK: Observing

  /// Returns once at least `count` fetches of `key` (of any key when `nil`) are held.
  public func waitForFetches(_ count: Int = 1, for key: Key? = nil) async {
    await waitroom.waitUntilPending(count, for: key)
  }

  /// The number of fetches held now, of `key` or of any key when `nil`.
  public func heldCount(for key: Key? = nil) -> Int {
    waitroom.pendingCount(for: key)
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
    waitroom.cancellationCount(for: key)
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
