import AsyncCache
import Foundation

/// Writes that callers made and no transaction has committed yet (write-behind).
///
/// Reads consult this first, so a value inserted is readable at once. The last write for a key
/// wins; ``clearAll`` records a `removeAll()` that comes before every write in ``writes``.
struct PendingWrites<Value: Sendable>: Sendable {
  enum Write: Sendable {
    case upsert(Value, blob: Data, size: Int, expiresAt: Int64?, stamp: Int64)
    case delete
  }

  var writes: [String: Write] = [:]
  var clearAll = false
  /// Bytes of blobs waiting to be written.
  var bytes = 0
  /// Whether a background write is already on its way.
  var isFlushScheduled = false
  /// The last access stamp handed out: access times are nanoseconds, made strictly increasing
  /// so that the LRU order is exact even when the clock stands still.
  var lastStamp: Int64 = .min
  /// Set by `close()`: later writes are refused.
  var isClosed = false
  /// Set when the database could only be opened read-only: writes are refused.
  var readOnlyReason: String?

  func checkWritable(closed: @autoclosure () -> PersistenceError) throws(PersistenceError) {
    guard !isClosed else { throw closed() }
    if let readOnlyReason { throw PersistenceError(code: .readOnly, message: "cannot write: \(readOnlyReason)") }
  }

  var isEmpty: Bool { writes.isEmpty && !clearAll }

  mutating func stamp(now: Int64) -> Int64 {
    lastStamp = lastStamp == .max ? .max : Swift.max(now, lastStamp + 1)
    return lastStamp
  }

  mutating func put(_ write: Write, for key: String) {
    if case .upsert(_, let blob, _, _, _) = writes[key] { bytes -= blob.count }
    if case .upsert(_, let blob, _, _, _) = write { bytes += blob.count }
    writes[key] = write
  }

  mutating func removeAll() {
    writes.removeAll()
    bytes = 0
    clearAll = true
  }

  /// Takes everything pending, for one transaction.
  mutating func take() -> (clearAll: Bool, writes: [String: Write]) {
    defer {
      writes = [:]
      clearAll = false
      bytes = 0
    }
    return (clearAll, writes)
  }

  /// Puts back writes whose transaction failed, under any newer ones.
  mutating func restore(clearAll restoredClear: Bool, writes restored: [String: Write]) {
    // A newer removeAll() supersedes everything restored.
    guard !clearAll else { return }
    clearAll = restoredClear
    for (key, write) in restored where writes[key] == nil {
      put(write, for: key)
    }
  }
}
