import AsyncCache
import Foundation
import Synchronization

/// Writes that callers made and no transaction has committed yet (write-behind).
///
/// Reads consult this first, so a value inserted is readable at once. The last write for a key
/// wins; ``clearStamp`` records a `removeAll()` that comes before every write in ``writes``.
///
/// A batch taken for a transaction stays readable (``inFlight``) until it has committed, or is
/// put back under newer writes if it failed: a reader on another connection (a caller's thread,
/// see `SQLiteReaders`) never falls between the pending writes and the database.
///
/// Every write carries a stamp from ``WriteStamps``. The database keeps the stamp of the write
/// that produced each row, and a write only replaces or deletes rows with older stamps, so a
/// batch that is retried after other connections wrote can never bring back an older value.
///
/// Not generic: the layer's values are kept type-erased in ``Row``, so that the hot paths (an
/// insert under the lock, a batch taken by the writer) run specialized code that moves one
/// reference per write, not generic copies of the value and its row.
struct PendingWrites: Sendable {
  /// A value waiting for its transaction, with what its row needs. Immutable, so one reference
  /// is shared by the writer and by readers of pending values.
  ///
  /// It keeps the encoded value as encoded, not a copy of it behind its header: the writer
  /// assembles the row's value column (see `SQLiteRecord`) in a buffer it reuses, so an insert
  /// allocates no row of its own (for `Data` values, it copies no bytes at all).
  final class Row: Sendable {
    /// The value as inserted, for readers of the pending write (cast back to the layer's
    /// `Value`, the only type a layer stores here).
    let value: any Sendable
    /// The encoded value.
    let payload: Data
    /// The entry's metadata, for readers of the pending write.
    let metadata: EntryMetadata
    /// Its stored form (empty for none).
    let encodedMetadata: [UInt8]
    /// The checksum of the row (`SQLiteRecord.checksum`), computed by the inserting caller.
    let checksum: UInt64
    /// The bytes the row counts against the size limit.
    let size: Int
    /// Expiry, nanoseconds since 1970.
    let expiresAt: Int64?

    init(
      value: any Sendable, payload: Data, metadata: EntryMetadata, encodedMetadata: [UInt8], checksum: UInt64,
      size: Int, expiresAt: Int64?
    ) {
      self.value = value
      self.payload = payload
      self.metadata = metadata
      self.encodedMetadata = encodedMetadata
      self.checksum = checksum
      self.size = size
      self.expiresAt = expiresAt
    }

    /// The length of the row's value column: header, metadata and encoded value.
    var count: Int { SQLiteRecord.headerSize + encodedMetadata.count + payload.count }
  }

  enum Write: Sendable {
    /// `stamp` orders the write (``WriteStamps``); `accessedAt` is its time on the layer's
    /// clock, for the least-recently-used order.
    case upsert(Row, stamp: Int64, accessedAt: Int64)
    case delete(stamp: Int64)
  }

  var writes: [String: Write] = [:]
  /// The stamp of a pending `removeAll()`, or `nil`.
  var clearStamp: Int64?
  /// The batch a transaction is writing: readable until it commits.
  var inFlight: (clearStamp: Int64?, writes: [String: Write])?
  /// Access times to record, by key, for the least-recently-used order: found by reads on any
  /// thread, written with the next batch.
  var touches: [[UInt8]: Int64] = [:]
  /// Bytes of blobs waiting to be written.
  var bytes = 0
  /// Whether a background write (or a retry of a failed one) is already on its way.
  var isFlushScheduled = false
  /// Set by `close()`: later writes are refused.
  var isClosed = false
  /// Set when the database could only be opened read-only: writes are refused.
  var readOnlyReason: String?
  /// The last access time handed out on the layer's clock, made strictly increasing so that
  /// the least-recently-used order is exact even while a manual clock stands still.
  var lastAccess: Int64 = .min

