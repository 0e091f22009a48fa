#if canImport(Darwin)
  public import Darwin
#elseif canImport(Glibc)
  public import Glibc
#elseif canImport(Musl)
  public import Musl
#elseif canImport(Android)
  public import Android
#endif

// Why not `Synchronization.Mutex`: on Linux its contended path parks threads with futex calls
// inside the uninstrumented `libswiftSynchronization.so`, so ThreadSanitizer misses the
// happens-before edge and reports races on state that the lock does protect (reproduced with a
// bare `Mutex<[Int]>` under contention, Swift 6.3.1). The platform locks below are intercepted by
// the sanitizers. Uncontended they cost one atomic to lock and one to unlock, plus a call into
// the C library. On glibc the mutex is adaptive: it spins briefly before it sleeps, as
// `Mutex` does, because our critical sections are a few dozen nanoseconds long.

#if canImport(Darwin)
  /// The platform's lock: `os_unfair_lock`.
  @usableFromInline typealias LockPrimitive = os_unfair_lock
#else
  /// The platform's lock: a default (non-recursive) `pthread_mutex_t`.
  @usableFromInline typealias LockPrimitive = pthread_mutex_t
#endif

extension UnsafeMutablePointer where Pointee == LockPrimitive {
  /// Initializes the lock at this address, which must not move until ``deinitializeLock()``.
  @usableFromInline
  func initializeLock() {
    #if canImport(Darwin)
      initialize(to: os_unfair_lock())
    #else
      initialize(to: pthread_mutex_t())
      var attributes = pthread_mutexattr_t()
      pthread_mutexattr_init(&attributes)
      defer { pthread_mutexattr_destroy(&attributes) }
      #if canImport(Glibc)
        pthread_mutexattr_settype(&attributes, Int32(PTHREAD_MUTEX_ADAPTIVE_NP))
      #endif
      let error = pthread_mutex_init(self, &attributes)
      precondition(error == 0, "pthread_mutex_init failed with \(error)")
    #endif
  }

  @usableFromInline
  func deinitializeLock() {
    #if !canImport(Darwin)
      let error = pthread_mutex_destroy(self)
      precondition(error == 0, "pthread_mutex_destroy failed with \(error)")
    #endif
    deinitialize(count: 1)
  }

  @inlinable
  @inline(__always)
  func lock() {
    #if canImport(Darwin)
      os_unfair_lock_lock(self)
    #else
      // Only misuse (a destroyed or foreign mutex) can fail; checked in debug builds.
      let error = pthread_mutex_lock(self)
      assert(error == 0, "pthread_mutex_lock failed with \(error)")
    #endif
  }

  @inlinable
  @inline(__always)
  func unlock() {
    #if canImport(Darwin)
      os_unfair_lock_unlock(self)
    #else
      let error = pthread_mutex_unlock(self)
      assert(error == 0, "pthread_mutex_unlock failed with \(error)")
    #endif
  }
}

/// A value protected by a lock; the lock is never held across a suspension (`withLock` takes a
/// synchronous closure).
// SAFETY: `state` is only touched inside `withLock`, under the lock; `State` is Sendable.
@usableFromInline
package final class Locked<State: Sendable>: @unchecked Sendable {
  // `state` is only read or written inside `withLock`, between `lock()` and `unlock()` of
  // `primitive`, which is allocated once and never moves. `State` is `Sendable`, so values moved
  // in or out of the closure may cross threads.
  @usableFromInline let primitive: UnsafeMutablePointer<LockPrimitive>
  @usableFromInline var state: State

  /// Creates a lock protecting `state`.
  package init(_ state: State) {
    self.state = state
    primitive = .allocate(capacity: 1)
    primitive.initializeLock()
  }

  deinit {
    primitive.deinitializeLock()
    primitive.deallocate()
  }

  /// Runs `body` with exclusive access to the state.
  @inlinable
  package func withLock<Result>(_ body: (inout State) throws -> Result) rethrows -> Result {
    primitive.lock()
    defer { primitive.unlock() }
    return try body(&state)
  }
}
