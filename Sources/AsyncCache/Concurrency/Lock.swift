#if canImport(Darwin)
  public import Darwin
#elseif os(Linux) || os(Android)
  import CAsyncCacheShims
  public import Synchronization
#elseif canImport(Glibc)
  public import Glibc
#elseif canImport(Musl)
  public import Musl
#endif

// Why not `Synchronization.Mutex`: on Linux its contended path parks threads with futex calls
// inside the uninstrumented `libswiftSynchronization.so`, so ThreadSanitizer misses the
// happens-before edge and reports races on state that the lock does protect (reproduced with a
// bare `Mutex<[Int]>` under contention, Swift 6.3.1).
//
// Why not `pthread_mutex_t` on Linux (what this file used until `memory.hit.1task` asked for
// every nanosecond of a hit): each call goes through the C library and checks the mutex's kind,
// about 9 ns per lock and unlock more than `Mutex` on a 2-core x86_64 VM, a fifth of a
// dictionary lookup. The futex lock below is `Mutex`'s design written in this module: its
// uncontended path is one inlined compare-and-exchange to lock and one exchange to unlock, and
// its atomics are compiled here, where ThreadSanitizer instruments them (the release of
// `unlock` and the acquire of `lock` are the happens-before edge; the futex calls only sleep
// and wake). Darwin keeps `os_unfair_lock`, which donates priority to the owner.

#if canImport(Darwin)
  /// The platform's lock: `os_unfair_lock`.
  @usableFromInline typealias LockPrimitive = os_unfair_lock
#elseif os(Linux) || os(Android)
  /// A futex lock: the word is 0 (unlocked), 1 (locked) or 2 (locked, and a thread may sleep on
  /// it), as in Ulrich Drepper's "Futexes Are Tricky" (mutex 3) and Rust's standard library.
  @usableFromInline typealias LockPrimitive = Atomic<UInt32>
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
    #elseif os(Linux) || os(Android)
      initialize(to: Atomic(0))
    #else
      initialize(to: pthread_mutex_t())
      let error = pthread_mutex_init(self, nil)
      precondition(error == 0, "pthread_mutex_init failed with \(error)")
    #endif
  }

  @usableFromInline
  func deinitializeLock() {
    #if !canImport(Darwin) && !os(Linux) && !os(Android)
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
    #elseif os(Linux) || os(Android)
      if pointee.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged { return }
      lockContended()
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
    #elseif os(Linux) || os(Android)
      // 2: someone may sleep on the word; wake one, which takes the lock as 2 again so that its
      // own unlock wakes the next.
      if pointee.exchange(0, ordering: .releasing) == 2 { wakeOne() }
    #else
      let error = pthread_mutex_unlock(self)
      assert(error == 0, "pthread_mutex_unlock failed with \(error)")
    #endif
  }

  #if os(Linux) || os(Android)
    /// How many times a contended `lock()` reads the word before it sleeps: our critical
    /// sections last tens of nanoseconds, so an owner on another core usually lets go first.
    @usableFromInline static var spinLimit: Int { 100 }

    /// The word's address, for the futex calls.
    @inlinable
    var futexWord: UnsafeMutablePointer<UInt32> {
      UnsafeMutableRawPointer(self).assumingMemoryBound(to: UInt32.self)
    }

    /// Spins while the lock is held without sleepers; returns the word as it last saw it.
    @usableFromInline
    func spinWhileLocked() -> UInt32 {
      var state = pointee.load(ordering: .relaxed)
      var spins = Self.spinLimit
      while state == 1 && spins > 0 {
        async_cache_spin_hint()
        state = pointee.load(ordering: .relaxed)
        spins -= 1
      }
      return state
    }

    /// `lock()` when the first attempt found the lock held: spin a little, then sleep on the
    /// futex with the word at 2, so that the owner's `unlock()` wakes a sleeper.
    @usableFromInline
    @inline(never)
    func lockContended() {
      var state = spinWhileLocked()
      if state == 0, pointee.compareExchange(expected: 0, desired: 1, ordering: .acquiring).exchanged { return }
      while true {
        // Taking the lock as 2 may cost its next unlock a needless wake, never a lost one.
        if state != 2, pointee.exchange(2, ordering: .acquiring) == 0 { return }
        async_cache_futex_wait(futexWord, 2)
        state = spinWhileLocked()
      }
    }

    @usableFromInline
    @inline(never)
    func wakeOne() {
      async_cache_futex_wake_one(futexWord)
    }
  #endif
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
  // Unchecked: the lock already makes each access exclusive, and the runtime's check of a class
  // property's access (two calls and a thread-local set per `withLock`) was a fifth of the time
  // of a short critical section.
  @exclusivity(unchecked) @usableFromInline var state: State

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
