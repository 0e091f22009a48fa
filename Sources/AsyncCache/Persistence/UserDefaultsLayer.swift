import Dispatch
public import Foundation

/// A layer that keeps small values in a named `UserDefaults` suite, clearable without touching
/// anything else stored there.
///
/// Each entry is one defaults key, `asynccache.<namespace>.<encoded key>`, holding the encoded
/// value behind a small header (magic, format version, expiry and an XXH64 checksum seeded with
/// the defaults key). A stored value that is damaged, foreign (put there by other code), of
/// another format version, or no longer decodes is a miss: it is removed and counted in
/// ``statistics``, never returned and never a crash. ``removeAll()`` removes this layer's keys and
/// nothing else: not the suite's other keys, not other suites.
///
/// ```swift
/// let settings = try UserDefaultsLayer<String, Preferences>(
///     suiteName: "group.com.example.app",
///     configuration: .init(timeToLive: .seconds(86_400)))
/// try await settings.insert(CacheEntry(preferences), for: "current")
/// let cached = try await settings.value(for: "current")
/// ```
///
/// UserDefaults holds a whole suite in memory and rewrites it on change, so it suits small
/// values: ``Configuration-swift.struct/maximumEntrySize`` (64 KiB by default) refuses bigger ones.
/// Use a disk or SQLite layer for anything large or numerous.
///
/// The layer is an actor that runs on a dispatch queue of its own, not on the cooperative thread
/// pool, because UserDefaults may block on file I/O. On Linux, where swift-corelibs-foundation
/// writes a suite to disk (`$XDG_CONFIG_HOME` or `~/.config`, `<suite>.plist`) only when it is
/// synchronized, the layer synchronizes after every change; on Apple platforms the system
/// persists changes on its own.
///
/// Expiry: an entry expires at the earlier of its own ``CacheEntry/expiresAt`` and
/// ``Configuration-swift.struct/timeToLive`` after it was inserted, read from the injected
/// ``Configuration-swift.struct/clock``. Expired entries are misses, removed when found or by
/// ``removeExpired()``.
public final actor UserDefaultsLayer<Key: Hashable & Sendable, Value: Sendable>: EnvironmentFollowingLayer {
  /// The name of the `UserDefaults` suite the layer stores its entries in.
  public nonisolated let suiteName: String

  /// The configuration the layer was created with.
  public nonisolated let configuration: Configuration
  /// The clock and logger the layer reads: its configuration's, or those of the cache or chain
  /// it is in.
  package nonisolated let layerEnvironment: LayerEnvironment

  private nonisolated let keyEncoding: CacheKeyEncoding<Key>
  private nonisolated let valueCoder: CacheValueCoder<Value>
  /// `asynccache.<namespace>.`: the start of every defaults key of this layer.
  private nonisolated let prefix: String
  private nonisolated let executor: BlockingExecutor
  /// Created here and never handed out: `UserDefaults` is not `Sendable` everywhere, and only
  /// this actor's jobs use it.
  private let defaults: UserDefaults
  private var counters = Statistics()
  /// The tag record last read from the suite, and what it holds (see ``invalidate(tag:at:)``).
  private var tagRecord: (data: Data, invalidations: TagInvalidations)?

  /// The executor of the layer: a thread of its own (a `BlockingExecutor`), so that UserDefaults' file
  /// I/O never blocks the cooperative thread pool.
  public nonisolated var unownedExecutor: UnownedSerialExecutor {
    executor.asUnownedSerialExecutor()
  }

  /// Creates a layer that stores entries in the `UserDefaults` suite `suiteName`.
  ///
  /// Layers of one suite and namespace share their entries. Safe from any context; UserDefaults
  /// may read the suite from disk when it is first used.
  ///
  /// - Parameters:
  ///   - suiteName: The suite, an identifier such as `com.example.app.cache` or an app group.
  ///   - configuration: The namespace, size limit, expiry and clock.
  ///   - keyEncoding: How keys become the strings in defaults keys, and back (for ``keys``).
  ///   - valueCoder: How values become the stored bytes, and back.
  /// - Throws: ``AsyncCacheError/Code/invalidConfiguration`` naming the bad input when the suite
  ///   name is empty, is `NSGlobalDomain` or the app's bundle identifier (which UserDefaults
  ///   rejects as suites), looks like a path (`/`, `.`, `..`, NUL), is longer than 200 bytes or
  ///   is refused by UserDefaults, or when a configuration value is out of range.
  public init(
    suiteName: String,
    configuration: Configuration = Configuration(),
    keyEncoding: CacheKeyEncoding<Key>,
    valueCoder: CacheValueCoder<Value>
  ) throws {
    try configuration.validate()
    try Self.validate(suiteName: suiteName)
    guard let defaults = UserDefaults(suiteName: suiteName) else {
      throw AsyncCacheError.invalidConfiguration(
        "UserDefaultsLayer suite name \(suiteName.debugDescription) is refused by UserDefaults")
    }
    self.suiteName = suiteName
    self.configuration = configuration
    self.layerEnvironment = LayerEnvironment(
      clock: configuration.$clock, logger: configuration.$logger, source: "UserDefaultsLayer",
      context: ["suite": suiteName, "namespace": configuration.namespace])
    self.keyEncoding = keyEncoding
    self.valueCoder = valueCoder
    // One namespace, whichever way its accents are written (see CacheKeyEncoding's key identity).
    self.prefix = "asynccache.\(configuration.namespace.nfcNormalized)."
    self.executor = try BlockingExecutor(label: "AsyncCache.UserDefaultsLayer(\(suiteName))")
    self.defaults = defaults
  }

  static func validate(suiteName: String) throws {
    let problem: String?
    if suiteName.isEmpty {
      problem = "is empty"
    } else if suiteName == "NSGlobalDomain" {
      problem = "is the global domain, which UserDefaults does not accept as a suite"
    } else if suiteName == Bundle.main.bundleIdentifier {
      problem = "is the app's bundle identifier, which UserDefaults does not accept as a suite"
    } else if suiteName.utf8.contains(UInt8(ascii: "/")) || suiteName.utf8.contains(0) || suiteName == "."
      || suiteName == ".."
    {
      problem = "looks like a path; a suite name is an identifier such as com.example.app.cache"
    } else if suiteName.utf8.count > 200 {
      problem = "is \(suiteName.utf8.count) bytes long; it must be at most 200"
    } else {
      problem = nil
    }
    if let problem {
      throw AsyncCacheError.invalidConfiguration(
        "UserDefaultsLayer suite name \(String(suiteName.prefix(300)).debugDescription) \(problem)")
    }
  }

  // MARK: Reading

  /// Returns the unexpired entry for `key`, or `nil`; an expired, damaged or undecodable stored
  /// value is a miss that is removed and counted.
  ///
  /// Safe from any context; runs on the layer's queue. Costs a dictionary lookup, a checksum of
  /// the value and its decoding; removing a bad value also writes the suite (on Linux).
  ///
  /// - Throws: ``PersistenceError/Code/encodingFailed`` when the key cannot be encoded.
  public func entry(for key: Key) throws -> CacheEntry<Value>? {
    let defaultsKey = try self.defaultsKey(for: key)
    guard let object = defaults.object(forKey: defaultsKey) else {
      counters.misses += 1
      return nil
    }
    guard let (expiry, metadata, payload) = UserDefaultsRecord.parse(object, defaultsKey: defaultsKey) else {
      discard(defaultsKey, countingAs: \.damagedEntries)
      logDiscarded(defaultsKey, reason: "damaged, foreign, or of another format version")
      return nil
    }
    guard expiry > followedClock.now.nanosecondsSince1970 else {
      discard(defaultsKey, countingAs: \.expired)
      return nil
    }
    if !metadata.tags.isEmpty {
      guard let invalidations = try tagInvalidations() else {
        // The record was damaged: every entry was removed, this one with them.
        counters.misses += 1
        return nil
      }
      if invalidations.kills(metadata) {
        discard(defaultsKey, countingAs: \.invalidated)
        return nil
      }
    }
    let value: Value
    do {
      value = try valueCoder.decode(payload)
    } catch {
      discard(defaultsKey, countingAs: \.damagedEntries)
      logDiscarded(defaultsKey, reason: "the value does not decode: \(CacheLogger.describe(error))")
      return nil
    }
    counters.hits += 1
    return CacheEntry(
      value, expiresAt: expiry == .max ? nil : CacheInstant(nanosecondsSince1970: expiry), metadata: metadata)
  }

  /// Returns the unexpired value for `key`, or `nil`, like ``entry(for:)``.
  ///
  /// - Throws: ``PersistenceError/Code/encodingFailed`` when the key cannot be encoded.
  public func value(for key: Key) throws -> Value? {
    try entry(for: key)?.value
  }

  // MARK: Writing

  /// Stores `entry` for `key`, replacing any previous entry.
  ///
  /// The entry expires at the earlier of `entry.expiresAt` and
  /// ``Configuration-swift.struct/timeToLive`` from now; an already expired entry is not stored
  /// (and removes the previous one). Safe from any context; runs on the layer's queue. Costs the
  /// value's encoding and a checksum, plus a write of the suite on Linux.
  ///
  /// - Throws: ``PersistenceError`` naming the key: ``PersistenceError/Code/valueTooLarge`` when
  ///   the encoded value takes more than ``Configuration-swift.struct/maximumEntrySize``
  ///   bytes (value and metadata), ``PersistenceError/Code/encodingFailed`` when the key or value
  ///   cannot be encoded or the metadata is over one of ``EntryMetadata``'s limits (in each case
  ///   the previous entry is removed, so the layer never serves a value older than
  ///   the one it refused), ``PersistenceError/Code/ioFailure`` when the suite cannot be written
  ///   to disk (Linux; the entry stays readable in this process).
  public func insert(_ entry: CacheEntry<Value>, for key: Key) throws {
    let defaultsKey = try self.defaultsKey(for: key)
    let now = followedClock.now
    let capped = entry.expiring(noLaterThan: configuration.timeToLive.map { now.advanced(by: $0) })
    if let expiresAt = capped.expiresAt, expiresAt <= now {
      try removeStored(defaultsKey)
      layerEnvironment.logExpiredArrival(key: encodedKey(of: defaultsKey), expiresAt: expiresAt, now: now)
      return
    }
    let encodedKey = encodedKey(of: defaultsKey)
    let payload: Data
    do {
      payload = try valueCoder.encode(capped.value)
    } catch {
      try? removeStored(defaultsKey)
      throw PersistenceError(
        code: .encodingFailed,
        message: "UserDefaultsLayer(\(suiteName)) cannot encode the value for key "
          + "\(String(encodedKey.prefix(200)).debugDescription); the previous entry was removed",
        underlying: error)
    }
    let metadata: [UInt8]
    do {
      metadata = try capped.metadata.encoded()
    } catch {
      try? removeStored(defaultsKey)
      throw PersistenceError.unstorableMetadata(
        key: String(encodedKey), layer: "UserDefaultsLayer(\(suiteName))", error)
    }
    // The metadata counts with the value: both are the entry's bytes.
    let size = payload.count + metadata.count
    guard size <= configuration.maximumEntrySize else {
      try? removeStored(defaultsKey)
      throw PersistenceError.valueTooLarge(
        key: String(encodedKey), size: size, limit: configuration.maximumEntrySize,
        layer: "UserDefaultsLayer(\(suiteName))")
    }
    let expiry = capped.expiresAt?.nanosecondsSince1970 ?? .max
    defaults.set(
      UserDefaultsRecord.make(payload: payload, metadata: metadata, expiry: expiry, defaultsKey: defaultsKey),
      forKey: defaultsKey)
    try persist()
  }

  /// Stores `value` for `key`, expiring after `timeToLive` (or per the configuration when `nil`).
  ///
  /// - Throws: As ``insert(_:for:)``.
  public func insert(_ value: Value, for key: Key, timeToLive: Duration? = nil) throws {
    let expiresAt = timeToLive.map { followedClock.now.advanced(by: $0) }
    try insert(CacheEntry(value, expiresAt: expiresAt), for: key)
  }

  /// Removes the entry for `key`, if any. Safe from any context; runs on the layer's queue.
  ///
  /// - Throws: ``PersistenceError/Code/encodingFailed`` when the key cannot be encoded,
  ///   ``PersistenceError/Code/ioFailure`` when the suite cannot be written to disk (Linux).
  public func removeValue(for key: Key) throws {
    try removeStored(defaultsKey(for: key))
  }

  /// Removes every entry of this layer: the suite's keys that start with
  /// `asynccache.<namespace>.`, and nothing else (no other key of the suite, no other suite).
  ///
  /// Safe from any context; runs on the layer's queue. O(n) in the suite's keys.
  ///
  /// - Throws: ``PersistenceError/Code/ioFailure`` when the suite cannot be written to disk
  ///   (Linux).
  public func removeAll() throws {
    for (defaultsKey, _) in ownedEntries() { defaults.removeObject(forKey: defaultsKey) }
    try persist()
  }

  /// Removes every expired entry, and every damaged one, and returns how many it removed.
  ///
  /// Expired entries are also removed when a lookup finds them; call this to reclaim their space
  /// sooner. Safe from any context; runs on the layer's queue. O(n) in the suite's keys and
  /// the size of this layer's values (each header and checksum is checked; values are not
  /// decoded).
  ///
  /// - Throws: ``PersistenceError/Code/ioFailure`` when the suite cannot be written to disk
  ///   (Linux).
  @discardableResult
  public func removeExpired() throws -> Int {
    let now = followedClock.now.nanosecondsSince1970
    var removed = 0
    for (defaultsKey, object) in ownedEntries() {
      if let (expiry, _, _) = UserDefaultsRecord.parse(object, defaultsKey: defaultsKey) {
        guard expiry <= now else { continue }
        counters.expired += 1
      } else {
        counters.damagedEntries += 1
        logDiscarded(defaultsKey, reason: "damaged, foreign, or of another format version")
      }
      defaults.removeObject(forKey: defaultsKey)
      removed += 1
    }
    if removed > 0 { try persist() }
    return removed
  }

  // MARK: Introspection

  /// The keys of the unexpired entries, in no particular order.
  ///
  /// Stored values that are damaged, and defaults keys that do not decode with the layer's
  /// ``CacheKeyEncoding``, are left out (a lookup or ``removeExpired()`` removes the damaged
  /// ones). Safe from any context; runs on the layer's queue. O(n) in the suite's keys and the
  /// size of this layer's values.
  public var keys: [Key] {
    let now = followedClock.now.nanosecondsSince1970
    return ownedEntries().compactMap { defaultsKey, object in
      guard let (expiry, _, _) = UserDefaultsRecord.parse(object, defaultsKey: defaultsKey), expiry > now else {
        return nil
      }
      // A key stored before keys were normalized, not in NFC, is one no lookup finds.
      let encoded = encodedKey(of: defaultsKey)
      return encoded.isNFC ? try? keyEncoding.decode(encoded) : nil
    }
  }

  /// Lookups and removals since the layer was created. Safe from any context. O(1).
  public var statistics: Statistics { counters }

  /// Says, at notice, that nothing was left to write (on Linux each change was written to the
  /// suite's file as it was made; on Apple platforms the system writes it), with the entries
  /// that stay in the suite. The layer stays usable. Called by the ``LoadingCache/close()`` or
  /// ``CacheChain/close()`` that holds it. O(n) in the suite's keys.
  public func close() async throws {
    let count = ownedEntries().count
    layerEnvironment.log(
      .notice,
      "closed; nothing was pending, each change was written as it was made; \(count) "
        + "\(count == 1 ? "entry" : "entries") stay in the suite",
      metadata: ["count": "\(count)"])
  }

  // MARK: Storage

  private func defaultsKey(for key: Key) throws -> String {
    prefix + (try keyEncoding.encode(key, for: "UserDefaultsLayer(\(suiteName))"))
  }

  /// This layer's defaults keys in the suite (only the suite's own domain: no global, argument
  /// or registration defaults), with their stored objects.
  private func ownedEntries() -> [(String, Any)] {
    guard let domain = defaults.persistentDomain(forName: suiteName) else { return [] }
    // Compared as bytes: `hasPrefix` compares characters, and an encoded key that starts with a
    // combining mark joins the prefix's final `.` into one character that is not `.`.
    return domain.filter { $0.key.utf8.starts(with: prefix.utf8) }.map { ($0.key, $0.value) }
  }

  /// The encoded key in one of this layer's defaults keys: what follows the prefix, in bytes
  /// (not characters, for the reason ``ownedEntries()`` gives).
  private func encodedKey(of defaultsKey: String) -> String {
    String(decoding: defaultsKey.utf8.dropFirst(prefix.utf8.count), as: UTF8.self)
  }

  private func removeStored(_ defaultsKey: String) throws {
    guard defaults.object(forKey: defaultsKey) != nil else { return }
    defaults.removeObject(forKey: defaultsKey)
    try persist()
  }

  /// Removes a stored value that a lookup cannot use, and counts it and the miss. A failure to
  /// write the suite is not the caller's problem here: the value is gone from this process.
  private func discard(_ defaultsKey: String, countingAs counter: WritableKeyPath<Statistics, Int>) {
    counters.misses += 1
    counters[keyPath: counter] += 1
    defaults.removeObject(forKey: defaultsKey)
    do {
      try persist()
    } catch {
      layerEnvironment.log(
        .warning, "could not write the suite after removing a stored value; the removal may not last",
        metadata: ["key": CacheLogger.describe(encodedKey(of: defaultsKey)), "error": "\(error)"])
    }
  }

  /// `.warning`: a stored value that a lookup or ``removeExpired()`` cannot use was removed.
  private func logDiscarded(_ defaultsKey: String, reason: @autoclosure () -> String) {
    layerEnvironment.log(
      .warning, "a stored value was removed; a miss",
      metadata: ["key": CacheLogger.describe(encodedKey(of: defaultsKey)), "reason": reason()])
  }

  // MARK: Tags

  /// The defaults key of the namespace's tag invalidations: outside the entries' prefix, so that
  /// no key and no ``removeAll()`` reaches it.
  private var tagRecordKey: String { "asynccache-tags.\(configuration.namespace.nfcNormalized)" }

  /// Makes the entries of this namespace filed under `tag` and produced at or before `instant`
  /// misses from now on, for every layer of the suite and namespace, also after a restart (see
  /// ``AsyncCacheLayer/invalidate(tag:at:)``): records the instant in one value of the suite
  /// (`asynccache-tags.<namespace>`), in O(1) in the entries. A lookup that comes to such an
  /// entry removes it (counted in ``Statistics/invalidated``).
  ///
  /// - Throws: ``PersistenceError/Code/ioFailure`` when the suite cannot be written to disk
  ///   (Linux; the invalidation holds in this process).
  public func invalidate(tag: String, at instant: CacheInstant) async throws {
    try EntryMetadata.validate(tag: tag)
    let invalidations = try tagInvalidations() ?? TagInvalidations()
    guard invalidations.record(tag, at: instant) else { return }
    let data = Data(TagInvalidationRecord.encode(invalidations.all))
    defaults.set(data, forKey: tagRecordKey)
    tagRecord = (data, invalidations)
    try persist()
  }

  /// The namespace's tag invalidations, as the suite holds them now (read again only when the
  /// stored record changed). A record that does not read back is damage: every entry of the
  /// namespace is removed then, since any may have been invalidated, the record starts over,
  /// and the answer is `nil`.
  private func tagInvalidations() throws -> TagInvalidations? {
    let stored = defaults.data(forKey: tagRecordKey) ?? Data()
    if let tagRecord, tagRecord.data == stored { return tagRecord.invalidations }
    let invalidations = TagInvalidations()
    if !stored.isEmpty {
      do {
        for (tag, instant) in try TagInvalidationRecord.decode(stored) { invalidations.record(tag, at: instant) }
      } catch {
        layerEnvironment.log(
          .error, "the tag invalidations are damaged; every entry was removed, since any may have been invalidated",
          metadata: ["key": tagRecordKey, "reason": "\(error)"])
        counters.damagedEntries += 1
        for (defaultsKey, _) in ownedEntries() { defaults.removeObject(forKey: defaultsKey) }
        defaults.removeObject(forKey: tagRecordKey)
        try persist()
        tagRecord = (Data(), invalidations)
        return nil
      }
    }
    tagRecord = (stored, invalidations)
    return invalidations
  }

  /// Writes the suite to disk where the platform does not on its own.
  private func persist() throws {
    #if !canImport(Darwin)
      guard defaults.synchronize() else {
        throw PersistenceError(
          code: .ioFailure,
          message: "UserDefaults could not write the suite \(suiteName.debugDescription) to disk; the change is "
            + "visible in this process only")
      }
    #endif
  }
}

