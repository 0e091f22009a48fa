import Synchronization

#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A serial executor with a thread of its own, off Swift's cooperative thread pool, so that its
/// jobs may block on file or database I/O.
///
/// Give an actor that does blocking I/O one of these as its executor; its methods then run on
/// the thread and may call POSIX or SQLite synchronously, without starving the cooperative pool:
///
/// ```swift
/// actor Store {
///   private let executor: BlockingExecutor
///   nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }
///   init() throws { executor = try BlockingExecutor(label: "Store") }
/// }
/// ```
///
/// A call into such an actor from a task on the cooperative pool costs two thread hand-offs,
/// there and back. Parking and waking a thread costs a system call on each side, several
/// microseconds, so the thread spins for up to ``spinDuration`` after its queue runs dry before
/// it parks: a caller that sends its next request within that time (a loop, the next lookup of
/// a chain) finds it awake. The thread exits when the executor is deinitialized, after the jobs
/// already queued.
package final class BlockingExecutor: SerialExecutor {
  /// How long the thread spins for more work before it parks.
  package static let spinDuration = Duration.microseconds(50)

  private let core: Core

  /// Starts an executor whose thread is named `label`.
  ///
  /// - Throws: ``PersistenceError/Code/ioFailure`` when the system refuses another thread.
  package init(label: String) throws {
    core = Core()
    let core = self.core
    let thread = DetachedThread(label: label) { core.run() }
    let result = thread.start()
    guard result == 0 else {
      throw PersistenceError(
        code: .ioFailure, message: "cannot start the thread \(label): pthread_create failed with error \(result)")
    }
  }

  deinit {
    core.shutDown()
  }

  package func enqueue(_ job: consuming ExecutorJob) {
    let job = UnownedJob(job)
    let executor = asUnownedSerialExecutor()
    core.enqueue { job.runSynchronously(on: executor) }
  }

  package func asUnownedSerialExecutor() -> UnownedSerialExecutor {
    UnownedSerialExecutor(ordinary: self)
  }

  /// Whether the caller runs on this executor's thread.
  package var isCurrentThread: Bool { core.isCurrentThread }

  /// Stops the process unless the caller runs on this executor's thread.
  package func checkIsolated() {
    precondition(core.isCurrentThread, "expected to run on the executor's thread")
  }

  /// Runs `body` on this executor's thread and returns its result, for code that is not an
  /// actor on this executor. The caller suspends; no thread of the cooperative pool waits.
  package func run<Result: Sendable>(_ body: @escaping @Sendable () throws -> Result) async throws -> Result {
    try await withCheckedThrowingContinuation { continuation in
      core.enqueue { continuation.resume(with: Swift.Result(catching: body)) }
    }
  }

  /// Runs `body` on this executor's thread after the jobs already queued, without waiting for
  /// it: no task is created and no thread of the cooperative pool is involved, so the work is
  /// queued even while callers keep every thread of the pool busy. Safe from any context.
  ///
  /// An actor on this executor may run its isolated code from `body` with `assumeIsolated`.
  package func execute(_ body: @escaping @Sendable () -> Void) {
    core.enqueue(body)
  }

  /// Whether jobs are queued and not yet started. A hint (it may change at once) for work that
  /// is cheaper when the jobs that follow share it.
  package var hasQueuedJobs: Bool { core.hasQueuedJobs }

  /// Whether the calling thread is the thread of some `BlockingExecutor` (tests assert that
  /// blocking I/O happens only there).
  package static var isCurrent: Bool {
    pthread_getspecific(Core.marker) != nil
  }
}

extension BlockingExecutor {
  /// The queue and the thread's loop. The thread keeps the core, not the executor, alive, so
  /// that dropping the executor ends the thread.
  //
  // `jobs`, `isShutDown`, `isWaiting` and `threadID` are only touched with `mutex` held, and
  // `condition` is only waited on with it held; `queued` is an atomic. The pointers are
  // allocated in `init` and freed in `deinit`, after the thread (which retains the core) has
  // returned from `run()`.
  // SAFETY: all mutable state is guarded by `mutex` or atomic, as described above.
  fileprivate final class Core: @unchecked Sendable {
    /// A key whose value is non-nil on the threads of blocking executors.
    static let marker: pthread_key_t = {
      var key = pthread_key_t()
      let result = pthread_key_create(&key, nil)
      precondition(result == 0, "pthread_key_create failed with \(result)")
      return key
    }()

    private let mutex: UnsafeMutablePointer<pthread_mutex_t>
    private let condition: UnsafeMutablePointer<pthread_cond_t>
    private var jobs: [() -> Void] = []
    private var isWaiting = false
    private var isShutDown = false
    private var threadID: pthread_t?
    /// Jobs enqueued and not yet started; read without the lock.
    private let queued = Atomic<Int>(0)

    init() {
      mutex = .allocate(capacity: 1)
      mutex.initialize(to: pthread_mutex_t())
      pthread_mutex_init(mutex, nil)
      condition = .allocate(capacity: 1)
      condition.initialize(to: pthread_cond_t())
      pthread_cond_init(condition, nil)
    }

    deinit {
      pthread_cond_destroy(condition)
      condition.deinitialize(count: 1)
      condition.deallocate()
      pthread_mutex_destroy(mutex)
      mutex.deinitialize(count: 1)
      mutex.deallocate()
    }

    func enqueue(_ job: @escaping () -> Void) {
      pthread_mutex_lock(mutex)
      jobs.append(job)
      queued.add(1, ordering: .releasing)
      let wake = isWaiting
      pthread_mutex_unlock(mutex)
      if wake { pthread_cond_signal(condition) }
    }

    func shutDown() {
      pthread_mutex_lock(mutex)
      isShutDown = true
      let wake = isWaiting
      pthread_mutex_unlock(mutex)
      if wake { pthread_cond_signal(condition) }
    }

    var hasQueuedJobs: Bool { queued.load(ordering: .relaxed) > 0 }

    var isCurrentThread: Bool {
      pthread_mutex_lock(mutex)
      defer { pthread_mutex_unlock(mutex) }
      guard let threadID else { return false }
      return pthread_equal(threadID, pthread_self()) != 0
    }

    func run() {
      pthread_setspecific(Self.marker, UnsafeRawPointer(bitPattern: 1))
      pthread_mutex_lock(mutex)
      threadID = pthread_self()
      pthread_mutex_unlock(mutex)
      var batch: [() -> Void] = []
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
        pthread_mutex_unlock(mutex)
        for job in batch {
          queued.subtract(1, ordering: .relaxed)
          job()
        }
        batch.removeAll(keepingCapacity: true)
      }
    }

    /// Spins for up to ``BlockingExecutor/spinDuration`` while no job is queued.
    private func spinForWork() {
      let clock = ContinuousClock()
      let deadline = clock.now.advanced(by: BlockingExecutor.spinDuration)
      var checks = 0
      while queued.load(ordering: .acquiring) == 0 {
        checks &+= 1
        if checks & 63 == 0, clock.now >= deadline { return }
      }
    }
  }
}
