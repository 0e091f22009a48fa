public import AsyncCache
public import Foundation

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
/// - **Tags**: ``invalidate(tag:at:)`` records the tag's instant in the database, in O(1), and
///   the rows filed under it that were produced before are misses from then on, also after a
///   restart; a read that comes to one deletes it with a later batch.
/// - **Damage**: every row carries a header with a checksum. A damaged row is a miss that is
///   deleted and counted; a database SQLite reports as corrupt is emptied in place (a copy is kept),
///   with a ``SQLiteLayerEvent``.
/// - **Threads**: the layer runs on its own thread (a custom executor), so no SQLite call
///   that may wait for the device ever blocks the cooperative thread pool. On Linux a read
///   whose pages are all in memory (the kernel's page cache) is answered on the caller's thread
///   instead, by a read-only connection of the layer's whose reads may not wait: no thread is
///   crossed (``Statistics-swift.struct/readsInPlace`` counts them). The database runs in WAL
///   mode with a busy timeout; a lock held past it is a `PersistenceError.Code.busy` error,
///   never a hang.
public final actor SQLiteLayer<Key: Hashable & Sendable, Value: Sendable>: EnvironmentFollowingLayer {
  /// The database file.
  public nonisolated let url: URL
  /// The namespace this layer reads and writes, in Unicode Normalization Form C (namespaces
  /// that Swift calls equal are one namespace).
  public nonisolated let namespace: String
  /// The layer's limits, timing and clock.
  public nonisolated let configuration: Configuration
  /// The clock and logger the layer reads: its configuration's, or those of the cache or chain
  /// it is in.
  package nonisolated let layerEnvironment: LayerEnvironment
  /// How keys become stored strings.
  public nonisolated let keyEncoding: CacheKeyEncoding<Key>
  /// How values become stored bytes.
  public nonisolated let valueCoder: CacheValueCoder<Value>

  nonisolated let executor: BlockingExecutor
  nonisolated let pending: Locked<PendingWrites>
  nonisolated let entryLimit: Int
  nonisolated let accessResolution: Int64
  /// Read-only connections for reads on the caller's thread.
  nonisolated let readers = SQLiteReaders()
  /// Hits and misses, counted on whichever thread answers a read.
  nonisolated let readCounts = ReadCounts()
  /// The namespace's invalidated tags, read from the database when it opens and recorded there
  /// by ``invalidate(tag:at:)``: a row filed under one, produced at or before its instant, is a
  /// miss.
  nonisolated let tagInvalidations = TagInvalidations()

  var store: SQLiteStore?
  var isClosed = false
  /// Set when the file is on read-only media: reads record nothing for later writes.
  var isReadOnly = false
  /// The delay before retrying a background write that failed; doubles up to a cap.
  var retryDelay: Duration?
  /// The copy of a damaged file taken before the first attempt to reset it, until one succeeds.
  var damagedCopy: URL?
  var damaged: [([UInt8], Data)] = []
  var expired: [[UInt8]] = []
  var counters = Statistics()
  nonisolated let events = Locked<[SQLiteLayerEvent]>([])
  /// Whether the layer began closing; its closing ends ``run()``.
  nonisolated let lifecycle = Lifecycle("SQLiteLayer")
  /// Delivers the layer's events to its observers and its configuration's handler.
  nonisolated let eventHub: EventHub<SQLiteLayerEvent>

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
    try ConfigurationCheck("SQLiteLayer").require(
      !namespace.isEmpty && !namespace.utf8.contains(0), "namespace", is: namespace.debugDescription,
      mustBe: "non-empty and free of NUL bytes")
    // SQLite's compiled-in default for SQLITE_MAX_LENGTH; the open connection's limit is
    // checked again in `open()`.
    try configuration.validate(sqliteMaximumLength: 1_000_000_000)
    self.url = url
    // One namespace, whichever way its accents are written (see CacheKeyEncoding's key identity).
    self.namespace = namespace.nfcNormalized
    self.configuration = configuration
    self.layerEnvironment = LayerEnvironment(
      clock: configuration.$clock, logger: configuration.$logger, source: "SQLiteLayer",
      context: ["database": url.path, "namespace": namespace.nfcNormalized])
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

  // MARK: Internals

  nonisolated func encode(_ key: Key) throws -> String {
    try keyEncoding.encode(key, for: "SQLiteLayer")
  }

  nonisolated var closedError: PersistenceError {
    PersistenceError(code: .closed, message: "the SQLiteLayer for \(url.path) is closed")
  }
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
  /// The clock expiry is read from: the configuration's, the one the layer follows (see
  /// `CacheEnvironment`), or the wall clock. Safe from any context.
  public nonisolated var clock: any CacheClock { followedClock.clock }
}