extension UserDefaultsLayer where Key: CacheKeyEncodable {
  /// Creates a layer whose keys are stored with their type's default encoding
  /// (``CacheKeyEncodable``), and values stored with
  /// `valueCoder`.
  ///
  /// - Throws: As ``init(suiteName:configuration:keyEncoding:valueCoder:)``.
  public init(
    suiteName: String,
    configuration: Configuration = Configuration(),
    valueCoder: CacheValueCoder<Value>
  ) throws {
    try self.init(
      suiteName: suiteName, configuration: configuration, keyEncoding: Key.cacheKeyEncoding, valueCoder: valueCoder)
  }
}

extension UserDefaultsLayer where Key: CacheKeyEncodable, Value == Data {
  /// Creates a layer of `Data` values, stored as they are, whose keys are stored with their
  /// type's default encoding (``CacheKeyEncodable``).
  ///
  /// - Throws: As ``init(suiteName:configuration:keyEncoding:valueCoder:)``.
  public init(suiteName: String, configuration: Configuration = Configuration()) throws {
    try self.init(
      suiteName: suiteName, configuration: configuration, keyEncoding: Key.cacheKeyEncoding, valueCoder: .data)
  }
}

extension UserDefaultsLayer where Key: CacheKeyEncodable, Value: Codable {
  /// Creates a layer whose keys are stored with their type's default encoding
  /// (``CacheKeyEncodable``), and `Codable` values, stored as
  /// JSON.
  ///
  /// - Throws: As ``init(suiteName:configuration:keyEncoding:valueCoder:)``.
  public init(suiteName: String, configuration: Configuration = Configuration()) throws {
    try self.init(
      suiteName: suiteName, configuration: configuration, keyEncoding: Key.cacheKeyEncoding, valueCoder: .json)
  }
}