  mutating func accessTime(now: Int64) -> Int64 {
    lastAccess = lastAccess == .max ? .max : Swift.max(now, lastAccess + 1)
    return lastAccess
  }

  func checkWritable(closed: @autoclosure () -> PersistenceError) throws(PersistenceError) {
    guard !isClosed else { throw closed() }
    if let readOnlyReason { throw PersistenceError(code: .readOnly, message: "cannot write: \(readOnlyReason)") }
  }

  var isEmpty: Bool { writes.isEmpty && clearStamp == nil }

  /// What a read of `key` finds here: a write, a `removeAll()` that hides what the database
  /// holds, or nothing (the database answers).
  func lookup(_ key: String) -> Lookup {
    if let write = writes[key] { return .write(write) }
    if clearStamp != nil { return .cleared }
    guard let inFlight else { return .none }
    if let write = inFlight.writes[key] { return .write(write) }
    return inFlight.clearStamp != nil ? .cleared : .none
  }

  enum Lookup: Sendable {
    case write(Write)
    case cleared
    case none
  }

  /// Records an access to `key` (its UTF-8 bytes) at `now`; returns how many accesses wait.
  mutating func touch(_ key: [UInt8], now: Int64) -> Int {
    touches[key] = accessTime(now: now)
    return touches.count
  }

  mutating func put(_ write: Write, for key: String) {
    if case .upsert(let row, _, _) = write { bytes += row.count }
    if case .upsert(let replaced, _, _)? = writes.updateValue(write, forKey: key) { bytes -= replaced.count }
  }

  mutating func removeAll(stamp: Int64) {
    writes.removeAll()
    bytes = 0
    clearStamp = stamp
  }

  /// Marks a background write as scheduled; `true` when the caller must schedule it.
  mutating func markFlushScheduled() -> Bool {
    guard !isFlushScheduled else { return false }
    isFlushScheduled = true
    return true
  }

  /// Takes everything pending, for one transaction, and keeps it readable as ``inFlight`` until
  /// ``finish(committed:)``.
  mutating func take() -> (clearStamp: Int64?, writes: [String: Write]) {
    precondition(inFlight == nil, "one batch at a time")
    let taken = (clearStamp, writes)
    inFlight = taken
    // The next batch is likely about as large: its table is reserved now, not grown (and
    // rehashed) an insert at a time while writers hold the lock.
    writes = Dictionary(minimumCapacity: Swift.min(taken.1.count, 1 << 14))
    clearStamp = nil
    bytes = 0
    return taken
  }

  /// Ends the batch in flight: gone once committed (the database has it), put back under newer
  /// writes if its transaction failed.
  mutating func finish(committed: Bool) {
    guard let batch = inFlight else { return }
    inFlight = nil
    if !committed { restore(clearStamp: batch.clearStamp, writes: batch.writes) }
  }

  /// Puts back writes whose transaction failed, under any newer ones.
  private mutating func restore(clearStamp restoredClear: Int64?, writes restored: [String: Write]) {
    // A newer removeAll() supersedes everything restored.
    guard clearStamp == nil else { return }
    clearStamp = restoredClear
    for (key, write) in restored where writes[key] == nil {
      put(write, for: key)
    }
  }
}

/// Stamps for writes and reads: nanoseconds of the layer's clock, made strictly increasing
/// across every layer of the process, so that two writes are never stamped alike, even while a
/// manual clock stands still. Processes sharing a file compare stamps by wall-clock time.
enum WriteStamps {
  private static let last = Atomic<Int64>(.min)

  /// A stamp later than every stamp handed out before, and no earlier than `now`.
  static func next(now: Int64) -> Int64 {
    var previous = last.load(ordering: .relaxed)
    while true {
      let stamp = previous == .max ? .max : Swift.max(now, previous + 1)
      let (exchanged, original) = last.compareExchange(
        expected: previous, desired: stamp, ordering: .relaxed)
      if exchanged { return stamp }
      previous = original
    }
  }
}
