public import Foundation

extension MemoryLayer {
  /// What ``MemoryLayer/restoreSnapshot(from:)`` put back into a layer.
  public struct SnapshotRestoreResult: Sendable, Hashable {
    /// The entries inserted into the layer: the most recently used entries of the snapshot that
    /// its limits hold together.
    public var restored: Int
    /// The entries of the snapshot that had expired by the layer's clock, and were left out.
    public var skippedExpired: Int
    /// The unexpired entries of the snapshot left out because the layer's count or cost limit
    /// cannot hold them beside the more recently used ones, or because one alone costs more
    /// than the cost limit.
    public var skippedOverLimits: Int
    /// When the snapshot was written, by the clock of the layer that wrote it.
    public var writtenAt: CacheInstant

    /// Creates a result.
    public init(restored: Int, skippedExpired: Int, skippedOverLimits: Int = 0, writtenAt: CacheInstant) {
      self.restored = restored
      self.skippedExpired = skippedExpired
      self.skippedOverLimits = skippedOverLimits
      self.writtenAt = writtenAt
    }
  }
}

extension MemoryLayer where Key: Codable, Value: Codable {
  /// Writes every unexpired entry, with its expiry and in recency order, to a snapshot file at
  /// `url`, replacing any file there atomically.
  ///
  /// The file is written next to `url` under a temporary name, flushed to disk, renamed over
  /// `url` and the directory flushed: a crash or a failure at any point leaves the previous
  /// snapshot (or no file) in place, never a partial one. The file is readable by its owner only
  /// (mode `0600`), since cached values may be private. Temporary files that killed writes left
  /// behind for more than ten minutes are removed. The entries are copied one lock segment at a
  /// time, so the snapshot reflects each segment at one instant while other tasks keep using the
  /// layer; it does not change recency or statistics.
  ///
  /// Safe from any context. Encoding and file I/O run on a dispatch queue of their own, not on
  /// the cooperative thread pool; the whole payload is built in memory first. Not cancellable:
  /// once started, the write completes.
  ///
  /// - Parameter url: A file URL in an existing directory; the file is created or replaced.
  /// - Returns: The number of entries written.
  /// - Throws: ``PersistenceError`` naming the file: ``PersistenceError/Code/encodingFailed``
  ///   when a key or value fails to encode, ``PersistenceError/Code/noSpace``,
  ///   ``PersistenceError/Code/readOnly`` or ``PersistenceError/Code/ioFailure`` when the file
  ///   cannot be written. The previous file at `url` is intact then.
  @discardableResult
  public nonisolated func writeSnapshot(to url: URL) async throws -> Int {
    try await writeSnapshot(to: url, beforeRename: nil)
  }

  /// ``writeSnapshot(to:)`` with a seam that fails the write just before its rename.
  nonisolated func writeSnapshot(to url: URL, beforeRename: (@Sendable () throws -> Void)?) async throws -> Int {
    let store = self.store
    let clock = store.clock
    return try await SnapshotFile.perform {
      let now = clock.now
      let entries = Self.leastRecentFirst(store.entriesInEvictionOrder(unexpiredAt: now.nanosecondsSince1970))
      let records = entries.map {
        SnapshotRecord(
          key: $0.key, value: $0.entry.value, expiry: $0.entry.expiresAt?.nanosecondsSince1970 ?? .max,
          metadata: $0.entry.metadata)
      }
      let payload: Data
      do {
        let encoder = PropertyListEncoder()
        encoder.outputFormat = .binary
        payload = try encoder.encode(records)
      } catch {
        throw PersistenceError(
          code: .encodingFailed,
          message: "cannot encode the entries for the snapshot \(url.path) as a property list; nothing was written",
          underlying: error)
      }
      try SnapshotFile.writeSnapshot(
        payload: payload, entryCount: records.count,
        version: records.contains { !$0.metadata.isEmpty } ? 2 : 1, writtenAt: now, to: url,
        beforeRename: beforeRename)
      return records.count
    }
  }