extension UserDefaultsLayer {
  /// A snapshot of a UserDefaults layer's counters.
  public struct Statistics: Sendable, Hashable {
    /// Lookups that found an unexpired, intact entry.
    public var hits = 0
    /// Lookups that found nothing, or a stored value that was expired, damaged or invalidated.
    public var misses = 0
    /// Expired entries removed, by lookups and by ``UserDefaultsLayer/removeExpired()``.
    public var expired = 0
    /// Stored values removed because they were damaged, foreign, of another format version or
    /// did not decode.
    public var damagedEntries = 0
    /// Entries removed by lookups because a tag they were filed under was invalidated after
    /// they were produced (see ``UserDefaultsLayer/invalidate(tag:at:)``).
    public var invalidated = 0
  }
}

/// The bytes a ``UserDefaultsLayer`` stores for an entry: a 24-byte header, the entry's
/// metadata if it has any, then the encoded value. Integers are little-endian.
///
/// | Offset | Size | Field |
/// |---|---|---|
/// | 0 | 4 | magic `ACUD` |
/// | 4 | 1 | format version: `1` without metadata, `2` with |
/// | 5 | 1 | zero |
/// | 6 | 2 | version 2: the metadata's length (1 or more); version 1: zero |
/// | 8 | 8 | expiry, nanoseconds since 1970 (`Int64.max` for never) |
/// | 16 | 8 | XXH64 of bytes 0..<16, then of the metadata (version 2), then of the value, each seeded with the last digest, the first with the XXH64 of the defaults key |
/// | 24 | | version 2: the metadata (`EntryMetadata`'s stored form); then the value |
///
/// An entry without metadata is written as version 1, byte for byte what libraries before
/// metadata wrote and read; both versions are read. Seeding with the defaults key means a value
/// copied to another key does not verify.
enum UserDefaultsRecord {
  static let magic: [UInt8] = [0x41, 0x43, 0x55, 0x44]
  static let formatVersion: UInt8 = 1
  static let metadataFormatVersion: UInt8 = 2
  static let headerSize = 24

