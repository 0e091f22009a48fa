public import AsyncCache
import CAsyncCacheSQLiteVFS
import Foundation
import Synchronization

// Reads: the pending writes first, then the database on the layer's thread; what a read finds
// expired or damaged is queued for deletion with a later batch.
extension SQLiteLayer {
  /// The entry stored for `key`, or `nil` when there is none, it expired, it is dead by tag
  /// (see ``invalidate(tag:at:)``), or its row was damaged (then the row is deleted and
  /// counted).
  ///
  /// Safe from any context. A write still waiting for its transaction is answered on the
  /// caller's thread. So is a row whose pages are all in memory (the kernel's page cache), on
  /// Linux: a read-only connection of the layer's runs the indexed `SELECT` there, and no thread
  /// is crossed. A read that would wait for the device, or finds a row to delete, runs on the
  /// layer's thread instead, where reads queued together share one read transaction: a read
  /// never waits for a disk on a thread of Swift's cooperative pool. The caller decodes the
  /// value.
  ///
  /// - Throws: `PersistenceError` when the key cannot be encoded or SQLite fails (a corrupt
  ///   database is replaced and reads as a miss instead); `PersistenceError.Code.closed` after
  ///   ``close()``.
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    let encoded = try encode(key)
    let now = followedClock.now.nanosecondsSince1970
    var answer = Answer.local(try pendingAnswer(for: encoded))
    if case .local(.none) = answer {
      let inPlace = lookUpInPlace(encoded, now: now)
      if let found = inPlace.answer {
        answer = found
      } else {
        // After this read (not before it, which would make it wait for the opening), and even
        // if it fails: the pool waits for the reader it was promised.
        defer { if inPlace.wantsReader { requestReader() } }
        answer = try await lookUp(encoded, now: now)
      }
    }
    switch answer {
    case .local(.write(.upsert(let row, _, _))):
      if row.expiresAt.map({ $0 <= now }) ?? false || tagInvalidations.kills(row.metadata) {
        readCounts.misses.add(1, ordering: .relaxed)
        return nil
      }
      readCounts.hits.add(1, ordering: .relaxed)
      return CacheEntry(
        pendingValue(row), expiresAt: row.expiresAt.map(CacheInstant.init(nanosecondsSince1970:)),
        metadata: row.metadata)
    case .local, .stored(nil):
      readCounts.misses.add(1, ordering: .relaxed)
      return nil
    case .stored(let found?):
      let value: Value
      do {
        value = try valueCoder.decode(found.payload)
      } catch {
        await discardUndecodable(encoded, found, error: error)
        return nil
      }
      readCounts.hits.add(1, ordering: .relaxed)
      return CacheEntry(
        value, expiresAt: found.expiresAt.map(CacheInstant.init(nanosecondsSince1970:)), metadata: found.metadata)
    }
  }

  /// The value stored for `key`, or `nil`. See ``entry(for:)``.
  public nonisolated func value(for key: Key) async throws -> Value? {
    try await entry(for: key)?.value
  }

  /// A row's payload, checked on the layer's thread.
  private struct Found: Sendable {
    var payload: Data
    var metadata: EntryMetadata
    var expiresAt: Int64?
  }

  /// Where a read found its answer: in the pending writes, or in the database (`nil` for a
  /// miss, an expired row or a damaged one).
  private enum Answer: Sendable {
    case local(Local)
    case stored(Found?)
  }

  private typealias Local = PendingWrites.Lookup

  /// What the pending writes, and the batch being written, say about `encoded`.
  ///
  /// - Throws: `PersistenceError.Code.closed` after ``close()``.
  private nonisolated func pendingAnswer(for encoded: String) throws -> Local {
    try pending.withLock { state in
      guard !state.isClosed else { throw closedError }
      return state.lookup(encoded)
    }
  }

  /// Looks `encoded` up on the caller's thread with one of the layer's readers, if one is idle
  /// and the pages the lookup needs are in memory (see `SQLiteReaders`).
  ///
  /// `answer` is `nil` when the layer's thread must read instead: no reader idle, a page not in
  /// memory, a lock busy, an error (which the layer's thread meets again and reports), or a row
  /// to delete (expired, damaged or dead by tag), which only the layer's thread records.
  /// `wantsReader`: the caller should have the layer open another reader.
  ///
  /// Runs no code that waits: the reader is checked out and back without suspending, and its
  /// reads are answered from memory or fail at once.
  private nonisolated func lookUpInPlace(_ encoded: String, now: Int64) -> (answer: Answer?, wantsReader: Bool) {
    let (taken, wantsReader) = readers.checkOut()
    guard let reader = taken else { return (nil, wantsReader) }
    var encoded = encoded
    asynccache_sqlite_nowait_begin()
    let lookup = encoded.withUTF8 { key in try? reader.store.lookup(UnsafeRawBufferPointer(key), now: now) }
    let failure = asynccache_sqlite_nowait_end()
    let retired = readers.checkIn(reader)
    if failure == 2 {
      // The file system or the kernel cannot read without waiting: every read goes to the
      // layer's thread from now on.
      let closing = readers.turnOff()
      executor.execute { [self] in
        assumeIsolated { layer in
          for reader in closing { reader.close() }
          layer.closeRetiredReaders()
          layer.layerEnvironment.log(
            .info, "this file system or kernel cannot read without waiting; every read goes to the layer's thread")
        }
      }
    } else if retired {
      executor.execute { [self] in assumeIsolated { $0.closeRetiredReaders() } }
    }
    switch lookup {
    case .miss?:
      readCounts.inPlace.add(1, ordering: .relaxed)
      return (.stored(nil), false)
    case .hit(let payload, let metadata, let expiresAt, let accessedAt)? where !tagInvalidations.kills(metadata):
      readCounts.inPlace.add(1, ordering: .relaxed)
      if now.subtractingReportingOverflow(accessedAt).partialValue >= accessResolution {
        let waiting = pending.withLock { $0.touch(Array(encoded.utf8), now: now) }
        if waiting >= configuration.maximumPendingTouches { requestFlush() }
      }
      return (.stored(Found(payload: payload, metadata: metadata, expiresAt: expiresAt)), false)
    case nil, .hit?, .expired?, .damaged?:
      return (nil, false)
    }
  }

  /// Looks `encoded` up in the database. Records the access time of a hit, and queues expired
  /// and damaged rows for deletion with a later batch.
  private func lookUp(_ encoded: String, now: Int64) throws -> Answer {
    guard !isClosed else { throw closedError }
    // Asked again on this thread: a batch taken after the caller looked, and then failed, has
    // put its writes back, and they are newer than the database.
    let local = try pendingAnswer(for: encoded)
    if case .none = local {} else { return .local(local) }
    var encoded = encoded
    let lookup: SQLiteStore.Lookup
    do {
      let store = try openStore()
      // Lookups queued together share a read transaction. It ends with a job queued before its
      // snapshot is taken (by the first lookup), so it only serves reads requested before that
      // snapshot: none of them can miss a write that finished before it was requested.
      if executor.hasQueuedJobs, try store.beginReading() {
        executor.execute { [self] in assumeIsolated { $0.store?.endReading() } }
      }
      do {
        lookup = try encoded.withUTF8 { key throws(SQLiteError) in
          try store.lookup(UnsafeRawBufferPointer(key), now: now)
        }
      } catch {
        store.endReading()
        throw error
      }
    } catch let error as SQLiteError {
      if try replaceIfCorrupt(error) { return .stored(nil) }
      throw PersistenceError.sqlite(error, while: "reading the key \(encoded.prefix(200).debugDescription)")
    }
    switch lookup {
    case .miss:
      return .stored(nil)
    case .expired:
      guard !isReadOnly else { return .stored(nil) }
      expired.append(Array(encoded.utf8))
      requestFlush()
      return .stored(nil)
    case .damaged(let damage, let blob):
      discard(Array(encoded.utf8), blob: blob, key: encoded, reason: "\(damage)")
      return .stored(nil)
    case .hit(let payload, let metadata, let expiresAt, _) where tagInvalidations.kills(metadata):
      // Dead by tag: a miss, and the row is deleted with a later batch if it still holds these
      // bytes (a write since replaced it otherwise).
      guard !isReadOnly else { return .stored(nil) }
      let keyBytes = Array(encoded.utf8)
      let blob = SQLiteRecord.encode(
        key: keyBytes, expiresAt: expiresAt, metadata: (try? metadata.encoded()) ?? [], payload: payload)
      damaged.append((keyBytes, blob))
      requestFlush()
      return .stored(nil)
    case .hit(let payload, let metadata, let expiresAt, let accessedAt):
      if !isReadOnly, now.subtractingReportingOverflow(accessedAt).partialValue >= accessResolution {
        let waiting = pending.withLock { $0.touch(Array(encoded.utf8), now: now) }
        if waiting >= configuration.maximumPendingTouches { requestFlush() }
      }
      return .stored(Found(payload: payload, metadata: metadata, expiresAt: expiresAt))
    }
  }

  /// Records that the row read for `encoded` holds a value that does not decode, so that it is
  /// deleted with a later batch.
  private func discardUndecodable(_ encoded: String, _ found: Found, error: any Error) {
    let keyBytes = Array(encoded.utf8)
    // The metadata read back; it was stored, so it encodes.
    let metadata = (try? found.metadata.encoded()) ?? []
    let blob = SQLiteRecord.encode(
      key: keyBytes, expiresAt: found.expiresAt, metadata: metadata, payload: found.payload)
    discard(keyBytes, blob: blob, key: encoded, reason: "the value does not decode: \(error)")
  }

  private func discard(_ keyBytes: [UInt8], blob: Data, key: String, reason: String) {
    readCounts.misses.add(1, ordering: .relaxed)
    counters.damagedEntries += 1
    record(.rowDiscarded(key: key, reason: reason))
    guard !isReadOnly else { return }
    damaged.append((keyBytes, blob))
    requestFlush()
  }

  /// The value of a pending write: the layer's own `Value`, the only type it stores there.
  private nonisolated func pendingValue(_ row: PendingWrites.Row) -> Value {
    row.value as! Value
  }

  /// Every key stored in this namespace that has not expired, including writes still pending.
  /// Keys that no longer decode (say, written by an older key type) are left out, and so are keys
  /// stored before keys were normalized that are not in NFC, which no lookup finds.
  ///
  /// Runs on the layer's thread. O(n) in the namespace's rows.
  public var keys: [Key] {
    get throws {
      let now = followedClock.now.nanosecondsSince1970
      // No batch is in flight: batches are written on this thread, each within one call.
      let (clearStamp, writes) = pending.withLock { ($0.clearStamp, $0.writes) }
      var encodedKeys = Set<String>()
      if clearStamp == nil {
        let stored: [[UInt8]]
        do {
          stored = try openStore().keys(now: now)
        } catch let error as SQLiteError {
          throw PersistenceError.sqlite(error, while: "listing keys")
        }
        for bytes in stored {
          // A key stored before keys were normalized, not in NFC, is one no lookup finds.
          let encoded = String(decoding: bytes, as: UTF8.self)
          if encoded.isNFC { encodedKeys.insert(encoded) }
        }
      }
      for (key, write) in writes {
        switch write {
        case .upsert(let row, _, _):
          if let expiresAt = row.expiresAt, expiresAt <= now {
            encodedKeys.remove(key)
          } else {
            encodedKeys.insert(key)
          }
        case .delete:
          encodedKeys.remove(key)
        }
      }
      return encodedKeys.compactMap { try? keyEncoding.decode($0) }
    }
  }
}
