public import AsyncCache
import CSQLite
public import Foundation
import Synchronization

/// A persistent cache layer in a SQLite database: the framework's embedded default store.
///
/// ```swift
/// let disk = try await SQLiteLayer<String, Data>(url: folder.appending(path: "cache.sqlite"))
/// let chain = try CacheChain<String, Data>([.init(try MemoryLayer<String, Data>()), .init(disk)])
/// ```
///
/// - **Keys** are stored as strings through a `CacheKeyEncoding` (collision-free for the
///   built-in encodings); **values** as `Data` stored raw, or any `Codable` value through a
///   `CacheValueCoder` (JSON by default).
/// - **Namespaces**: several layers, in one process or several, share one file without seeing
///   each other's keys. Each layer opens its own connection.
/// - **Expiry** is stored as wall-clock time; expired rows are misses, purged lazily and by
///   ``removeExpired()``.
/// - **Size limit**: a hard limit in bytes (and optionally rows) per namespace, enforced in the
///   transaction that writes, by evicting expired and then least recently accessed rows.
/// - **Write-behind**: ``insert(_:for:)`` returns once the value is readable from this layer;
///   the row is written in the background, batched with other writes in one transaction.
///   ``flush()`` waits until everything written so far is on disk.
/// - **Damage**: every row carries a header with a checksum. A damaged row is a miss that is
///   deleted and counted; a database SQLite reports as corrupt is emptied in place (a copy is kept),
///   with a ``SQLiteLayerEvent``.
/// - **Threads**: the layer runs on its own thread (a custom executor), so no SQLite call
///   ever blocks the cooperative thread pool. The database runs in WAL mode with a busy
///   timeout; a lock held past it is a `PersistenceError.Code.busy` error, never a hang.
public final actor SQLiteLayer<Key: Hashable & Sendable, Value: Sendable>: AsyncCacheLayer {
  /// The database file.
  public nonisolated let url: URL
  /// The namespace this layer reads and writes, in Unicode Normalization Form C (namespaces
  /// that Swift calls equal are one namespace).
  public nonisolated let namespace: String
  /// The layer's limits, timing and clock.
  public nonisolated let configuration: Configuration
  /// The clock the layer reads: its configuration's, or the one of the cache or chain it is in.
  package nonisolated let followedClock: FollowedClock
  /// The logger the layer writes to: its configuration's, or the one of the cache or chain it is in.
  package nonisolated let followedLogger: Followed<CacheLogger>
  /// How keys become stored strings.
  public nonisolated let keyEncoding: CacheKeyEncoding<Key>
  /// How values become stored bytes.
  public nonisolated let valueCoder: CacheValueCoder<Value>

  private nonisolated let executor: BlockingExecutor
  private nonisolated let pending: Locked<PendingWrites>
  private nonisolated let entryLimit: Int
  private nonisolated let accessResolution: Int64
  /// Hits and misses, counted on whichever thread answers a read.
  private nonisolated let readCounts = ReadCounts()

  private var store: SQLiteStore?
  private var isClosed = false
  /// Set when the file is on read-only media: reads record nothing for later writes.
  private var isReadOnly = false
  /// The delay before retrying a background write that failed; doubles up to a cap.
  private var retryDelay: Duration?
  /// The copy of a damaged file taken before the first attempt to reset it, until one succeeds.
  private var damagedCopy: URL?
  private var touches: [[UInt8]: Int64] = [:]
  private var damaged: [([UInt8], Data)] = []
  private var expired: [[UInt8]] = []
  private var counters = Statistics()
  private nonisolated let events = Locked<[SQLiteLayerEvent]>([])
  /// How the entries that arrive already expired are logged.
  private nonisolated let expiredArrivals = ExpiredArrivals()
  /// Fired when the layer closes: ends ``run()``.
  private nonisolated let closeSignal = OneShotSignal()
  /// Delivers the layer's events to its observers and its configuration's handler.
  private nonisolated let eventHub: EventHub<SQLiteLayerEvent>

  /// The layer runs on its own thread, where SQLite may block.
  public nonisolated var unownedExecutor: UnownedSerialExecutor {
    executor.asUnownedSerialExecutor()
  }

  /// Opens (creating if needed, with its folder) the database at `url` and the layer for
  /// `namespace` in it.
  ///
  /// A database that SQLite reports as corrupt or not a database is emptied in place after a
  /// copy is saved (see ``SQLiteLayerEvent/databaseReplaced(reason:copiedTo:)``); an older
  /// schema is migrated, a newer one reset.
  ///
  /// - Parameters:
  ///   - url: The database file. Its folder is created if missing.
  ///   - namespace: The namespace of this layer's keys; not empty. Default `"default"`.
  ///   - configuration: Limits, timing and clock.
  ///   - keyEncoding: How keys become stored strings; must be injective.
  ///   - valueCoder: How values become stored bytes.
  /// - Throws: `AsyncCacheError.Code.invalidConfiguration` for an empty namespace or invalid
  ///   limits; `PersistenceError` when the database cannot be opened (for example
  ///   `PersistenceError.Code.readOnly`, `PersistenceError.Code.busy`).
  public init(
    url: URL,
    namespace: String = "default",
    configuration: Configuration = Configuration(),
    keyEncoding: CacheKeyEncoding<Key>,
    valueCoder: CacheValueCoder<Value>
  ) async throws {
    guard !namespace.isEmpty, !namespace.utf8.contains(0) else {
      throw AsyncCacheError.invalidConfiguration(
        "SQLiteLayer: the namespace must be non-empty and free of NUL bytes, got \(namespace.debugDescription)")
    }
    // SQLite's compiled-in default for SQLITE_MAX_LENGTH; the open connection's limit is
    // checked again in `open()`.
    try configuration.validate(sqliteMaximumLength: 1_000_000_000)
    self.url = url
    // One namespace, whichever way its accents are written (see CacheKeyEncoding's key identity).
    self.namespace = namespace.nfcNormalized
    self.configuration = configuration
    self.followedClock = FollowedClock(given: configuration.clockGiven)
    self.followedLogger = Followed(given: configuration.loggerGiven, fallback: .disabled)
    self.keyEncoding = keyEncoding
    self.valueCoder = valueCoder
    self.entryLimit = configuration.effectiveMaximumEntrySize
    self.accessResolution = configuration.accessTimeResolution.clampedNanoseconds
    self.executor = try BlockingExecutor(label: "AsyncCache.SQLite")
    self.pending = Locked(PendingWrites())
    self.eventHub = EventHub(handler: configuration.eventHandler)
    try open()
  }

  deinit {
    // The observers' sequences end once they have read what is buffered.
    eventHub.finishAll()
  }

  // MARK: Reading

  /// The entry stored for `key`, or `nil` when there is none, it expired, or its row was
  /// damaged (then the row is deleted and counted).
  ///
  /// Safe from any context. A write still waiting for its transaction is answered on the
  /// caller's thread. Otherwise the layer's thread runs one indexed `SELECT` and a checksum over
  /// the value, and the caller decodes it. Reads queued together share one read transaction.
  ///
  /// - Throws: `PersistenceError` when the key cannot be encoded or SQLite fails (a corrupt
  ///   database is replaced and reads as a miss instead); `PersistenceError.Code.closed` after
  ///   ``close()``.
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    let encoded = try encode(key)
    let now = followedClock.now.nanosecondsSince1970
    var answer = Answer.local(try pendingAnswer(for: encoded))
    if case .local(.none) = answer { answer = try await lookUp(encoded, now: now) }
    switch answer {
    case .local(.write(.upsert(let row, _, _))):
      if let expiresAt = row.expiresAt, expiresAt <= now {
        readCounts.misses.add(1, ordering: .relaxed)
        return nil
      }
      readCounts.hits.add(1, ordering: .relaxed)
      return CacheEntry(pendingValue(row), expiresAt: row.expiresAt.map(CacheInstant.init(nanosecondsSince1970:)))
    case .local, .stored(nil):
      readCounts.misses.add(1, ordering: .relaxed)
      return nil
    case .stored(let found?):
      let value: Value
      do {
        value = try valueCoder.decode(found.payload)
      } catch {
        await discardUndecodable(encoded, payload: found.payload, expiresAt: found.expiresAt, error: error)
        return nil
      }
      readCounts.hits.add(1, ordering: .relaxed)
      return CacheEntry(value, expiresAt: found.expiresAt.map(CacheInstant.init(nanosecondsSince1970:)))
    }
  }

  /// The value stored for `key`, or `nil`. See ``entry(for:)``.
  public nonisolated func value(for key: Key) async throws -> Value? {
    try await entry(for: key)?.value
  }

  /// A row's payload, checked on the layer's thread.
  private struct Found: Sendable {
    var payload: Data
    var expiresAt: Int64?
  }

  /// Where a read found its answer: in the pending writes, or in the database (`nil` for a
  /// miss, an expired row or a damaged one).
  private enum Answer: Sendable {
    case local(Local)
    case stored(Found?)
  }

  /// What the pending writes say about `encoded`.
  ///
  /// - Throws: `PersistenceError.Code.closed` after ``close()``.
  private nonisolated func pendingAnswer(for encoded: String) throws -> Local {
    try pending.withLock { state in
      guard !state.isClosed else { throw closedError }
      return state.writes[encoded].map(Local.write) ?? (state.clearStamp != nil ? .cleared : .none)
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
    case .hit(let payload, let expiresAt, let accessedAt):
      if !isReadOnly, now.subtractingReportingOverflow(accessedAt).partialValue >= accessResolution {
        touches[Array(encoded.utf8)] = pending.withLock { $0.accessTime(now: now) }
        if touches.count >= configuration.maximumPendingTouches { requestFlush() }
      }
      return .stored(Found(payload: payload, expiresAt: expiresAt))
    }
  }

  /// Records that the row read for `encoded` holds a value that does not decode, so that it is
  /// deleted with a later batch.
  private func discardUndecodable(_ encoded: String, payload: Data, expiresAt: Int64?, error: any Error) {
    let keyBytes = Array(encoded.utf8)
    let blob = SQLiteRecord.encode(key: keyBytes, expiresAt: expiresAt, payload: payload)
    discard(keyBytes, blob: blob, key: encoded, reason: "the value does not decode: \(error)")
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

  // MARK: Writing

  /// Stores `entry` for `key`: readable from this layer at once, written to the database in the
  /// background, batched with other writes in one transaction.
  ///
  /// The entry expires at the earlier of `entry.expiresAt` and the configured time to live. An
  /// already expired entry is not stored (and removes the previous one). Safe from any context;
  /// runs on the caller's thread (encoding and a checksum) and suspends only when more than
  /// ``Configuration-swift.struct/maximumPendingBytes`` wait to be written.
  ///
  /// - Throws: `PersistenceError.Code.valueTooLarge` (naming the key and sizes) when the
  ///   encoded value is over ``Configuration-swift.struct/maximumEntrySize`` or the size limit;
  ///   `PersistenceError.Code.encodingFailed` when the key or value does not encode. Nothing
  ///   is written then. When writes wait on a database that keeps failing, the error of the
  ///   failed write (for example `PersistenceError.Code.noSpace`).
  public nonisolated func insert(_ entry: CacheEntry<Value>, for key: Key) async throws {
    var encoded = try encode(key)
    let payload: Data
    do {
      payload = try valueCoder.encode(entry.value)
    } catch {
      throw PersistenceError.unencodableValue(key: encoded, layer: "SQLiteLayer", underlying: error)
    }
    let size = encoded.utf8.count + SQLiteRecord.headerSize + payload.count
    guard payload.count <= entryLimit else {
      throw PersistenceError.valueTooLarge(key: encoded, size: payload.count, limit: entryLimit, layer: "SQLiteLayer")
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
        payload.withUnsafeBytes {
          SQLiteRecord.checksum(key: UnsafeRawBufferPointer(key), expiresAt: expiry, payload: $0)
        }
      }
      row = PendingWrites.Row(value: entry.value, payload: payload, checksum: digest, size: size, expiresAt: expiry)
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
      record(.expiredOnArrival(key: encoded, expiresAt: expiresAt, now: now), level: expiredArrivals.nextLevel())
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

  /// Deletes the namespace's expired rows now; returns how many were deleted.
  ///
  /// Runs on the layer's thread, in one statement.
  ///
  /// - Throws: `PersistenceError` when SQLite fails, for example `PersistenceError.Code.busy`.
  @discardableResult
  public func removeExpired() throws -> Int {
    let now = followedClock.now.nanosecondsSince1970
    pending.withLock { state in
      for (key, write) in state.writes {
        if case .upsert(let row, let stamp, _) = write, let expiresAt = row.expiresAt, expiresAt <= now {
          state.put(.delete(stamp: stamp), for: key)
        }
      }
    }
    do {
      let store = try openStore()
      store.endReading()
      let removed = try store.deleteExpired(now: now)
      counters.expiredRemoved += removed
      return removed
    } catch let error as SQLiteError {
      throw PersistenceError.sqlite(error, while: "removing expired rows")
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

  /// Writes what is pending and closes the database, and ends the event sequences. Later
  /// operations throw `PersistenceError.Code.closed`; calling it again does nothing. A
  /// `LoadingCache` or `CacheChain` that holds the layer calls it from its own `close()`, once
  /// its writes have ended.
  ///
  /// - Throws: the error of the final write, if it failed; the database is closed regardless.
  ///
  /// `async` although it does not suspend: a synchronous overload would lose, in `async` code,
  /// to the protocol's do-nothing default.
  public func close() async throws {
    guard !isClosed else { return }
    closeSignal.fire()
    pending.withLock { $0.isClosed = true }
    defer {
      store?.endReading()
      store?.connection.close()
      store = nil
      isClosed = true
      // Nothing happens after this: the event sequences end once read.
      eventHub.finishAll()
    }
    try writePending(background: false)
  }

  /// Waits until the calling task is cancelled, the configuration's `gracefulShutdown` signal
  /// returns, or the layer is closed; then closes it (``close()``), writing what is pending: the
  /// shape of swift-service-lifecycle's `Service` requirement, for a layer used without a
  /// `LoadingCache` (whose own `run()` closes its layers).
  ///
  /// - Throws: What ``close()`` throws.
  public nonisolated func run() async throws {
    await closeSignal.wait(orUntil: configuration.gracefulShutdown)
    try await close()
  }

  /// On `.critical` pressure, writes pending values so that their memory is released.
  public func handleMemoryPressure(_ level: MemoryPressureLevel) {
    if level == .critical, !isClosed { try? writePending(background: false) }
  }

  // MARK: Insight

  /// Counters since the layer was opened.
  public struct Statistics: Sendable, Hashable {
    /// Reads that found a value.
    public var hits = 0
    /// Reads that found nothing, an expired row, or a damaged one.
    public var misses = 0
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

  /// The events recorded since the layer was opened (at most the last 100), oldest first.
  public var recentEvents: [SQLiteLayerEvent] { events.withLock { $0 } }

  /// A sequence of the events the layer reports from now on (``SQLiteLayerEvent``), for one
  /// observer; see `EventSequence` for its buffering and its end. Events of the layer's opening
  /// happened before any sequence: ``recentEvents`` keeps them, and a
  /// ``Configuration-swift.struct/eventHandler`` sees them too.
  ///
  /// - Parameter limit: The most events the sequence buffers for a slow observer; past it, the
  ///   oldest are dropped and reported by a ``SQLiteLayerEvent/dropped(count:)``. At least 1.
  public nonisolated func events(bufferingNewest limit: Int = 1_000) -> EventSequence<SQLiteLayerEvent> {
    eventHub.events(bufferingNewest: limit)
  }

  // MARK: Internals

  private enum Local: Sendable {
    case write(PendingWrites.Write)
    case cleared
    case none
  }

  private nonisolated func encode(_ key: Key) throws -> String {
    do {
      return try keyEncoding.encode(key)
    } catch let error as PersistenceError {
      throw error
    } catch {
      throw PersistenceError(code: .encodingFailed, message: "cannot encode the key \(key)", underlying: error)
    }
  }

  private nonisolated func scheduleFlush() {
    // Straight onto the layer's queue: a task would first wait for a thread of the cooperative
    // pool, which the inserting callers may keep busy until they are done.
    executor.execute { [self] in assumeIsolated { $0.writeInBackground() } }
  }

  /// Schedules a background write unless one is on its way (for work found by reads).
  private func requestFlush() {
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
      guard !isClosed, !pending.withLock({ $0.isEmpty }) || !touches.isEmpty else { return }
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

  private func openStore() throws -> SQLiteStore {
    assert(executor.isCurrentThread, "SQLite must only be used on the layer's connection thread")
    if let store { return store }
    guard !isClosed else { throw closedError }
    // An earlier recovery from a damaged file failed; try again.
    try open()
    guard let store else { throw closedError }
    return store
  }

  private nonisolated var closedError: PersistenceError {
    PersistenceError(code: .closed, message: "the SQLiteLayer for \(url.path) is closed")
  }

  private nonisolated func record(_ event: SQLiteLayerEvent, level: CacheLogLevel? = nil) {
    events.withLock { events in
      events.append(event)
      if events.count > 100 { events.removeFirst(events.count - 100) }
    }
    log(level ?? event.logLevel, event.description, metadata: event.logMetadata)
    eventHub.emit(event)
  }

  private func discard(_ keyBytes: [UInt8], blob: Data, key: String, reason: String) {
    readCounts.misses.add(1, ordering: .relaxed)
    counters.damagedEntries += 1
    record(.rowDiscarded(key: key, reason: reason))
    guard !isReadOnly else { return }
    damaged.append((keyBytes, blob))
    requestFlush()
  }

  /// Applies everything pending in one transaction.
  private func writePending(background: Bool) throws {
    // Opened before anything is taken from the pending writes: if the database cannot be
    // opened, they stay pending (and a background write is retried).
    let store: SQLiteStore
    do {
      store = try openStore()
    } catch {
      if pending.withLock({ $0.isEmpty }) && touches.isEmpty && damaged.isEmpty && expired.isEmpty { return }
      throw error
    }
    let (clearStamp, writes) = pending.withLock { state in
      state.isFlushScheduled = false
      return state.take()
    }
    guard !isClosed else {
      if clearStamp != nil || !writes.isEmpty { throw closedError }
      return
    }
    var batch = SQLiteStore.Batch()
    batch.clearStamp = clearStamp
    batch.operations = writes
    batch.touches = touches.map { ($0.key, $0.value) }
    batch.damaged = damaged
    batch.expired = expired
    guard !batch.isEmpty else { return }
    if background { store.connection.setBusyTimeout(Swift.min(configuration.busyTimeout, Self.backgroundBusyTimeout)) }
    // The store may have been replaced (or closed) by a recovery meanwhile: restore the
    // timeout on the current one.
    defer { if background { self.store?.connection.setBusyTimeout(configuration.busyTimeout) } }
    touches.removeAll(keepingCapacity: true)
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
      counters.transactions += 1
      counters.rowsWritten += batch.operations.count
      counters.evictions += report.evicted
      counters.expiredRemoved += report.expiredRemoved
    } catch {
      pending.withLock { $0.restore(clearStamp: clearStamp, writes: writes) }
      for (key, blob) in batch.damaged { damaged.append((key, blob)) }
      expired += batch.expired
      for (key, stamp) in batch.touches where touches[key] == nil { touches[key] = stamp }
      counters.failedWrites += 1
      let failure =
        (error as? SQLiteError).map { PersistenceError.sqlite($0, while: "writing \(batch.operations.count) rows") }
        ?? (error as? PersistenceError)
        ?? PersistenceError(code: .ioFailure, message: "writing failed", underlying: error)
      record(.writeFailed(failure))
      throw failure
    }
  }

  /// Opens the database, replacing it if SQLite reports it corrupt.
  private func open() throws {
    let directory = url.deletingLastPathComponent()
    do {
      try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
    } catch {
      throw PersistenceError(
        code: .ioFailure, message: "cannot create the folder \(directory.path) for the database", underlying: error)
    }
    do {
      try connect()
    } catch let error as SQLiteError {
      guard Self.isReadOnlyFileSystem(directory) else {
        throw PersistenceError.sqlite(error, while: "opening \(url.path)")
      }
      // Read-only media: serve what the file holds, refuse writes.
      guard FileManager.default.fileExists(atPath: url.path) else {
        throw PersistenceError(
          code: .readOnly, message: "cannot create \(url.path): its file system is read-only", underlying: error)
      }
      do {
        store = SQLiteStore(connection: try SQLiteStore.openImmutable(path: url.path), namespace: namespace)
      } catch let error {
        throw PersistenceError(
          code: .readOnly, message: "cannot open \(url.path) on its read-only file system", underlying: error)
      }
      pending.withLock { $0.readOnlyReason = "\(url.path) is on a read-only file system" }
      isReadOnly = true
      log(.warning, "the database is on a read-only file system; opened it read-only, writes are refused")
    }
  }

  /// Whether `directory` cannot be written because its file system is read-only or access is
  /// denied.
  private static func isReadOnlyFileSystem(_ directory: URL) -> Bool {
    guard access(directory.path, W_OK) != 0 else { return false }
    return errno == EROFS || errno == EACCES || errno == EPERM
  }

  private func connect() throws {
    assert(executor.isCurrentThread, "SQLite must only be used on the layer's connection thread")
    let connection = try SQLiteConnection(path: url.path, busyTimeout: configuration.busyTimeout)
    let outcome = try configureRecovering(connection)
    guard connection.maximumLength - SQLiteRecord.headerSize >= entryLimit else {
      connection.close()
      throw AsyncCacheError.invalidConfiguration(
        "SQLiteLayer: maximumEntrySize \(entryLimit) exceeds this SQLite's limit of \(connection.maximumLength) bytes")
    }
    store = SQLiteStore(connection: connection, namespace: namespace)
    switch outcome {
    case .current: break
    case .migrated(let from) where from > 0:
      record(.schemaMigrated(from: Int(from), to: Int(SQLiteSchema.currentVersion)))
    case .migrated: break
    case .reset(let found): record(.schemaReset(foundVersion: Int(found)))
    }
  }

  /// Configures a new connection; a file that turns out damaged is emptied in place first.
  private func configureRecovering(_ connection: SQLiteConnection) throws -> SQLiteSchema.Outcome {
    do {
      return try SQLiteStore.configure(connection)
    } catch  where Self.isCorruption(error) {
      try reset(connection, reason: error)
      return try SQLiteStore.configure(connection)
    }
  }

  private static func isCorruption(_ error: SQLiteError) -> Bool {
    error.primaryResultCode == SQLITE_CORRUPT || error.primaryResultCode == SQLITE_NOTADB
  }

  /// When `error` says the database is corrupt, replaces it and returns `true`.
  private func replaceIfCorrupt(_ error: SQLiteError) throws -> Bool {
    guard Self.isCorruption(error) else { return false }
    try replaceDatabase(reason: error)
    return true
  }

  /// Empties the damaged database in place, after copying it aside for inspection.
  ///
  /// Every connection to the file, in this process (other namespaces) and in others, goes on
  /// with the same file, now empty and sound; a file moved aside would leave them writing into
  /// a database that nobody opens again.
  private func replaceDatabase(reason: SQLiteError) throws {
    let connection = try openStore().connection
    do {
      try reset(connection, reason: reason)
      _ = try SQLiteStore.configure(connection)
    } catch {
      // Leave the layer to reconnect (and try again) on its next call.
      store?.connection.close()
      store = nil
      // Busy, a full disk...: say so, so that the caller can act on it.
      if let error = error as? SQLiteError {
        throw PersistenceError.sqlite(error, while: "resetting the damaged database \(url.path)")
      }
      throw PersistenceError(
        code: .corrupted, message: "\(url.path) is damaged and could not be reset", underlying: error)
    }
  }

  /// Copies the damaged file aside (best effort), then empties it in place on `connection`.
  private func reset(_ connection: SQLiteConnection, reason: SQLiteError) throws {
    // One copy per damaged file: attempts that fail (another process holds the lock, say) and
    // are retried reuse it, instead of filling the disk with copies.
    let manager = FileManager.default
    if damagedCopy == nil {
      let aside = url.deletingLastPathComponent().appendingPathComponent(
        "\(url.lastPathComponent).corrupt-\(UUID().uuidString)")
      var copied = false
      for suffix in ["", "-wal"] where manager.fileExists(atPath: url.path + suffix) {
        if (try? manager.copyItem(atPath: url.path + suffix, toPath: aside.path + suffix)) != nil { copied = true }
      }
      damagedCopy = copied ? aside : nil
    }
    try connection.resetDatabase()
    let copy = damagedCopy
    damagedCopy = nil
    counters.databaseReplacements += 1
    record(.databaseReplaced(reason: .sqlite(reason, while: "using \(url.path)"), copiedTo: copy))
  }
}

/// The read counters of a layer, updated from any thread.
private final class ReadCounts: Sendable {
  let hits = Atomic<Int>(0)
  let misses = Atomic<Int>(0)
}

extension Duration {
  /// The duration in whole nanoseconds, clamped to the range of `Int64`.
  var clampedNanoseconds: Int64 {
    let (seconds, attoseconds) = components
    let (whole, overflow) = seconds.multipliedReportingOverflow(by: 1_000_000_000)
    guard !overflow else { return seconds < 0 ? .min : .max }
    let (total, overflow2) = whole.addingReportingOverflow(attoseconds / 1_000_000_000)
    guard !overflow2 else { return whole < 0 ? .min : .max }
    return total
  }
}

extension SQLiteLayer {
  /// Follows the clock and the logger of the cache or chain the layer is put in, for those its
  /// configuration does not name (see `CacheEnvironment`).
  public nonisolated func follow(_ environment: CacheEnvironment) {
    followedClock.follow(environment.clock)
    followedLogger.follow(environment.logger)
  }

  /// The clock expiry is read from: the configuration's, the one the layer follows (see
  /// `CacheEnvironment`), or the wall clock. Safe from any context.
  public nonisolated var clock: any CacheClock { followedClock.clock }
}