  /// The record of `payload` and `metadata` (empty for none; at most 65,535 bytes, which
  /// ``EntryMetadata``'s limits keep it far below).
  static func make(payload: Data, metadata: [UInt8], expiry: Int64, defaultsKey: String) -> Data {
    let length = UInt16(metadata.count)
    var bytes =
      magic + [
        metadata.isEmpty ? formatVersion : metadataFormatVersion, 0, UInt8(truncatingIfNeeded: length),
        UInt8(truncatingIfNeeded: length >> 8),
      ]
    withUnsafeBytes(of: expiry.littleEndian) { bytes.append(contentsOf: $0) }
    let checksum = self.checksum(header: bytes, metadata: metadata, payload: payload, defaultsKey: defaultsKey)
    withUnsafeBytes(of: checksum.littleEndian) { bytes.append(contentsOf: $0) }
    var record = Data(bytes)
    record.append(contentsOf: metadata)
    record.append(payload)
    return record
  }

  /// The expiry, metadata and value bytes of a stored object, or `nil` when it is not an intact
  /// record of a known format for `defaultsKey` (metadata that does not decode included).
  static func parse(_ object: Any, defaultsKey: String) -> (expiry: Int64, metadata: EntryMetadata, payload: Data)? {
    guard let data = object as? Data, data.count >= headerSize else { return nil }
    let bytes = [UInt8](data.prefix(headerSize))
    let metadataLength = Int(bytes[6]) | Int(bytes[7]) << 8
    guard Array(bytes[0..<4]) == magic, bytes[5] == 0,
      bytes[4] == formatVersion && metadataLength == 0 || bytes[4] == metadataFormatVersion && metadataLength > 0,
      data.count >= headerSize + metadataLength
    else { return nil }
    let body = data.dropFirst(headerSize)
    let metadataBytes = [UInt8](body.prefix(metadataLength))
    let payload = body.dropFirst(metadataLength)
    let expected = checksum(header: bytes[0..<16], metadata: metadataBytes, payload: payload, defaultsKey: defaultsKey)
    guard load(bytes, at: 16) == expected else { return nil }
    let decoded = metadataBytes.withUnsafeBytes { metadata in
      Result { () throws(EntryMetadataError) in try EntryMetadata(decoding: metadata) }
    }
    guard case .success(let metadata) = decoded else { return nil }
    return (Int64(bitPattern: load(bytes, at: 8)), metadata, Data(payload))
  }

  private static func checksum(
    header: some Collection<UInt8>, metadata: [UInt8], payload: Data, defaultsKey: String
  ) -> UInt64 {
    let seed = XXH64.hash(Array(defaultsKey.utf8))
    let headerDigest = XXH64.hash(Array(header), seed: seed)
    let metadataDigest = metadata.isEmpty ? headerDigest : XXH64.hash(metadata, seed: headerDigest)
    return payload.withUnsafeBytes { XXH64.hash($0, seed: metadataDigest) }
  }

  private static func load(_ bytes: [UInt8], at offset: Int) -> UInt64 {
    var value: UInt64 = 0
    for index in (offset..<offset + 8).reversed() { value = value << 8 | UInt64(bytes[index]) }
    return value
  }
}

extension UserDefaultsLayer {
  /// The clock expiry is read from: the configuration's, the one the layer follows (see
  /// ``CacheEnvironment``), or the wall clock. Safe from any context.
  public nonisolated var clock: any CacheClock { followedClock.clock }
}
