/// One load of one ``LoadingCache``, told apart from every other load in the process.
@usableFromInline
struct LoadIdentity: Hashable, Sendable {
  /// The cache's in-flight table.
  @usableFromInline let table: ObjectIdentifier
  /// The load's identifier in that table.
  @usableFromInline let load: UInt64

  @inlinable
  init(table: ObjectIdentifier, load: UInt64) {
    self.table = table
    self.load = load
  }
}

/// Which loads wait for which, across every ``LoadingCache`` of the process: how a request that
/// would wait for its own load is found, directly (a fetcher asking for its own key) or through
/// other keys and caches (A loads B, B loads A), so that it fails with
/// ``AsyncCacheError/Code/recursiveLoad`` instead of waiting for ever.
///
/// A load's body (its lookups in the layers below and its origin calls) runs with
/// ``current`` set to the load, or to the loads of a batch. A request made inside that body
/// records, while it waits, that those loads wait for the load it joins or starts. A request
/// whose wait would close a cycle (the load it would join already waits, through other loads,
/// for one of the loads it is made from) is refused before it joins. Hits never get here, nor
/// does a miss made outside a load's body: both pay nothing.
///
/// "Inside a load's body" means: in a task that inherits the load's task-local values. A task
/// the origin spawns with `Task { … }` inherits them, so a request it makes counts as the load's
/// even if the origin does not wait for it (and is refused if it would close a cycle, although
/// that cycle would not deadlock); one made from `Task.detached`, a Dispatch queue or another
/// thread does not, so a cycle through it is not found.
@usableFromInline
final class LoadDependencies: Sendable {
  /// The loads whose body a task runs: one load, or the loads of a batch.
  enum Context: Sendable {
    case load(LoadIdentity)
    case batch([LoadIdentity])
  }

  /// The loads whose body the current task runs; `nil` outside any load. An enum rather than an
  /// array, so that starting a single load allocates no array.
  @TaskLocal static var current: Context?

  /// The loads of ``current``, for inlinable code: empty outside any load. A task-local read, a
  /// few nanoseconds, paid on misses only; an array is made only inside a load.
  @usableFromInline static var loadsOfCurrentTask: [LoadIdentity] {
    switch current {
    case nil: []
    case .load(let load): [load]
    case .batch(let loads): loads
    }
  }

  /// The process's graph.
  @usableFromInline static let shared = LoadDependencies()

  /// For each load, the loads it waits for, with the number of its requests waiting for each.
  private let edges = Locked<[LoadIdentity: [LoadIdentity: Int]]>([:])

  /// Records that `waiters` wait for `target`, unless `target` already waits (through any
  /// number of loads) for one of them, or is one of them: then records nothing and returns
  /// `false`. Call ``remove(_:waitingFor:)`` once the wait ends. A lock leaf: safe to call with a
  /// cache's in-flight table locked. O(edges) when `checkingCycles`, O(waiters) otherwise.
  @usableFromInline
  func add(_ waiters: [LoadIdentity], waitingFor target: LoadIdentity, checkingCycles: Bool) -> Bool {
    edges.withLock { edges in
      if checkingCycles, Self.reaches(from: target, anyOf: waiters, in: edges) { return false }
      for waiter in waiters { edges[waiter, default: [:]][target, default: 0] += 1 }
      return true
    }
  }

  /// Forgets one wait recorded by ``add(_:waitingFor:checkingCycles:)``.
  @usableFromInline
  func remove(_ waiters: [LoadIdentity], waitingFor target: LoadIdentity) {
    edges.withLock { edges in
      for waiter in waiters {
        guard let count = edges[waiter]?[target] else { continue }
        if count > 1 {
          edges[waiter]![target] = count - 1
        } else {
          edges[waiter]![target] = nil
          if edges[waiter]!.isEmpty { edges[waiter] = nil }
        }
      }
    }
  }

  /// Whether a load of `table` is one of `loads`, or waits, through any number of loads, for one:
  /// then work of `loads` that waits for `table`'s loads to end waits for itself.
  func isAnyLoad(of table: ObjectIdentifier, waitingFor loads: [LoadIdentity]) -> Bool {
    if loads.contains(where: { $0.table == table }) { return true }
    return edges.withLock { edges in
      edges.keys.contains { $0.table == table && Self.reaches(from: $0, anyOf: loads, in: edges) }
    }
  }

  /// The number of waits recorded now from or for the loads of `table` (for tests: zero at rest).
  func waitCount(involving table: ObjectIdentifier) -> Int {
    edges.withLock { edges in
      edges.reduce(0) { sum, edge in
        sum + edge.value.reduce(0) { $0 + (edge.key.table == table || $1.key.table == table ? $1.value : 0) }
      }
    }
  }

  /// Whether `start` is one of `targets` or waits, through any number of loads, for one.
  private static func reaches(
    from start: LoadIdentity, anyOf targets: [LoadIdentity], in edges: [LoadIdentity: [LoadIdentity: Int]]
  ) -> Bool {
    var seen: Set<LoadIdentity> = [start]
    var pending = [start]
    while let load = pending.popLast() {
      if targets.contains(load) { return true }
      guard let waited = edges[load] else { continue }
      for next in waited.keys where seen.insert(next).inserted { pending.append(next) }
    }
    return false
  }
}

extension AsyncCacheError {
  /// The error for a request for `key` that would wait for its own load.
  package static func recursiveLoad<Key>(_ key: Key) -> AsyncCacheError {
    AsyncCacheError(
      code: .recursiveLoad,
      message: "the request for key \(String(describing: key).prefix(200)) would wait for its own load: it was made "
        + "inside a load that this key's load waits for (the origin asked for the key it is loading, directly or "
        + "through loads of other keys), and would never be answered")
  }
}

extension AsyncCacheError {
  /// Whether `error`, or an error it wraps (as ``underlying``, at any depth), is a
  /// ``Code/recursiveLoad``: one that fails the same way however often it is tried.
  static func isRecursiveLoad(_ error: any Error) -> Bool {
    var current: (any Error)? = error
    for _ in 0..<16 {
      guard let cacheError = current as? AsyncCacheError else { return false }
      if cacheError.code == .recursiveLoad { return true }
      current = cacheError.underlying
    }
    return false
  }
}
