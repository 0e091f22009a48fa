import AsyncCache
import CAsyncCacheSQLiteVFS
import Foundation

/// Read-only connections that answer a read on the caller's thread when the kernel's page cache
/// holds every page it needs.
///
/// A read on the layer's own thread crosses threads twice, there and back, and on a machine with
/// few cores each crossing costs what the scheduler decides: a lone read paid four times what
/// SQLite needs. A reader is a read-only connection beside the layer's own (WAL lets it read
/// while the layer writes), opened through the layer's VFS (`CAsyncCacheSQLiteVFS`). While a
/// caller's thread uses it, that VFS answers reads only from the page cache (`preadv2` with
/// `RWF_NOWAIT`): a read that would wait for the device fails at once, and the layer sends it to
/// its own thread. So a read that must wait for a disk never holds a thread of Swift's
/// cooperative pool, and one that need not wait costs what SQLite costs.
///
/// A thread uses one reader at a time, and returns it before it suspends. Readers are opened on
/// the layer's thread (opening reads the file and may wait), one at a time, when a read finds
/// none idle, up to ``limit``. Only on Linux (``isSupported``); elsewhere every read goes to the
/// layer's thread.
package final class SQLiteReaders: Sendable {
  /// One reader: its connection and its prepared lookup.
  //
  // A reader is idle in the pool (reached only under the pool's lock), checked out by the one
  // thread that took it (which returns it before it suspends, see
  // `SQLiteLayer.lookUpInPlace`), retired (under the lock), or being opened or closed on the
  // layer's thread, which alone holds it then.
  // SAFETY: so one thread at a time uses a reader's connection, as SQLITE_OPEN_NOMUTEX requires.
  final class Reader: @unchecked Sendable {
    let store: SQLiteStore
    /// The pool's generation when it was opened: readers of an older one (before the database
    /// was emptied after damage) are closed, not reused.
    fileprivate let generation: Int

    fileprivate init(store: SQLiteStore, generation: Int) {
      self.store = store
      self.generation = generation
    }

    /// Closes the connection. On the layer's thread.
    func close() { store.connection.close() }
  }

  private struct State: Sendable {
    var idle: [Reader] = []
    /// Readers of the current generation, idle or checked out.
    var count = 0
    var checkedOut = 0
    var isOpening = false
    /// Set when a reader failed to open (read-only media, a file SQLite refuses read-only):
    /// every read goes to the layer's thread.
    var isDisabled = !SQLiteReaders.isSupported
    var isClosed = false
    var generation = 0
    /// Readers to close on the layer's thread: returned after their generation ended or the
    /// pool closed.
    var retired: [Reader] = []

    /// Takes every reader not checked out, to close; the current generation has none left.
    mutating func emptied() -> [Reader] {
      defer {
        idle.removeAll()
        retired.removeAll()
        count = 0
      }
      return idle + retired
    }
  }

  /// Whether this platform can read without waiting for the device (Linux's `RWF_NOWAIT`).
  package static let isSupported = asynccache_sqlite_can_read_without_waiting() != 0

  /// The most readers open at once: one for each thread that may read at the same time, those
  /// of the cooperative pool (one per core).
  let limit: Int

  private let state = Locked(State())

  init(limit: Int = ProcessInfo.processInfo.activeProcessorCount) {
    self.limit = Swift.max(1, limit)
  }

  /// An idle reader for the calling thread, to hand back with ``checkIn(_:)`` before it
  /// suspends; `nil` when none is idle. `wantsAnother` is `true` when the caller should have the
  /// layer open one (at most one caller is told so at a time).
  func checkOut() -> (reader: Reader?, wantsAnother: Bool) {
    state.withLock { state in
      if let reader = state.idle.popLast() {
        state.checkedOut += 1
        return (reader, false)
      }
      guard !state.isDisabled, !state.isClosed, !state.isOpening, state.count < limit else { return (nil, false) }
      state.isOpening = true
      return (nil, true)
    }
  }

  /// Hands back a reader taken with ``checkOut()``; returns `true` when it was retired instead
  /// (its generation ended, or the pool closed or was turned off), for the caller to have the
  /// layer's thread close it.
  func checkIn(_ reader: Reader) -> Bool {
    state.withLock { state in
      state.checkedOut -= 1
      guard !state.isClosed, !state.isDisabled, reader.generation == state.generation else {
        state.retired.append(reader)
        return true
      }
      state.idle.append(reader)
      return false
    }
  }

  /// Turns reads on callers' threads off for good (the file system or the kernel cannot read
  /// without waiting): returns the readers to close; those checked out are retired when they
  /// come back.
  func turnOff() -> [Reader] {
    state.withLock { state in
      state.isDisabled = true
      return state.emptied()
    }
  }

  /// The generation a reader opened now belongs to.
  var generation: Int { state.withLock { $0.generation } }

  /// Adds a reader opened on the layer's thread for `generation`; returns it when the pool can
  /// no longer take it (closed, or a new generation began), for the caller to close.
  func add(_ store: SQLiteStore, generation: Int) -> Reader? {
    let reader = Reader(store: store, generation: generation)
    return state.withLock { state in
      state.isOpening = false
      guard !state.isClosed, !state.isDisabled, generation == state.generation else { return reader }
      state.count += 1
      state.idle.append(reader)
      return nil
    }
  }

  /// Records that a reader was not opened; with `disable`, reads go to the layer's thread from
  /// now on (read-only media, a network file system, a connection SQLite refused).
  func openingFailed(disable: Bool) {
    state.withLock { state in
      state.isOpening = false
      if disable { state.isDisabled = true }
    }
  }

  /// Ends the current generation (the database was emptied in place): returns the readers to
  /// close now; those checked out are retired when they come back. Reads may open new ones.
  func retireAll() -> [Reader] {
    state.withLock { state in
      state.generation += 1
      return state.emptied()
    }
  }

  /// The readers retired so far, to close on the layer's thread.
  func takeRetired() -> [Reader] {
    state.withLock { state in
      defer { state.retired.removeAll() }
      return state.retired
    }
  }

  /// Closes the pool: no reader is checked out from now on. Returns the readers to close once
  /// ``checkedOut`` is zero (see `SQLiteLayer.closeReaders()`).
  func close() -> [Reader] {
    state.withLock { state in
      state.isClosed = true
      return state.emptied()
    }
  }

  /// Readers checked out now.
  var checkedOut: Int { state.withLock { $0.checkedOut } }
}
