public import AsyncCache

/// An in-memory layer whose operations a test can make fail or hold.
///
/// It stores entries in a dictionary (expired entries are misses, by its clock when it has
/// one) and lets the test script faults:
///
/// ```swift
/// let disk = FakeLayer<String, Int>()
/// disk.fail(.lookup, with: DiskError.gone)            // every lookup throws until stopFailing
/// disk.hold(.insert)                                  // inserts wait until released
/// ...
/// await disk.waitForHeld(1, .insert)
/// disk.release(.insert)
/// ```
///
/// Safe from any context.
public final actor FakeLayer<Key: Hashable & Sendable, Value: Sendable>: AsyncCacheLayer {
  /// An operation of the layer.
  public enum Operation: Hashable, Sendable, CaseIterable {
    /// ``AsyncCache/AsyncCacheLayer/entry(for:)``
    case lookup
    /// ``AsyncCache/AsyncCacheLayer/insert(_:for:)``
    case insert
    /// ``AsyncCache/AsyncCacheLayer/revalidate(_:for:replacing:)``
    case revalidate
    /// ``AsyncCache/AsyncCacheLayer/removeValue(for:)``
    case remove
    /// ``AsyncCache/AsyncCacheLayer/removeAll()``
    case removeAll
    /// ``AsyncCache/AsyncCacheLayer/invalidate(tag:at:)``
    case invalidateTag
  }

  /// When a held operation waits.
  public enum HoldPhase: Sendable, Hashable {
    /// Before it reads or changes anything.
    case beforeApplying
    /// After it read or changed the entries, before it returns: a held lookup then returns
    /// what was stored when it ran, however the entries changed while it waited.
    case afterApplying
  }

  private struct Fault {
    var error: any Error
    var remaining: Int?
  }

  private struct State {
    var entries: [Key: CacheEntry<Value>]
    var faults: [Operation: Fault] = [:]
    var counts: [Operation: Int] = [:]
    var pressure: [MemoryPressureLevel] = []
    var invalidatedTags: [String: CacheInstant] = [:]
  }

  /// What a held call waits on: an operation in one phase.
  private struct Hold: Hashable, Sendable {
    var operation: Operation
    var phase: HoldPhase
  }

  private let state: Locked<State>
  private let clock: (any CacheClock)?
  private let waitroom = Waitroom<Hold, Void>(holdsEverything: false)

  /// Creates a layer holding `entries`; with a `clock`, expired entries are misses.
  public init(entries: [Key: CacheEntry<Value>] = [:], clock: (any CacheClock)? = nil) {
    self.state = Locked(State(entries: entries))
    self.clock = clock
  }

  // MARK: Scripting

  /// Makes `operation` throw `error`, `times` times or until ``stopFailing(_:)`` when `nil`.
  /// `times: 0` makes it fail no more.
  public nonisolated func fail(_ operation: Operation, with error: any Error, times: Int? = nil) {
    precondition(times.map { $0 >= 0 } ?? true, "FakeLayer.fail(_:with:times:) needs times >= 0, not \(times!)")
    state.withLock { $0.faults[operation] = times == 0 ? nil : Fault(error: error, remaining: times) }
  }

  /// Stops the faults of `operation` (of every operation when `nil`).
  public nonisolated func stopFailing(_ operation: Operation? = nil) {
    state.withLock { state in
      if let operation { state.faults[operation] = nil } else { state.faults.removeAll() }
    }
  }

  /// Holds every later call of `operation` until ``release(_:)``.
  public nonisolated func hold(_ operation: Operation, phase: HoldPhase = .beforeApplying) {
    waitroom.hold(Hold(operation: operation, phase: phase))
  }

  /// Lets the held calls of `operation` proceed, and stops holding new ones.
  public nonisolated func release(_ operation: Operation) {
    waitroom.release(stopHolding: true, where: { $0.operation == operation }, with: { _ in .success(()) })
  }

  /// Lets the oldest held call of `operation` proceed; later calls are still held.
  public nonisolated func releaseOne(_ operation: Operation) {
    waitroom.release(limit: 1, where: { $0.operation == operation }, with: { _ in .success(()) })
  }

  /// Returns once at least `count` calls of `operation` are held, or once the calling task is
  /// cancelled.
  public nonisolated func waitForHeld(_ count: Int = 1, _ operation: Operation) async {
    await waitroom.waitUntilPending(count) { $0.operation == operation }
  }

  // MARK: Observing

  /// The entries stored now, expired ones included.
  public nonisolated var storedEntries: [Key: CacheEntry<Value>] { state.withLock { $0.entries } }

  /// Stores `entry` directly, bypassing faults and holds.
  public nonisolated func seed(_ entry: CacheEntry<Value>, for key: Key) {
    state.withLock { $0.entries[key] = entry }
  }

  /// How many times `operation` was called (faulted calls included).
  public nonisolated func callCount(_ operation: Operation) -> Int {
    state.withLock { $0.counts[operation, default: 0] }
  }

  /// The number of held calls of `operation` whose task was cancelled while they waited.
  public nonisolated func cancellationCount(_ operation: Operation) -> Int {
    waitroom.cancellationCount { $0.operation == operation }
  }

  /// The memory-pressure levels received, in order.
  public nonisolated var memoryPressureLevels: [MemoryPressureLevel] { state.withLock { $0.pressure } }

  // MARK: AsyncCacheLayer

  /// Returns the stored entry, unless it expired by the layer's clock; honours faults and holds of ``Operation/lookup``.
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    try await perform(.lookup) { [clock] state in
      // Read when the lookup applies, after any hold before it.
      let now = clock?.now
      guard let entry = state.entries[key] else { return nil }
      if let now, entry.isExpired(at: now) {
        state.entries[key] = nil
        return nil
      }
      return entry
    }
  }

  /// Stores the entry; honours faults and holds of ``Operation/insert``.
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    try await perform(.insert) { $0.entries[key] = entry }
  }

  /// Gives the entry stored for `key`, if it is `held` (its expiry and metadata), `entry`'s
  /// expiry and metadata, in place; honours faults and holds of ``Operation/revalidate``.
  public nonisolated func revalidate(
    _ entry: CacheEntry<Value>, for key: Key, replacing held: CacheEntry<Value>
  ) async throws -> Bool {
    try await perform(.revalidate) { state in
      guard let stored = state.entries[key], stored.expiresAt == held.expiresAt, stored.metadata == held.metadata else {
        return false
      }
      state.entries[key] = CacheEntry(stored.value, expiresAt: entry.expiresAt, metadata: entry.metadata)
      return true
    }
  }

  /// Removes the entry; honours faults and holds of ``Operation/remove``.
  public nonisolated func removeValue(for key: Key) async throws {
    try await perform(.remove) { _ = $0.entries.removeValue(forKey: key) }
  }

  /// Removes every entry; honours faults and holds of ``Operation/removeAll``.
  public nonisolated func removeAll() async throws {
    try await perform(.removeAll) { $0.entries.removeAll() }
  }

  /// Records the invalidation in ``invalidatedTags``; honours faults and holds of
  /// ``Operation/invalidateTag``. Its entries stay as they are: like a layer that loses them
  /// with the process, it leaves it to the chain over it to hold them dead.
  public nonisolated func invalidate(tag: String, at instant: CacheInstant) async throws {
    try await perform(.invalidateTag) { state in
      state.invalidatedTags[tag] = Swift.max(instant, state.invalidatedTags[tag] ?? instant)
    }
  }

  /// Every tag invalidated in the layer, with its latest invalidation instant.
  public nonisolated var invalidatedTags: [String: CacheInstant] { state.withLock(\.invalidatedTags) }

  /// Records the level in ``memoryPressureLevels``.
  public nonisolated func handleMemoryPressure(_ level: MemoryPressureLevel) async {
    state.withLock { $0.pressure.append(level) }
  }

  /// Counts the call, waits if the operation is held before applying, throws its fault if
  /// any, applies `body`, then waits if it is held after applying.
  private nonisolated func perform<Result: Sendable>(
    _ operation: Operation,
    _ body: @Sendable (inout State) -> Result
  ) async throws -> Result {
    state.withLock { $0.counts[operation, default: 0] += 1 }
    _ = try await waitroom.waitIfHeld(Hold(operation: operation, phase: .beforeApplying))
    let outcome = state.withLock { state -> Swift.Result<Result, any Error> in
      if var fault = state.faults[operation] {
        if let remaining = fault.remaining {
          fault.remaining = remaining - 1
          state.faults[operation] = remaining - 1 > 0 ? fault : nil
        }
        return .failure(fault.error)
      }
      return .success(body(&state))
    }
    _ = try await waitroom.waitIfHeld(Hold(operation: operation, phase: .afterApplying))
    return try outcome.get()
  }
}
