import AsyncCache
import Foundation

/// A task executor on a thread of its own, for tasks that block their thread on purpose (a Redis
/// caller that reads its reply on its own thread, made to wait; a clock that holds a request in
/// place): they must not hold one of the cooperative pool's few threads while the other tests
/// need them.
public final class ThreadExecutor: TaskExecutor, Sendable {
  private let jobs = Locked<(queue: [UnownedJob], isStopped: Bool)>(([], false))
  private let signal = DispatchSemaphore(value: 0)

  public init(label: String) {
    let started = DetachedThread(label: label) { [self] in run() }.start()
    precondition(started == 0, "cannot start a thread for \(label): error \(started)")
  }

  public func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    jobs.withLock { $0.queue.append(job) }
    signal.signal()
  }

  /// Ends the thread once the jobs enqueued so far have run.
  public func stop() {
    jobs.withLock { $0.isStopped = true }
    signal.signal()
  }

  private func run() {
    while true {
      signal.wait()
      let next = jobs.withLock { jobs -> (job: UnownedJob?, stops: Bool) in
        jobs.queue.isEmpty ? (nil, jobs.isStopped) : (jobs.queue.removeFirst(), false)
      }
      if let job = next.job { job.runSynchronously(on: asUnownedTaskExecutor()) }
      if next.stops { return }
    }
  }
}
