import Dispatch

/// A serial executor whose jobs run on a dispatch queue of their own, off Swift's cooperative
/// thread pool, so that they may block on file or database I/O.
///
/// Give an actor that does blocking I/O one of these as its executor; its methods then run here
/// and may call POSIX or SQLite synchronously, without starving the cooperative pool:
///
/// ```swift
/// actor Store {
///   private let executor = BlockingExecutor(label: "Store")
///   nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
/// }
/// ```
///
/// The queue is a private serial `DispatchQueue`, which targets Dispatch's overcommitting root
/// queue: a job that blocks makes Dispatch bring up another thread rather than stall other work.
/// A call into such an actor from a task on the cooperative pool costs two thread hand-offs
/// (there and back), some microseconds each, so batch small operations where latency matters.
package final class BlockingExecutor: SerialExecutor {
  private let queue: DispatchQueue

  /// Creates an executor with its own serial queue named `label`.
  package init(label: String) {
    queue = DispatchQueue(label: label)
    queue.setSpecific(key: BlockingExecutorMarker.key, value: true)
  }

  package func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    queue.async { job.runSynchronously(on: self.asUnownedSerialExecutor()) }
  }

  /// Stops the process unless the caller runs on this executor's queue.
  package func checkIsolated() {
    dispatchPrecondition(condition: .onQueue(queue))
  }

  /// Runs `body` on this executor's queue and returns its result, for code that is not an actor
  /// on this executor. The caller suspends; no thread of the cooperative pool waits.
  package func run<Result: Sendable>(_ body: @escaping @Sendable () throws -> Result) async throws -> Result {
    try await withCheckedThrowingContinuation { continuation in
      queue.async { continuation.resume(with: Swift.Result(catching: body)) }
    }
  }

  /// Whether the calling thread is running a job of some `BlockingExecutor` (tests assert that
  /// blocking I/O happens only there).
  package static var isCurrent: Bool {
    DispatchQueue.getSpecific(key: BlockingExecutorMarker.key) ?? false
  }
}

private enum BlockingExecutorMarker {
  /// Marks the queues of all blocking executors.
  static let key = DispatchSpecificKey<Bool>()
}
