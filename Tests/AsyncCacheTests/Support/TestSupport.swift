@testable import AsyncCache

/// A small, fast, seeded random number generator (SplitMix64) so that random tests replay.
typealias SeededGenerator = SplitMix64

extension MemoryLayer {
  /// Structural violations of the layer's storage (empty when sound).
  nonisolated var invariantViolations: [String] { store.invariantViolations() }
}

/// Runs `work` in a task of its own and waits for it; with `cancel`, cancels it first after
/// `yields` yields: before it starts, while it waits, or after it ended, as the timing falls.
func runInTask<Success: Sendable>(
  cancellingAfter yields: Int?,
  _ work: @escaping @Sendable () async throws -> Success
) async -> Result<Success, any Error> {
  let task = Task(operation: work)
  if let yields {
    for _ in 0..<yields { await Task.yield() }
    task.cancel()
  }
  return await task.result
}

/// Awaits `task` and returns how it ended.
func outcome<Success: Sendable>(of task: Task<Success, any Error>) async -> Result<Success, any Error> {
  await task.result
}

extension Result {
  var isCancellation: Bool {
    if case .failure(let error) = self { return error is CancellationError }
    return false
  }

  var value: Success? {
    if case .success(let value) = self { return value }
    return nil
  }
}
