import AsyncCache
import Synchronization

// The layer's counters and the namespace's size on disk.
extension SQLiteLayer {
  /// Counters since the layer was opened.
  public struct Statistics: Sendable, Hashable {
    /// Reads that found a value.
    public var hits = 0
    /// Reads that found nothing, an expired row, or a damaged one.
    public var misses = 0
    /// Reads of the database answered on the caller's thread, from pages in memory, with no
    /// thread crossed (Linux; see ``SQLiteLayer/entry(for:)``). The others went to the layer's
    /// thread: a page had to come from the device, or the row had to be deleted.
    public var readsInPlace = 0
    /// Rows written (inserted, replaced or deleted) by committed transactions.
    public var rowsWritten = 0
    /// Committed transactions.
    public var transactions = 0
    /// Rows evicted to stay within the size or count limit.
    public var evictions = 0
    /// Expired rows deleted, lazily or by ``SQLiteLayer/removeExpired()``.
    public var expiredRemoved = 0
    /// Rows that failed their header or checksum check, or did not decode.
    public var damagedEntries = 0
    /// Transactions that failed (their writes stayed pending).
    public var failedWrites = 0
    /// Databases emptied in place because SQLite reported them corrupt.
    public var databaseReplacements = 0
    /// Writes waiting for their transaction.
    public var pendingWrites = 0
  }

  /// Counters since the layer was opened.
  public var statistics: Statistics {
    var snapshot = counters
    snapshot.hits = readCounts.hits.load(ordering: .relaxed)
    snapshot.misses = readCounts.misses.load(ordering: .relaxed)
    snapshot.readsInPlace = readCounts.inPlace.load(ordering: .relaxed)
    snapshot.pendingWrites = pending.withLock { $0.writes.count }
    return snapshot
  }

  /// The bytes and rows the namespace holds on disk (pending writes not included).
  public struct Usage: Sendable, Hashable {
    /// Bytes of keys, headers and values.
    public var bytes: Int
    /// Rows.
    public var count: Int

    /// Creates a usage figure.
    public init(bytes: Int, count: Int) {
      self.bytes = bytes
      self.count = count
    }
  }

  /// The bytes and rows the namespace holds on disk, from the running totals kept with every
  /// write. O(1).
  public var usage: Usage {
    get throws {
      do {
        let (bytes, count) = try openStore().usage()
        return Usage(bytes: Int(clamping: bytes), count: Int(clamping: count))
      } catch let error as SQLiteError {
        throw PersistenceError.sqlite(error, while: "reading the namespace's size")
      }
    }
  }
}

/// The read counters of a layer, updated from any thread.
final class ReadCounts: Sendable {
  let hits = Atomic<Int>(0)
  let misses = Atomic<Int>(0)
  /// Reads answered on the caller's thread (see `SQLiteReaders`).
  let inPlace = Atomic<Int>(0)
}
