@testable import AsyncCache

/// A small, fast, seeded random number generator (SplitMix64) so that random tests replay.
typealias SeededGenerator = SplitMix64

/// A hash of `key` that is the same in every process (a key's `hashValue` is not), for tests
/// that drive a segment, a shadow or a referee with hashes of their own: `seed` picks one of
/// many hash functions, as a process's hashing seed does.
func replayableHash(of key: Int, seed: UInt64 = 0) -> Int {
  var generator = SplitMix64(seed: UInt64(bitPattern: Int64(key)) ^ seed &* 0x2545_F491_4F6C_DD1D)
  return Int(truncatingIfNeeded: generator.next())
}

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
