import Foundation
import Synchronization

/// The limit: a dictionary behind one `Synchronization.Mutex`. A lookup is one hash, one
/// uncontended lock and one probe; no cache can do less and still be shared between tasks.
final class MutexDictionary: Sendable {
  private let storage = Mutex<[Int: Int]>([:])

  /// Returns the value for `key`.
  func value(for key: Int) -> Int? {
    storage.withLock { $0[key] }
  }

  /// Stores `value` for `key`.
  func insert(_ value: Int, for key: Int) {
    storage.withLock { $0[key] = value }
  }
}

/// The limit for a bounded cache: a dictionary behind one `Synchronization.Mutex`, holding at
/// most `countLimit` entries by evicting the oldest written key (FIFO, a ring of keys). A hit
/// costs what ``MutexDictionary``'s does; a write of a new key also evicts one.
final class FIFOMutexDictionary: Sendable {
  private struct State {
    var storage: [Int: Int] = [:]
    /// The keys in the order they were first written, from `oldest` on (a ring once full).
    var order: [Int] = []
    var oldest = 0
  }

  private let state = Mutex(State())
  let countLimit: Int

  /// Creates an empty dictionary that holds at most `countLimit` (at least 1) entries.
  init(countLimit: Int) {
    precondition(countLimit > 0, "countLimit must be positive")
    self.countLimit = countLimit
  }

  /// Returns the value for `key`.
  func value(for key: Int) -> Int? {
    state.withLock { $0.storage[key] }
  }

  /// Stores `value` for `key`; a new key evicts the oldest when the dictionary is full. A key
  /// written again keeps its place.
  func insert(_ value: Int, for key: Int) {
    let countLimit = countLimit
    state.withLock { state in
      guard state.storage.updateValue(value, forKey: key) == nil else { return }
      if state.order.count < countLimit {
        state.order.append(key)
      } else {
        state.storage[state.order[state.oldest]] = nil
        state.order[state.oldest] = key
        state.oldest = state.oldest + 1 == countLimit ? 0 : state.oldest + 1
      }
    }
  }

  /// The number of entries.
  var count: Int { state.withLock { $0.storage.count } }
}

/// The obvious Swift concurrency cache: a dictionary isolated to an actor, read with `await`.
actor ActorDictionary {
  private var storage: [Int: Int]

  /// Creates the actor holding `storage`.
  init(_ storage: [Int: Int] = [:]) {
    self.storage = storage
  }

  /// Returns the value for `key`; callers hop onto the actor.
  func value(for key: Int) -> Int? {
    storage[key]
  }

  /// Stores `value` for `key`.
  func insert(_ value: Int, for key: Int) {
    storage[key] = value
  }
}

/// Foundation's `NSCache`, the platform's answer, with `Int` keys and values boxed in `NSNumber`.
///
/// The boxes of the keys `0..<keySpace` are made up front, so the timed loops measure the cache
/// and not the allocation of a box per lookup. Not `Sendable` (on Linux `NSCache` is not), so
/// it is only used from the task that made it.
final class BoxedNSCache {
  private let cache = NSCache<NSNumber, NSNumber>()
  private let boxes: [NSNumber]

  /// Creates a cache for the keys `0..<keySpace`, holding at most `countLimit` entries (0: no
  /// limit).
  init(keySpace: Int, countLimit: Int = 0) {
    cache.countLimit = countLimit
    boxes = (0..<keySpace).map { NSNumber(value: $0) }
  }

  /// Returns the value for `key`, which must be in the key space.
  func value(for key: Int) -> Int? {
    cache.object(forKey: boxes[key])?.intValue
  }

  /// Stores `key` with itself as the value (as the other caches are filled); `key` must be in the
  /// key space.
  func insertKey(_ key: Int) {
    cache.setObject(boxes[key], forKey: boxes[key])
  }
}

/// The obvious request coalescer: one `Task` per key, looked up or created under a lock, which
/// every request then awaits. It ignores cancellation (a cancelled request still waits) and never
/// removes a finished task, so it is a baseline for speed, not a design to copy.
final class NaiveCoalescer: Sendable {
  private let tasks = Mutex<[Int: Task<Int, any Error>]>([:])
  private let fetch: @Sendable (Int) async throws -> Int
  private let joinCount = Atomic<Int>(0)

  /// Creates a coalescer whose loads call `fetch`.
  init(fetch: @escaping @Sendable (Int) async throws -> Int) {
    self.fetch = fetch
  }

  /// How many requests have found or created their key's task (and now wait for it).
  var joinedRequests: Int { joinCount.load(ordering: .relaxed) }

  /// Returns the value for `key`, joining the load in flight or starting one.
  func value(for key: Int) async throws -> Int {
    let task = tasks.withLock { tasks in
      if let task = tasks[key] { return task }
      let fetch = self.fetch
      let task = Task { try await fetch(key) }
      tasks[key] = task
      return task
    }
    joinCount.wrappingAdd(1, ordering: .relaxed)
    return try await task.value
  }
}
