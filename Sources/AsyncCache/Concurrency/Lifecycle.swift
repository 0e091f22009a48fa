import Synchronization

/// The closing and running of a component (a cache, a chain, a layer, a store), written once:
/// the first ``close(checking:atFirst:onCancel:_:)`` starts the closing work, which later calls
/// wait for; closing ends ``run(checking:orUntil:meanwhile:)``; a component may refuse a second
/// run while one runs. Safe from any context.
///
/// The owner's `close()` is then `try await lifecycle.close { try await self.closeLayers() }`,
/// and its `run()` is `try await lifecycle.run(orUntil: configuration.gracefulShutdown)`
/// followed by `try await close()`.
package final class Lifecycle: Sendable {
  private struct State: Sendable {
    /// The work of the first close, which later closes wait for.
    var closing: Task<Void, any Error>?
    /// Whether ``Lifecycle/run(checking:orUntil:meanwhile:)`` runs, as often as it runs.
    var runs = 0
  }

  /// The type that owns the lifecycle, such as `CacheChain`, for messages.
  private let owner: String
  /// What a second concurrent run is refused as ("the chain"), or `nil` to allow it.
  private let refusedSecondRun: String?
  private let state = Locked(State())
  private let closed = Atomic<Bool>(false)
  /// Fired when closing begins: ends the runs.
  private let closeSignal = OneShotSignal()

  /// The lifecycle of a component of type `owner`.
  ///
  /// - Parameters:
  ///   - owner: The owner's type, such as `CacheChain`, which messages name.
  ///   - noun: What the owner is called in the error of a second run while one runs ("chain":
  ///     "CacheChain.run(): the chain runs already"); `nil` to let runs overlap.
  package init(_ owner: String, refusingSecondRunOf noun: String? = nil) {
    self.owner = owner
    self.refusedSecondRun = noun
  }

  /// Whether closing began. Safe from any context; one atomic load.
  package var isClosed: Bool { closed.load(ordering: .relaxed) }

  /// Whether a run is under way.
  package var isRunning: Bool { state.withLock { $0.runs > 0 } }

  /// Begins closing, for an owner whose closing is synchronous work that it does itself, once:
  /// marks the lifecycle closed and ends the runs. Returns `true` the first time only, when the
  /// owner must close; later closes do nothing. An owner closes either so or with
  /// ``close(checking:atFirst:onCancel:_:)``, not both.
  package func beginClosing() -> Bool {
    let first = !closed.exchange(true, ordering: .relaxed)
    if first { closeSignal.fire() }
    return first
  }

  /// Closes: every call runs `check`; the first then runs `begin` (under the lifecycle's lock,
  /// before any run is told), marks the lifecycle closed, ends the runs and starts `work` in a
  /// task of its own; every call, the first included, waits for that task and throws what it
  /// threw.
  ///
  /// Cancelling a caller does not cancel `work`: it calls `onCancel`, and the caller still
  /// waits.
  ///
  /// - Parameters:
  ///   - check: Runs first, on every call; what it throws (a close the owner refuses, such as
  ///     one from inside work that the close would wait for) is thrown before anything else,
  ///     and leaves an open lifecycle open.
  ///   - begin: What the owner does as closing begins, on the first call only.
  ///   - onCancel: Called when a waiting caller is cancelled.
  ///   - work: The closing work.
  /// - Throws: What `check` or `work` threw.
  package func close(
    checking check: () throws -> Void = {},
    atFirst begin: () -> Void = {},
    onCancel: (@Sendable () -> Void)? = nil,
    _ work: @escaping @Sendable () async throws -> Void
  ) async throws {
    try check()
    let task = state.withLock { state in
      if let closing = state.closing { return closing }
      begin()
      closed.store(true, ordering: .relaxed)
      closeSignal.fire()
      let task = Task { try await work() }
      state.closing = task
      return task
    }
    if let onCancel {
      try await withTaskCancellationHandler {
        try await task.value
      } onCancel: {
        onCancel()
      }
    } else {
      try await task.value
    }
  }

  /// Runs until closing begins, `gracefulShutdown` returns or throws (when given), or the
  /// calling task is cancelled, with `work` (when given) running meanwhile and cancelled then;
  /// returns once it has ended. The owner closes after it.
  ///
  /// - Parameters:
  ///   - check: Runs first, under the lifecycle's lock; what it throws ends the run before it
  ///     starts.
  ///   - gracefulShutdown: The service's shutdown signal.
  ///   - work: The owner's background work while it runs.
  /// - Throws: ``AsyncCacheError/Code/invalidState`` when the owner refuses a second run and one
  ///   runs; what `check` threw.
  package func run(
    checking check: () throws -> Void = {},
    orUntil gracefulShutdown: (@Sendable () async throws -> Void)?,
    meanwhile work: (@Sendable () async -> Void)? = nil
  ) async throws {
    try state.withLock { state in
      try check()
      if let refusedSecondRun, state.runs > 0 {
        throw AsyncCacheError.invalidState("\(owner).run(): the \(refusedSecondRun) runs already")
      }
      state.runs += 1
    }
    defer { state.withLock { $0.runs -= 1 } }
    if let work {
      await closeSignal.wait(orUntil: gracefulShutdown, meanwhile: work)
    } else {
      await closeSignal.wait(orUntil: gracefulShutdown)
    }
  }
}
