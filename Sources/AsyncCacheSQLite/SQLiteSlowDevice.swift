import CAsyncCacheSQLiteVFS
import Foundation

/// A test seam: reads of a database's files wait, as on a slow or network device, until they
/// are released. Only the layer's connections (which use the layer's VFS) are held.
///
/// A read on a caller's thread (see `SQLiteReaders`) that meets a held file fails at once as one
/// that would wait, and goes to the layer's thread, where it waits.
package enum SQLiteSlowDevice {
  /// Holds the reads of files whose path starts with `path` (a database and its WAL, for its
  /// path); `false` when 16 paths are held already.
  package static func holdReads(of path: String) -> Bool {
    asynccache_sqlite_hold_reads(path) != 0
  }

  /// Lets the reads held for `path` go, and reads of its files run from now on.
  package static func releaseReads(of path: String) {
    asynccache_sqlite_release_reads(path)
  }

  /// How many reads of files under `path` wait now.
  package static func heldReads(of path: String) -> Int {
    Int(asynccache_sqlite_held_reads(path))
  }

  /// Waits until `count` reads of files under `path` wait, or `timeout` passes; returns whether
  /// they wait. The wait blocks a thread of its own, not a cooperative one.
  package static func waitForHeldReads(of path: String, count: Int, timeout: Duration) async -> Bool {
    let milliseconds = Int32(
      clamping: timeout.components.seconds * 1_000 + timeout.components.attoseconds / 1_000_000_000_000_000)
    return await withCheckedContinuation { continuation in
      Thread.detachNewThread {
        let waiting = asynccache_sqlite_wait_for_held_reads(path, Int32(clamping: count), milliseconds) != 0
        continuation.resume(returning: waiting)
      }
    }
  }
}
