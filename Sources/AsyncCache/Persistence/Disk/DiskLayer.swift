public import Foundation

/// A persistent layer that keeps each entry in a file of its own under one directory, with
/// atomic writes, checksums, expiry and a hard size limit.
///
/// ```swift
/// let images = try await DiskLayer<URL, Data>(
///     directory: cachesDirectory.appendingPathComponent("images"),
///     configuration: .init(sizeLimit: 512 << 20, timeToLive: .seconds(7 * 86_400)),
///     keyEncoding: CacheKeyEncoding(encode: { $0.absoluteString }, decode: { URL(string: $0)! }))
/// try await images.insert(png, for: url)
/// let cached = try await images.value(for: url)
/// ```
///
/// **Files.** An entry's file is named after the SHA-256 of its encoded key, so no key, however
/// hostile (`../../x`, `/abs`, a NUL byte, ten kilobytes), ever names a path outside the
/// directory. The file holds a header (format version, expiry, lengths, an XXH64 checksum), the
/// full key and the value's bytes. A file that is truncated, altered or unreadable is a miss; it
/// is deleted and counted in ``Statistics-swift.struct/damagedEntries``. If two keys' names ever
/// collide, the stored key tells them apart: a lookup of one never returns the other's bytes.
///
/// **Writes.** A write goes to a temporary file in the same directory, which is flushed with
/// `fsync` (`F_FULLFSYNC` on Apple platforms), renamed over the entry's file and made durable
/// with a flush of the directory. A reader therefore sees the old value or the new one, never a
/// mixture, even if the process is
/// killed mid-write; temporary files left by a killed process are removed when a layer opens
/// the directory. A write that fails (the disk is full, the file system is read-only) throws a
/// ``PersistenceError`` with code ``PersistenceError/Code/noSpace`` or
/// ``PersistenceError/Code/readOnly``, leaves no temporary file, and leaves the previous value
/// in place and readable. A directory deleted while the layer runs is recreated by the next
/// write.
///
/// **Limits.** The entry files never sum to more than
/// ``Configuration-swift.struct/sizeLimit`` bytes (nor number more than
/// ``Configuration-swift.struct/countLimit``): a write first deletes the least recently used
/// entries until it fits. An entry larger than ``Configuration-swift.struct/maximumEntrySize`` is
/// refused before anything is written, with ``PersistenceError/Code/valueTooLarge``.
///
/// **Index.** The layer keeps each file's key, size and expiry in memory, rebuilt from the
/// headers when it opens (one small read per file), so a miss and the choice of what to evict
/// cost no I/O. Recency order survives a restart through the files' modification times: a hit
/// refreshes its file's time, at most once a minute per entry.
///
/// **Threads.** File I/O that may wait for the device runs on the layer's own serial executor, a
/// thread outside Swift's cooperative thread pool, so blocking system calls never starve other
/// tasks; such a call costs a hop to that thread and back. A read the kernel can answer from
/// memory (Linux) and a miss run on the caller's thread instead (see ``entry(for:)``). Use one layer per directory: a second
/// layer (or process) writing to the same directory is not seen by this one's index.
///
/// Removals and evictions are not flushed to the storage device (except by ``removeValue(for:)``
/// and ``removeAll()``): after a power loss, not a process crash, an evicted entry may reappear.
public final actor DiskLayer<Key: Hashable & Sendable, Value: Sendable>: EnvironmentFollowingLayer {
  /// The directory that holds the entry files.
  public nonisolated let directory: URL

  /// The configuration the layer was created with.
  public nonisolated let configuration: Configuration
  /// The clock and logger the layer reads: its configuration's, or those of the cache or chain
  /// it is in.
  package nonisolated let layerEnvironment: LayerEnvironment

  nonisolated let keyEncoding: CacheKeyEncoding<Key>
  nonisolated let valueCoder: CacheValueCoder<Value>
  nonisolated let fileSystem: any DiskFileSystem
  /// Names files: SHA-256 in production; tests substitute a colliding hash.
  nonisolated let fileNameHash: @Sendable (UnsafeRawBufferPointer) -> SHA256.Digest
  nonisolated let executor: BlockingExecutor
  /// The directory's path, without a trailing slash.
  nonisolated let directoryPath: String
  nonisolated let maximumEntrySize: Int

  /// The directory's tag invalidations, read from its tag file when the layer opens (see
  /// ``invalidate(tag:at:)``).
  nonisolated let tagInvalidations = TagInvalidations()

  var index: DiskIndex
  /// The names of the index's files and their sizes, for reads on callers' threads (see
  /// ``entryInPlace``).
  nonisolated let knownNames = Locked([SHA256.Digest: Int]())
  /// Hits, misses and reads answered on the caller's thread, counted on whichever thread reads.
  nonisolated let readCounts = DiskReadCounts()
  /// The entries read on callers' threads, for the order of use (see ``applyReadsInPlace()``).
  nonisolated let readsInPlace = Locked(ReadsInPlace())
  var writes = 0
  var failedWrites = 0
  var evictions = EvictionCounts()
  var damagedEntries = 0

  /// The executor the layer's methods run on: a thread of its own, off the cooperative thread
  /// pool, where blocking file I/O is allowed.
  public nonisolated var unownedExecutor: UnownedSerialExecutor { executor.asUnownedSerialExecutor() }

  /// Opens (creating it if needed) the directory `directory` as a disk layer.
  ///
  /// Opening removes temporary files that a killed process left behind, deletes damaged entry
  /// files (and expired ones, when the configuration names a clock: a layer that will follow
  /// its cache's clock leaves them to lookups, eviction and ``removeExpired()``), and reads
  /// every entry's header to rebuild the in-memory index: one small read per file, on the
  /// layer's executor. Files whose names are not the layer's are left alone.
  ///
  /// - Parameters:
  ///   - directory: A file URL of the directory to keep the files in.
  ///   - configuration: Limits, expiry and clock.
  ///   - keyEncoding: How keys become the strings stored in the files; must be injective.
  ///   - valueCoder: How values become bytes.
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` naming a configuration value out
  ///   of range or a URL that is not a file URL; a ``PersistenceError`` when the directory can
  ///   neither be found nor created, or cannot be listed.
  public init(
    directory: URL,
    configuration: Configuration = Configuration(),
    keyEncoding: CacheKeyEncoding<Key>,
    valueCoder: CacheValueCoder<Value>
  ) async throws {
    try await self.init(
      directory: directory, configuration: configuration, keyEncoding: keyEncoding, valueCoder: valueCoder,
      fileSystem: POSIXDiskFileSystem(), fileNameHash: { SHA256.hash($0) })
  }

  /// Opens a layer whose file-system calls and file names go through the given seams.
  init(
    directory: URL,
    configuration: Configuration,
    keyEncoding: CacheKeyEncoding<Key>,
    valueCoder: CacheValueCoder<Value>,
    fileSystem: any DiskFileSystem,
    fileNameHash: @escaping @Sendable (UnsafeRawBufferPointer) -> SHA256.Digest
  ) async throws {
    try configuration.validate()
    guard directory.isFileURL else {
      throw AsyncCacheError.invalidConfiguration("DiskLayer directory \(directory) is not a file URL")
    }
    var path = directory.standardizedFileURL.path
    while path.count > 1, path.hasSuffix("/") { path.removeLast() }
    self.directory = directory
    self.configuration = configuration
    self.layerEnvironment = LayerEnvironment(
      clock: configuration.$clock, logger: configuration.$logger, source: "DiskLayer", context: ["directory": path])
    self.keyEncoding = keyEncoding
    self.valueCoder = valueCoder
    self.fileSystem = fileSystem
    self.fileNameHash = fileNameHash
    self.executor = try BlockingExecutor(label: "AsyncCache.DiskLayer")
    self.directoryPath = path
    self.maximumEntrySize = configuration.resolvedMaxEntrySize
    self.index = DiskIndex(publishing: knownNames)
    // `self` is fully initialized, so the rest of this async initializer runs isolated to the
    // actor, on its executor (SE-0327): the directory scan blocks no cooperative thread.
    try openDirectory()
  }

  // MARK: Reading

  /// Returns the unexpired entry for `key`, marking it most recently used.
  ///
  /// A miss for a key the index does not hold costs no I/O and no thread hand-off. On Linux a
  /// hit whose file is in memory (its path in the kernel's lookup caches, its bytes in the page
  /// cache) is read on the caller's thread too, without waiting: one `openat2`, one `fstat`, one
  /// `preadv2` and one `close`, a checksum of the bytes and decoding the value. Any other read
  /// (a file that would come from the device, a damaged or expired one) goes to the layer's
  /// executor, where it may wait. A damaged file is a miss; it is deleted and counted.
  ///
  /// - Throws: ``PersistenceError/Code/encodingFailed`` when the key cannot be encoded;
  ///   ``PersistenceError/Code/ioFailure`` when the file exists but cannot be read.
  public nonisolated func entry(for key: Key) async throws -> CacheEntry<Value>? {
    // Encoding the key and hashing it are CPU work: done on the caller's thread, so that the
    // layer's thread only does what needs it (the index and the file).
    var encodedKey = try encode(key)
    let name = fileName(of: &encodedKey)
    if let answer = entryInPlace(named: name, key: encodedKey) { return answer }
    return try await entry(named: name, key: encodedKey)
  }

  /// The entry in the file `name`, if it holds `encodedKey`'s unexpired value.
  private func entry(named name: SHA256.Digest, key encodedKey: String) throws -> CacheEntry<Value>? {
    guard let slot = index.slot(of: name), Self.sameBytes(index[slot].key, encodedKey) else {
      readCounts.misses.add(1, ordering: .relaxed)
      return nil
    }
    let now = followedClock.now.nanosecondsSince1970
    if index[slot].expiresAt <= now {
      discard(slot, reason: .expired)
      readCounts.misses.add(1, ordering: .relaxed)
      return nil
    }
    return try readEntry(at: slot, key: encodedKey, now: now)
  }

  /// Returns the unexpired value for `key`, marking it most recently used.
  ///
  /// Costs what ``entry(for:)`` costs.
  ///
  /// - Throws: What ``entry(for:)`` throws.
  public nonisolated func value(for key: Key) async throws -> Value? {
    try await entry(for: key)?.value
  }

  // MARK: Writing

  /// Stores `entry` for `key` durably, replacing any previous entry, after deleting least
  /// recently used entries while the new one would not fit the limits.
  ///
  /// The entry expires at the earlier of `entry.expiresAt` and
  /// ``Configuration-swift.struct/timeToLive`` from now. An already expired entry is not
  /// stored (and removes the previous one). Costs encoding the value, writing it to a temporary
  /// file, two `fsync`s and a `rename`, plus the hop to the layer's executor.
  ///
  /// - Throws: ``PersistenceError/Code/valueTooLarge`` naming the key and the sizes when the
  ///   entry is larger than ``Configuration-swift.struct/maximumEntrySize`` (nothing is written, and
  ///   a previous entry for `key` is removed); ``PersistenceError/Code/noSpace`` when the file
  ///   system is full and ``PersistenceError/Code/readOnly`` when it refuses writes (the
  ///   previous entry stays readable then); ``PersistenceError/Code/encodingFailed`` when the key
  ///   or value cannot be encoded, or the metadata is over one of ``EntryMetadata``'s limits
  ///   (the previous entry stays then); ``PersistenceError/Code/ioFailure`` for other system
  ///   errors. The metadata counts with the value against
  ///   ``Configuration-swift.struct/maximumEntrySize``.
  public func insert(_ entry: CacheEntry<Value>, for key: Key) throws {
    var encodedKey = try encode(key)
    let name = fileName(of: &encodedKey)
    let now = followedClock.now
    let entry = entry.expiring(noLaterThan: configuration.timeToLive.map { now.advanced(by: $0) })
    if let expiresAt = entry.expiresAt, expiresAt <= now {
      try removeEntry(named: name, key: encodedKey)
      layerEnvironment.logExpiredArrival(key: encodedKey, expiresAt: expiresAt, now: now)
      return
    }
    let payload: Data
    do {
      payload = try valueCoder.encode(entry.value)
    } catch {
      throw PersistenceError.unencodableValue(key: encodedKey, layer: "DiskLayer", underlying: error)
    }
    let metadata: [UInt8]
    do {
      metadata = try entry.metadata.encoded()
    } catch {
      throw PersistenceError.unstorableMetadata(key: encodedKey, layer: "DiskLayer", error)
    }
    guard encodedKey.utf8.count <= Self.longestKey else {
      throw PersistenceError.valueTooLarge(
        key: encodedKey, size: encodedKey.utf8.count, limit: Self.longestKey, layer: "DiskLayer",
        limitName: "longest key")
    }
    let size = DiskEntryFormat.headerSize + encodedKey.utf8.count + metadata.count + payload.count
    // The metadata counts with the value: both are the entry's bytes.
    guard payload.count + metadata.count <= maximumEntrySize, size <= configuration.sizeLimit else {
      evictions[.oversized] += 1
      // The caller meant to replace the previous value; a stale one must not outlive that.
      try? removeEntry(named: name, key: encodedKey)
      if payload.count + metadata.count > maximumEntrySize {
        throw PersistenceError.valueTooLarge(
          key: encodedKey, size: payload.count + metadata.count, limit: maximumEntrySize, layer: "DiskLayer")
      }
      throw PersistenceError.entryOverSizeLimit(
        key: encodedKey, size: size, limit: configuration.sizeLimit, layer: "DiskLayer")
    }
    do {
      try makeRoom(for: size, replacing: name)
      try writeEntry(
        named: name, key: &encodedKey, metadata: metadata, payload: payload,
        expiresAt: entry.expiresAt?.nanosecondsSince1970 ?? DiskEntryFormat.neverExpires)
    } catch {
      failedWrites += 1
      throw error
    }
  }

  /// Stores `value` for `key`, expiring after `timeToLive` (or per the configuration when `nil`).
  ///
  /// Costs what ``insert(_:for:)-(CacheEntry<Value>,_)`` costs.
  ///
  /// - Throws: What ``insert(_:for:)-(CacheEntry<Value>,_)`` throws.
  public func insert(_ value: Value, for key: Key, timeToLive: Duration? = nil) throws {
    let expiresAt = timeToLive.map { followedClock.now.advanced(by: $0) }
    try insert(CacheEntry(value, expiresAt: expiresAt), for: key)
  }

  /// Removes the entry for `key`, if any, durably.
  ///
  /// Costs an `unlink` and an `fsync` of the directory when the key is held; no I/O otherwise.
  ///
  /// - Throws: ``PersistenceError/Code/readOnly`` or ``PersistenceError/Code/ioFailure`` when
  ///   the file cannot be deleted (the entry stays then); ``PersistenceError/Code/encodingFailed``
  ///   when the key cannot be encoded.
  public func removeValue(for key: Key) throws {
    var encodedKey = try encode(key)
    let name = fileName(of: &encodedKey)
    try removeEntry(named: name, key: encodedKey)
  }

  /// Removes every entry, and any temporary files, keeping the directory and any other files
  /// in it.
  ///
  /// Costs listing the directory and an `unlink` per file.
  ///
  /// - Throws: ``PersistenceError/Code/readOnly`` or ``PersistenceError/Code/ioFailure`` when
  ///   files cannot be deleted; the entries whose files were deleted are gone even then.
  public func removeAll() throws {
    try removeAllFiles()
  }

  /// Deletes every expired entry's file and returns how many there were.
  ///
  /// Expired entries are also deleted when a lookup finds them, when the directory is opened,
  /// and by eviction; call this to reclaim their space sooner. O(n) in the entries held, plus
  /// an `unlink` per expired entry.
  @discardableResult
  public func removeExpired() -> Int {
    let now = followedClock.now.nanosecondsSince1970
    let expired = index.records.filter { $0.expiresAt <= now }.map(\.name)
    for name in expired {
      if let slot = index.slot(of: name) { discard(slot, reason: .expired) }
    }
    return expired.count
  }

  // MARK: Closing

  /// Says, at notice, that nothing was left to write: each write was durable when it returned.
  /// The layer stays usable. Called by the ``LoadingCache/close()`` or ``CacheChain/close()``
  /// that holds it.
  public func close() async throws {
    applyReadsInPlace()
    layerEnvironment.log(
      .notice,
      "closed; nothing was pending, each write was durable when it returned; \(index.count) "
        + "\(index.count == 1 ? "entry" : "entries") (\(index.totalBytes) bytes) stay in the directory",
      metadata: ["count": "\(index.count)", "bytes": "\(index.totalBytes)"])
  }

  // MARK: Introspection

  /// The number of entries held, expired ones included until they are removed. O(1).
  public var count: Int { index.count }

  /// The sum of the sizes of the entry files held, in bytes. O(1).
  public var totalBytes: Int { index.totalBytes }

  /// The keys of the unexpired entries held, from the most to the least recently used.
  ///
  /// O(n) in the entries held; no I/O (the keys are in the index).
  ///
  /// Keys that the layer's key encoding no longer decodes (say, the key type changed since they
  /// were written) are left out, as the other persistent layers do; so are keys stored before
  /// keys were normalized that are not in NFC, which no lookup finds.
  public var keys: [Key] {
    applyReadsInPlace()
    let now = followedClock.now.nanosecondsSince1970
    return index.slotsByRecency.compactMap { slot -> Key? in
      let record = index[slot]
      guard record.expiresAt > now, record.key.isNFC else { return nil }
      return try? keyEncoding.decode(record.key)
    }
  }

  /// Hits, misses, writes, evictions and damaged files since the layer was opened. O(1).
  public var statistics: Statistics {
    Statistics(
      count: index.count,
      totalBytes: index.totalBytes,
      hits: readCounts.hits.load(ordering: .relaxed),
      misses: readCounts.misses.load(ordering: .relaxed),
      readsInPlace: readCounts.inPlace.load(ordering: .relaxed),
      writes: writes,
      failedWrites: failedWrites,
      evictions: evictions,
      damagedEntries: damagedEntries
    )
  }
}

extension DiskLayer {
  /// A snapshot of a disk layer's counters.
  public struct Statistics: Sendable, Hashable {
    /// The number of entries held.
    public var count: Int
    /// The sum of the sizes of the entry files held, in bytes.
    public var totalBytes: Int
    /// Lookups that returned an entry.
    public var hits: Int
    /// Lookups that returned nothing: no entry, an expired one, a damaged one.
    public var misses: Int
    /// Lookups answered on the caller's thread, from memory, with no thread crossed (Linux; see
    /// ``DiskLayer/entry(for:)``).
    public var readsInPlace: Int
    /// Entries written.
    public var writes: Int
    /// Writes that failed with a system error (a full or read-only file system, say).
    public var failedWrites: Int
    /// Entries deleted to respect a limit, because they expired, or refused as too large, by
    /// reason. The size limit counts as ``EvictionReason/costLimit``.
    public var evictions: EvictionCounts
    /// Damaged files (truncated, altered, of an unknown format, or whose value no longer
    /// decodes) that were found and deleted.
    public var damagedEntries: Int
  }
}

extension DiskLayer {
  /// The clock expiry is read from: the configuration's, the one the layer follows (see
  /// ``CacheEnvironment``), or the wall clock. Safe from any context.
  public nonisolated var clock: any CacheClock { followedClock.clock }
}
