import Foundation
import Synchronization

#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A serial executor backed by one dedicated thread: the thread a SQLite connection lives on.
///
/// `SQLiteLayer` runs its actor on this executor, so every blocking SQLite call happens on this
/// thread and never on the cooperative thread pool, and the connection is only ever used from
/// one thread. Jobs run in the order they were enqueued. The thread exits after ``shutdown()``
/// once its queue is empty.
final class ConnectionThread: SerialExecutor, @unchecked Sendable {
  // SAFETY: `jobs`, `isShutDown` and `isWaiting` are only read or written while `mutex` is
  // held; `condition` is only waited on with `mutex` held. The pointers are allocated once in
  // `init` and freed in `deinit`, which runs after the thread (which retains `self`) has exited.
  private let mutex: UnsafeMutablePointer<pthread_mutex_t>
  private let condition: UnsafeMutablePointer<pthread_cond_t>
  private var jobs: [UnownedJob] = []
  private var isWaiting = false
  private var isShutDown = false
  private var threadID: pthread_t?
  /// Jobs enqueued and not yet taken by the thread; read without the lock while spinning.
  private let queued = Atomic<Int>(0)

  /// Starts the thread, named `name` for debuggers and profilers.
  init(name: String) {
    mutex = .allocate(capacity: 1)
    mutex.initialize(to: pthread_mutex_t())
    pthread_mutex_init(mutex, nil)
    condition = .allocate(capacity: 1)
    condition.initialize(to: pthread_cond_t())
    pthread_cond_init(condition, nil)
    jobs.reserveCapacity(64)
    let thread = Thread { [self] in run() }
    thread.name = name
    thread.stackSize = 1 << 20
    thread.start()
  }

  deinit {
    pthread_cond_destroy(condition)
    condition.deinitialize(count: 1)
    condition.deallocate()
    pthread_mutex_destroy(mutex)
    mutex.deinitialize(count: 1)
    mutex.deallocate()
  }

  func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    pthread_mutex_lock(mutex)
    jobs.append(job)
    queued.add(1, ordering: .releasing)
    let wake = isWaiting
    pthread_mutex_unlock(mutex)
    if wake { pthread_cond_signal(condition) }
  }

  func asUnownedSerialExecutor() -> UnownedSerialExecutor {
    UnownedSerialExecutor(ordinary: self)
  }

  /// Lets the thread exit once it has run every job enqueued so far.
  func shutdown() {
    pthread_mutex_lock(mutex)
    isShutDown = true
    let wake = isWaiting
    pthread_mutex_unlock(mutex)
    if wake { pthread_cond_signal(condition) }
  }

  /// Whether the caller runs on this executor's thread (for assertions).
  var isCurrent: Bool {
    pthread_mutex_lock(mutex)
    defer { pthread_mutex_unlock(mutex) }
    guard let threadID else { return false }
    return pthread_equal(threadID, pthread_self()) != 0
  }

  /// Spins for a few microseconds while no job is queued before the thread parks.
  ///
  /// A caller that awaits the layer usually sends the next request within microseconds of the
  /// previous answer (a loop, a chain's next lookup). Parking and waking a thread costs a system
  /// call on each side, several microseconds, more than a SQLite lookup in a warm page cache; a
  /// short spin turns that into a cache-line handoff. The spin is bounded, so an idle layer
  /// costs nothing.
  private func spinForWork() {
    let clock = ContinuousClock()
    let deadline = clock.now.advanced(by: Self.spinDuration)
    var checks = 0
    while queued.load(ordering: .acquiring) == 0 {
      checks += 1
      if checks & 63 == 0, clock.now >= deadline { return }
    }
  }

  static let spinDuration = Duration.microseconds(50)

  private func run() {
    pthread_mutex_lock(mutex)
    threadID = pthread_self()
    pthread_mutex_unlock(mutex)
    var batch: [UnownedJob] = []
    batch.reserveCapacity(64)
    while true {
      spinForWork()
      pthread_mutex_lock(mutex)
      while jobs.isEmpty && !isShutDown {
        isWaiting = true
        pthread_cond_wait(condition, mutex)
        isWaiting = false
      }
      if jobs.isEmpty && isShutDown {
        pthread_mutex_unlock(mutex)
        return
      }
      swap(&batch, &jobs)
      queued.subtract(batch.count, ordering: .relaxed)
      pthread_mutex_unlock(mutex)
      let executor = asUnownedSerialExecutor()
      for job in batch { job.runSynchronously(on: executor) }
      batch.removeAll(keepingCapacity: true)
    }
  }
}