  /// Inserts the unexpired entries of the snapshot file at `url`, keeping their expiries and
  /// their recency order; returns `nil` when there is no file at `url`.
  ///
  /// Call it at launch, before the layer is used. The entries are inserted as by
  /// ``insert(_:for:)``, from the least to the most recently used, so they replace entries with
  /// the same keys, count as more recently used than the entries already held, and expire no
  /// later than ``Configuration-swift.struct/timeToLive`` from now. Entries that have expired by
  /// the layer's clock are skipped.
  ///
  /// The count and cost limits hold, and a layer smaller than the snapshot keeps the most
  /// recently used entries, whatever its ``Configuration-swift.struct/evictionPolicy``: the
  /// entries restored are the most recent ones that fit the limits together (exact LRU's choice;
  /// one that alone costs more than the cost limit is refused, as by an insert), the entries
  /// already held that the policy would evict first make room for them, and the older entries
  /// of the snapshot are left out and counted in ``SnapshotRestoreResult/skippedOverLimits``.
  /// An admission policy never turns a restored entry away in favour of an older one.
  ///
  /// A damaged snapshot is reported, never trusted and never a crash: the file is checked whole
  /// (header, length and checksums) and decoded before anything is inserted, and on any error the
  /// layer is left exactly as it was. The file is not deleted; the next
  /// ``writeSnapshot(to:)`` replaces it.
  ///
  /// ```swift
  /// do {
  ///     try await memory.restoreSnapshot(from: snapshotURL)
  /// } catch {
  ///     logger.warning("starting with an empty cache: \(error)")
  /// }
  /// ```
  ///
  /// Safe from any context. Reading, decoding and inserting run on a dispatch queue of their
  /// own, not on the cooperative thread pool. O(n) in the entries of the snapshot. Not
  /// cancellable: once started, the restore completes.
  ///
  /// - Parameter url: The file URL of a snapshot written by ``writeSnapshot(to:)``.
  /// - Returns: What was restored and skipped, or `nil` when no file exists at `url` (a first
  ///   launch): a missing snapshot is nothing to restore, not an error.
  /// - Throws: ``PersistenceError`` naming the file: ``PersistenceError/Code/corrupted`` when it
  ///   is empty, truncated, damaged or not a snapshot at all;
  ///   ``PersistenceError/Code/decodingFailed`` when it was written by a newer format version or
  ///   its entries do not decode as `Key` and `Value` (the types changed);
  ///   ``PersistenceError/Code/readOnly`` or ``PersistenceError/Code/ioFailure`` when it cannot be
  ///   read. ``AsyncCacheError/Code/invalidCost`` when the cost function returns a cost outside
  ///   `0..<2^43` for a restored value. The layer is unchanged in every case.
  @discardableResult
  public nonisolated func restoreSnapshot(from url: URL) async throws -> SnapshotRestoreResult? {
    let store = self.store
    let clock = store.clock
    return try await SnapshotFile.perform { () -> SnapshotRestoreResult? in
      guard let (header, payload) = try SnapshotFile.readSnapshot(from: url) else { return nil }
      let records: [SnapshotRecord<Key, Value>]
      do {
        records = try PropertyListDecoder().decode([SnapshotRecord<Key, Value>].self, from: payload)
      } catch {
        throw PersistenceError(
          code: .decodingFailed,
          message: "the entries of the snapshot \(url.path) do not decode as \(Key.self) keys and \(Value.self) values",
          underlying: error)
      }
      guard UInt64(records.count) == header.entryCount else {
        throw SnapshotFile.corrupted(url, "holds \(records.count) entries but its header says \(header.entryCount)")
      }
      let now = clock.now.nanosecondsSince1970
      let live = records.filter { $0.expiry > now }
      // Every cost is checked before the first insert, so that a refused value leaves the layer
      // unchanged.
      let entries = try live.map { record in
        let expiresAt = record.expiry == .max ? nil : CacheInstant(nanosecondsSince1970: record.expiry)
        return (
          record.key, CacheEntry(record.value, expiresAt: expiresAt, metadata: record.metadata),
          try store.cost(of: record.value, for: record.key)
        )
      }
      let (restored, leftOut, expiredMeanwhile) = store.restore(entries)
      return SnapshotRestoreResult(
        restored: restored,
        skippedExpired: records.count - live.count + expiredMeanwhile,
        skippedOverLimits: leftOut,
        writtenAt: CacheInstant(nanosecondsSince1970: header.writtenAt)
      )
    }
  }
}

extension MemoryLayer {
  /// Merges per-segment recency lists (each least recently used first) into one list, least
  /// recently used first.
  ///
  /// With one segment the order is exact. Segments do not share a clock of use, so each entry is
  /// placed by its relative position within its own segment: the oldest entries of every segment
  /// come first and the newest last, and each segment's order is kept. After a restore, where
  /// keys land in other segments (hash seeds change between launches), eviction then takes the
  /// entries that were least recently used in their segments first.
  static func leastRecentFirst<Element>(_ segments: [[Element]]) -> [Element] {
    guard segments.count > 1 else { return segments.first ?? [] }
    var ranked: [(rank: Double, segment: Int, index: Int)] = []
    ranked.reserveCapacity(segments.reduce(0) { $0 + $1.count })
    for (segment, elements) in segments.enumerated() {
      for index in elements.indices {
        ranked.append(((Double(index) + 0.5) / Double(elements.count), segment, index))
      }
    }
    ranked.sort { ($0.rank, $0.segment, $0.index) < ($1.rank, $1.segment, $1.index) }
    return ranked.map { segments[$0.segment][$0.index] }
  }
}

/// One entry of a snapshot's payload, encoded as `[key, value, expiry]`.
struct SnapshotRecord<Key: Codable & Sendable, Value: Codable & Sendable>: Codable, Sendable {
  var key: Key
  var value: Value
  /// Nanoseconds since 1970; `Int64.max` for never.
  var expiry: Int64
  /// Written as a fourth element only when not empty (format 2).
  var metadata: EntryMetadata

  init(key: Key, value: Value, expiry: Int64, metadata: EntryMetadata = EntryMetadata()) {
    self.key = key
    self.value = value
    self.expiry = expiry
    self.metadata = metadata
  }

  init(from decoder: any Decoder) throws {
    var container = try decoder.unkeyedContainer()
    key = try container.decode(Key.self)
    value = try container.decode(Value.self)
    expiry = try container.decode(Int64.self)
    metadata = EntryMetadata()
    if !container.isAtEnd {
      let stored = try container.decode(Data.self)
      let decoded = stored.withUnsafeBytes { bytes in
        Result { () throws(EntryMetadataError) in try EntryMetadata(decoding: bytes) }
      }
      switch decoded {
      case .success(let metadata): self.metadata = metadata
      case .failure(let error):
        throw DecodingError.dataCorruptedError(
          in: container, debugDescription: "a snapshot entry's metadata does not decode: \(error)")
      }
    }
    guard container.isAtEnd else {
      throw DecodingError.dataCorruptedError(in: container, debugDescription: "a snapshot entry has extra fields")
    }
  }

  func encode(to encoder: any Encoder) throws {
    var container = encoder.unkeyedContainer()
    try container.encode(key)
    try container.encode(value)
    try container.encode(expiry)
    if !metadata.isEmpty { try container.encode(Data(try metadata.encoded())) }
  }
}
