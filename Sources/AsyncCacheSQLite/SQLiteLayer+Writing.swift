public import AsyncCache
import Foundation

// Writes: stored in the pending writes at once, written behind in the background, batched in one
// transaction, and retried with a back-off when the batch fails.
extension SQLiteLayer {
  /// Stores `entry` for `key`: readable from this layer at once, written to the database in the
  /// background, batched with other writes in one transaction.
  ///
  /// The entry expires at the earlier of `entry.expiresAt` and the configured time to live. An
  /// already expired entry is not stored (and removes the previous one). Safe from any context;
  /// runs on the caller's thread (encoding and a checksum) and suspends only when more than
  /// ``Configuration-swift.struct/maximumPendingBytes`` wait to be written.
  ///
  /// The entry's metadata (`EntryMetadata`) is stored with its value and read back with it.
  ///
  /// - Throws: `PersistenceError.Code.valueTooLarge` (naming the key and sizes) when the
  ///   encoded value and its metadata are over ``Configuration-swift.struct/maximumEntrySize``
  ///   or the size limit; `PersistenceError.Code.encodingFailed` when the key or value does not
  ///   encode, or the metadata is over one of `EntryMetadata`'s limits (the underlying
  ///   `EntryMetadataError` names which). Nothing is written then. When writes wait on a
  ///   database that keeps failing, the error of the failed write (for example
  ///   `PersistenceError.Code.noSpace`).
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    var encoded = try encode(key)
    let payload: Data
    do {
      payload = try valueCoder.encode(entry.value)
    } catch {
      throw PersistenceError.unencodableValue(key: encoded, layer: "SQLiteLayer", underlying: error)
    }
    let metadata: [UInt8]
    do {
      metadata = try entry.metadata.encoded()
    } catch {
      throw PersistenceError.unstorableMetadata(key: encoded, layer: "SQLiteLayer", error)
    }
    let size = encoded.utf8.count + SQLiteRecord.headerSize + metadata.count + payload.count
    // The metadata counts with the value: both go in the row's value column.
    guard payload.count + metadata.count <= entryLimit else {
      throw PersistenceError.valueTooLarge(
        key: encoded, size: payload.count + metadata.count, limit: entryLimit, layer: "SQLiteLayer")
    }
    guard size <= configuration.sizeLimit else {
      throw PersistenceError.entryOverSizeLimit(
        key: encoded, size: size, limit: configuration.sizeLimit, layer: "SQLiteLayer")
    }
    let now = followedClock.now
    let expiresAt = entry.expiring(noLaterThan: configuration.timeToLive.map { now.advanced(by: $0) }).expiresAt
    // The checksum is computed here, on the caller's thread, not on the layer's.
    let row: PendingWrites.Row?
    if let expiresAt, expiresAt <= now {
      row = nil
    } else {
      let expiry = expiresAt?.nanosecondsSince1970
      let digest = encoded.withUTF8 { key in
        metadata.withUnsafeBytes { metadataBytes in
          payload.withUnsafeBytes {
            SQLiteRecord.checksum(
              key: UnsafeRawBufferPointer(key), expiresAt: expiry, metadata: metadataBytes, payload: $0)
          }
        }
      }
      row = PendingWrites.Row(
        value: entry.value, payload: payload, metadata: entry.metadata, encodedMetadata: metadata, checksum: digest,
        size: size, expiresAt: expiry)
    }
    let nanoseconds = now.nanosecondsSince1970
    let (schedule, overBudget) = try pending.withLock { state in
      try state.checkWritable(closed: closedError)
      // Stamped under the lock, so that the order of stamps is the order of the writes.
      let stamp = WriteStamps.next(now: nanoseconds)
      if let row {
        state.put(.upsert(row, stamp: stamp, accessedAt: state.accessTime(now: nanoseconds)), for: encoded)
      } else {
        state.put(.delete(stamp: stamp), for: encoded)
      }
      return (state.markFlushScheduled(), state.bytes > configuration.maximumPendingBytes)
    }
    if schedule { scheduleFlush() }
    if row == nil, let expiresAt {
      record(
        .expiredOnArrival(key: encoded, expiresAt: expiresAt, now: now),
        level: layerEnvironment.nextExpiredArrivalLevel())
    }
    if overBudget { try await flush() }
  }

  /// Stores `value` for `key`, expiring after `timeToLive` (or per the configuration when
  /// `nil`). See ``insert(_:for:)``.
  public nonisolated func insert(_ value: Value, for key: Key, timeToLive: Duration? = nil) async throws {
    let expiresAt = timeToLive.map { followedClock.now.advanced(by: $0) }
    try await insert(CacheEntry(value, expiresAt: expiresAt), for: key)
  }

  /// Removes the entry for `key`: at once for readers of this layer, from the database with the
  /// next batch. Safe from any context; never suspends on I/O.
  ///
  /// - Throws: `PersistenceError.Code.encodingFailed` when the key does not encode.
  public nonisolated func removeValue(for key: Key) async throws {
    let encoded = try encode(key)
    let schedule = try pending.withLock { state in
      try state.checkWritable(closed: closedError)
      state.put(.delete(stamp: WriteStamps.next(now: followedClock.now.nanosecondsSince1970)), for: encoded)
      return state.markFlushScheduled()
    }
    if schedule { scheduleFlush() }
  }

  /// Removes every entry of this namespace (other namespaces in the file are untouched): at
  /// once for readers of this layer, from the database with the next batch.
  ///
  /// - Throws: `PersistenceError.Code.closed` after ``close()``.
  public nonisolated func removeAll() async throws {
    let schedule = try pending.withLock { state in
      try state.checkWritable(closed: closedError)
      state.removeAll(stamp: WriteStamps.next(now: followedClock.now.nanosecondsSince1970))
      return state.markFlushScheduled()
    }
    if schedule { scheduleFlush() }
  }

  /// Makes the rows of this namespace filed under `tag` and produced at or before `instant`
  /// misses from now on, in this process at once and in the file for the processes that open
  /// it later (see `AsyncCacheLayer.invalidate(tag:at:)`): records the instant in the
  /// database, committed and on disk when it returns, in O(1) whatever the number of rows. A
  /// read that comes to such a row deletes it with a later batch. A process that has the file open already reads the invalidation when it
  /// opens it again; invalidate through each, or through a shared tier, to reach them sooner.
  ///
  /// - Throws: `PersistenceError` when the database cannot record it (`.readOnly`, `.busy`,
  ///   `.closed` after ``close()``); this layer still holds the rows dead until it closes.
  public func invalidate(tag: String, at instant: CacheInstant) async throws {
    try EntryMetadata.validate(tag: tag)
    guard !isClosed else { throw closedError }
    tagInvalidations.record(tag, at: instant)
    try pending.withLock { try $0.checkWritable(closed: closedError) }
    do {
      try openStore().recordTagInvalidation(tag, at: instant.nanosecondsSince1970)
    } catch let error as SQLiteError {
      // A damaged file is emptied: no row is left to kill.
      if try replaceIfCorrupt(error) { return }
      throw PersistenceError.sqlite(
        error, while: "recording the invalidation of the tag \(tag.prefix(200).debugDescription)")
    }
  }

  /// Waits until every write made before this call is committed to disk.
  ///
  /// Runs the pending batch now, in one transaction, on the layer's thread.
  ///
  /// - Throws: `PersistenceError` when the transaction fails, for example
  ///   `PersistenceError.Code.busy` when another process holds the write lock past the busy
  ///   timeout, or `PersistenceError.Code.noSpace`. The writes stay pending (and readable) and
  ///   are retried by the next write or flush.
  public func flush() throws {
    guard !isClosed else { throw closedError }
    try writePending(background: false)
    retryDelay = nil
  }

  private nonisolated func scheduleFlush() {
    // Straight onto the layer's queue: a task would first wait for a thread of the cooperative
    // pool, which the inserting callers may keep busy until they are done.
    executor.execute { [self] in assumeIsolated { $0.writeInBackground() } }
  }

  /// Schedules a background write unless one is on its way (for work found by reads).
  nonisolated func requestFlush() {
    if pending.withLock({ $0.markFlushScheduled() }) { scheduleFlush() }
  }

  /// The busy timeout of background writes. Reads share the layer's thread and connection, so a
  /// background write that waited the full timeout on another process's lock would hold every
  /// read for as long; it gives up sooner and retries later instead.
  private static var backgroundBusyTimeout: Duration { .milliseconds(100) }

  private func writeInBackground() {
    guard !isClosed else { return }
    do {
      try writePending(background: true)
      if retryDelay != nil {
        retryDelay = nil
        record(.writesRecovered)
      }
    } catch {
      // Recorded by writePending; the writes stay pending. Retry later, backing off, so that
      // they are written even if nothing else is ever written or flushed.
      guard !isClosed, !pending.withLock({ $0.isEmpty && $0.touches.isEmpty }) else { return }
      let delay = retryDelay.map { Swift.min($0 * 2, .seconds(5)) } ?? .milliseconds(100)
      retryDelay = delay
      guard pending.withLock({ $0.markFlushScheduled() }) else { return }
      scheduleRetry(after: delay)
    }
  }

  private nonisolated func scheduleRetry(after delay: Duration) {
    // A timer: on the clock given to the layer, or real time; never the cache's, which a test
    // may hold still.
    let clock = configuration.clock
    // Weak: a layer dropped without close() must not be kept alive by its own retries.
    Task { [weak self] in
      try? await clock.sleep(until: clock.now.advanced(by: delay), tolerance: nil)
      await self?.writeInBackground()
    }
  }

  /// Applies everything pending in one transaction.
  func writePending(background: Bool) throws {
    // Opened before anything is taken from the pending writes: if the database cannot be
    // opened, they stay pending (and a background write is retried).
    let store: SQLiteStore
    do {
      store = try openStore()
    } catch {
      if pending.withLock({ $0.isEmpty && $0.touches.isEmpty }) && damaged.isEmpty && expired.isEmpty { return }
      throw error
    }
    let (clearStamp, writes, touched) = pending.withLock { state in
      state.isFlushScheduled = false
      let (clearStamp, writes) = state.take()
      let touched = state.touches
      state.touches.removeAll(keepingCapacity: true)
      return (clearStamp, writes, touched)
    }
    var committed = false
    // Until it commits, the batch stays readable; if it fails, it is put back under newer writes.
    defer { pending.withLock { $0.finish(committed: committed) } }
    guard !isClosed else {
      if clearStamp != nil || !writes.isEmpty { throw closedError }
      return
    }
    var batch = SQLiteStore.Batch()
    batch.clearStamp = clearStamp
    batch.operations = writes
    batch.touches = touched.map { ($0.key, $0.value) }
    batch.damaged = damaged
    batch.expired = expired
    guard !batch.isEmpty else {
      committed = true
      return
    }
    if background { store.connection.setBusyTimeout(Swift.min(configuration.busyTimeout, Self.backgroundBusyTimeout)) }
    // The store may have been replaced (or closed) by a recovery meanwhile: restore the
    // timeout on the current one.
    defer { if background { self.store?.connection.setBusyTimeout(configuration.busyTimeout) } }
    damaged.removeAll()
    expired.removeAll()
    let now = followedClock.now.nanosecondsSince1970
    do {
      let report: SQLiteStore.Report
      do {
        report = try openStore().apply(
          batch, sizeLimit: configuration.sizeLimit, countLimit: configuration.countLimit, now: now)
      } catch let error as SQLiteError where Self.isCorruption(error) {
        // The old rows are gone with the damaged file; this batch goes into the new one.
        try replaceDatabase(reason: error)
        report = try openStore().apply(
          batch, sizeLimit: configuration.sizeLimit, countLimit: configuration.countLimit, now: now)
      }
      committed = true
      counters.transactions += 1
      counters.rowsWritten += batch.operations.count
      counters.evictions += report.evicted
      counters.expiredRemoved += report.expiredRemoved
    } catch {
      for (key, blob) in batch.damaged { damaged.append((key, blob)) }
      expired += batch.expired
      pending.withLock { state in
        for (key, stamp) in batch.touches where state.touches[key] == nil { state.touches[key] = stamp }
      }
      counters.failedWrites += 1
      let failure =
        (error as? SQLiteError).map { PersistenceError.sqlite($0, while: "writing \(batch.operations.count) rows") }
        ?? (error as? PersistenceError)
        ?? PersistenceError(code: .ioFailure, message: "writing failed", underlying: error)
      // A background write is retried: a warning. Another (a flush, the close) throws to its
      // caller, whose chain logs it: debug here, so that it is not logged twice.
      record(.writeFailed(failure), level: background ? nil : .debug)
      throw failure
    }
  }
}
