import Foundation

#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Android)
  import Android
#endif

// The layer's file operations. Every method here runs on the layer's executor and may block.
//
// Layout: one flat directory. File systems index directory entries (ext4 and XFS with hash
// trees, APFS with B-trees), so a lookup by name stays fast with many thousands of files, and a
// flat directory needs one directory `fsync` per write, no empty fan-out directories to clean up,
// and one listing to rebuild the index.
extension DiskLayer {
  /// How stale a file's modification time may get before a hit refreshes it. Recency across
  /// restarts needs only coarse precision, and each refresh dirties the file's inode.
  static var touchInterval: Int64 { 60_000_000_000 }

  /// What ``DiskLayer/inspectFile(named:digest:)`` found.
  enum Inspection {
    case entry(DiskIndex.Record)
    case damaged(DiskEntryFormat.Damage)
    case unreadable
  }

  // MARK: Opening

  /// Creates the directory if needed, sweeps temporary files, and rebuilds the index.
  func openDirectory() throws {
    do throws(DiskSystemError) {
      try fileSystem.createDirectory(directoryPath)
    } catch {
      throw failure(error, doing: "create the directory", writing: true)
    }
    // Here, where waiting is allowed: whether the directory's file system may be read on
    // callers' threads (`statfs` of a network file system may wait for its server).
    fileSystem.prepareCachedReads(in: directoryPath)
    let names: [String]
    do throws(DiskSystemError) {
      names = try fileSystem.contentsOfDirectory(directoryPath)
    } catch {
      throw failure(error, doing: "list the directory", writing: false)
    }
    // Only a clock given to the layer judges expiry at opening: a layer that follows its cache's
    // clock has not been put in the cache yet, and the wall clock may call expired what that
    // clock (a test's manual clock, say) does not. Lookups and eviction drop expired files then.
    let now = configuration.$clock != nil ? followedClock.now.nanosecondsSince1970 : .min
    var found: [DiskIndex.Record] = []
    var sweptTemporaryFiles = 0
    var expired = 0
    try loadTagFile()
    for name in names {
      if Self.isTemporaryFileName(name) || Self.isTemporaryTagFileName(name) {
        // Left by a process that died mid-write. Best effort: a read-only directory keeps them.
        if (try? fileSystem.removeFile(path(of: name))) != nil { sweptTemporaryFiles += 1 }
        continue
      }
      guard let digest = SHA256.Digest(hexString: name) else { continue }  // not ours
      switch inspectFile(named: name, digest: digest) {
      case .entry(let record) where record.expiresAt <= now:
        try? fileSystem.removeFile(path(of: name))
        evictions[.expired] += 1
        expired += 1
      case .entry(let record):
        found.append(record)
      case .damaged(let damage):
        let removed = (try? fileSystem.removeFile(path(of: name))) != nil
        damagedEntries += 1
        logDamagedFile(name, key: nil, reason: "\(damage)", removed: removed)
      case .unreadable:
        layerEnvironment.log(
          .warning, "an entry file cannot be read; it is left in place and not used",
          metadata: ["file": name])
        continue
      }
    }
    if sweptTemporaryFiles > 0 {
      layerEnvironment.log(
        .info, "removed \(sweptTemporaryFiles) temporary files left by interrupted writes",
        metadata: ["count": "\(sweptTemporaryFiles)"])
    }
    // Oldest first, so that the most recently modified file ends up most recently used.
    found.sort { ($0.touchedAt, $0.name.word0) < ($1.touchedAt, $1.name.word0) }
    for record in found { index.insert(record) }
    // The limits may have shrunk since the files were written.
    var overLimit = 0
    while index.count > 0,
      index.totalBytes > configuration.sizeLimit || index.count > (configuration.countLimit ?? .max)
    {
      let reason: EvictionReason = index.totalBytes > configuration.sizeLimit ? .costLimit : .countLimit
      discard(index.oldest, reason: reason)
      overLimit += 1
    }
    if overLimit > 0 {
      layerEnvironment.log(
        .info, "evicted \(overLimit) entries over the configured limits when opening",
        metadata: ["count": "\(overLimit)"])
    }
    layerEnvironment.log(
      .debug, "opened with \(index.count) entries",
      metadata: ["count": "\(index.count)", "bytes": "\(index.totalBytes)", "expiredRemoved": "\(expired)"])
  }

  /// The longest encoded key the layer reads back from a file header: 16 MiB.
  static var longestKey: Int { 16 << 20 }

  /// Reads the header and key of the entry file `name`, without reading its value.
  func inspectFile(named name: String, digest: SHA256.Digest) -> Inspection {
    guard let descriptor = try? fileSystem.openForReading(path(of: name)) else { return .unreadable }
    defer { try? fileSystem.close(descriptor) }
    guard let status = try? fileSystem.status(descriptor) else { return .unreadable }
    // One read usually brings the header and the key.
    var head = [UInt8](repeating: 0, count: Swift.min(status.size, 4096))
    guard let headCount = try? head.withUnsafeMutableBytes({ try readFully(descriptor, into: $0) }) else {
      return .unreadable
    }
    let header: DiskEntryFormat.Header
    do {
      header = try head.withUnsafeBytes { bytes in
        try DiskEntryFormat.parseHeader(UnsafeRawBufferPointer(rebasing: bytes[..<headCount]))
      }
    } catch let damage as DiskEntryFormat.Damage {
      return .damaged(damage)
    } catch {
      return .unreadable
    }
    guard header.fileSize == status.size else {
      return .damaged(.lengthMismatch(expected: header.fileSize, actual: status.size))
    }
    // Keys may be long, but not this long: a header claiming more is damage, not an allocation.
    guard header.keyLength <= Self.longestKey else { return .damaged(.misplacedKey) }
    var key = Array(head[DiskEntryFormat.headerSize..<Swift.min(headCount, header.fileSize)].prefix(header.keyLength))
    if key.count < header.keyLength {
      var rest = [UInt8](repeating: 0, count: header.keyLength - key.count)
      guard let restCount = try? rest.withUnsafeMutableBytes({ try readFully(descriptor, into: $0) }),
        restCount == rest.count
      else { return .damaged(.lengthMismatch(expected: header.fileSize, actual: status.size)) }
      key += rest
    }
    guard let keyString = String(validating: key, as: UTF8.self),
      key.withUnsafeBytes({ fileNameHash($0) }) == digest
    else { return .damaged(.misplacedKey) }
    return .entry(
      DiskIndex.Record(
        name: digest, key: keyString, size: status.size, expiresAt: header.expiresAt,
        touchedAt: status.modificationTime))
  }

  // MARK: Reading

  /// Reads, verifies and decodes the file of the index record at `slot`, whose key is `key`.
  func readEntry(at slot: Int, key: String, now: Int64) throws -> CacheEntry<Value>? {
    let record = index[slot]
    let descriptor: Int32
    do throws(DiskSystemError) {
      descriptor = try fileSystem.openForReading(path(of: record.name))
    } catch {
      guard error.code == ENOENT else { throw readFailure(error, key: key) }
      // Deleted behind the layer's back (with its directory, say): a plain miss.
      index.remove(slot)
      readCounts.misses.add(1, ordering: .relaxed)
      return nil
    }
    defer { try? fileSystem.close(descriptor) }
    let (buffer, count): (UnsafeMutableRawBufferPointer, Int)
    do throws(DiskSystemError) {
      (buffer, count) = try readWholeFile(descriptor, expectedSize: record.size)
    } catch {
      throw readFailure(error, key: key)
    }
    let file = UnsafeRawBufferPointer(rebasing: buffer[..<count])
    let header: DiskEntryFormat.Header
    let metadata: EntryMetadata
    do {
      header = try DiskEntryFormat.verify(file)
      metadata = try DiskEntryFormat.metadata(of: file, header: header)
    } catch {
      buffer.deallocate()
      discardDamaged(slot, reason: "\(error)")
      return nil
    }
    let keyBytes = UnsafeRawBufferPointer(
      rebasing: file[DiskEntryFormat.headerSize..<(DiskEntryFormat.headerSize + header.keyLength)])
    var wanted = key
    guard wanted.withUTF8({ keyBytes.elementsEqual(UnsafeRawBufferPointer($0)) }) else {
      // An intact file of another key under the same name: a hash collision, or a write by
      // someone else. Not damage, so it stays; the index learns whose file it is.
      let other = String(validating: keyBytes, as: UTF8.self)
      let placed = fileNameHash(keyBytes) == record.name
      buffer.deallocate()
      if let other, placed {
        // Replaces the record of the same name (which stays published for other threads).
        index.insert(
          DiskIndex.Record(
            name: record.name, key: other, size: count, expiresAt: header.expiresAt, touchedAt: record.touchedAt))
        layerEnvironment.log(
          .notice, "an entry file holds another key with the same file name; a miss for this key",
          metadata: [
            "file": record.name.hexString, "key": CacheLogger.describe(key), "other": CacheLogger.describe(other),
          ])
      } else {
        // Not the file this name should hold (copied or moved here): damage after all.
        index.remove(slot)
        let removed = (try? fileSystem.removeFile(path(of: record.name))) != nil
        damagedEntries += 1
        logDamagedFile(
          record.name.hexString, key: key, reason: "the file holds a key whose name is another file's",
          removed: removed)
      }
      readCounts.misses.add(1, ordering: .relaxed)
      return nil
    }
    if header.expiresAt <= now || tagInvalidations.kills(metadata) {
      buffer.deallocate()
      discard(slot, reason: header.expiresAt <= now ? .expired : .invalidated)
      readCounts.misses.add(1, ordering: .relaxed)
      return nil
    }
    // The value's bytes stay where they were read: the `Data` takes over the allocation.
    let payloadOffset = header.payloadOffset
    let payload = Data(
      bytesNoCopy: buffer.baseAddress! + payloadOffset, count: header.payloadLength,
      deallocator: .custom { pointer, _ in (pointer - payloadOffset).deallocate() })
    let value: Value
    do {
      value = try valueCoder.decode(payload)
    } catch {
      discardDamaged(slot, reason: "the value does not decode: \(CacheLogger.describe(error))")
      return nil
    }
    var slot = slot
    if count != record.size {
      // Rewritten behind the layer's back at another size: the index (and its limits, and the
      // size published for reads on callers' threads) learns the file's.
      index.insert(
        DiskIndex.Record(
          name: record.name, key: record.key, size: count, expiresAt: header.expiresAt, touchedAt: record.touchedAt))
      slot = index.slot(of: record.name) ?? slot
    }
    index.markUsed(slot)
    let wallNow = SystemTime.realtimeNanoseconds()
    if wallNow &- record.touchedAt >= Self.touchInterval {
      // Best effort: on a read-only file system the order is kept in memory only.
      _ = fileSystem.touch(descriptor)
      index.setTouched(slot, at: wallNow)
    }
    readCounts.hits.add(1, ordering: .relaxed)
    let expiresAt = header.expiresAt == DiskEntryFormat.neverExpires ? nil : header.expiresAt
    return CacheEntry(value, expiresAt: expiresAt.map(CacheInstant.init(nanosecondsSince1970:)), metadata: metadata)
  }

  /// Reads a whole file into a new allocation, which the caller deallocates; returns it and the
  /// number of bytes read. With an exact `expectedSize`, one `read` call suffices.
  func readWholeFile(
    _ descriptor: Int32, expectedSize: Int
  ) throws(DiskSystemError) -> (UnsafeMutableRawBufferPointer, Int) {
    // A file larger than any entry may be is damage; reading one byte past the limit shows it.
    let ceiling = Swift.max(maximumEntrySize, expectedSize) + 1
    var capacity = Swift.min(expectedSize + 1, ceiling)
    var buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: capacity, alignment: 16)
    var count = 0
    do throws(DiskSystemError) {
      while true {
        let read = try fileSystem.read(descriptor, into: UnsafeMutableRawBufferPointer(rebasing: buffer[count...]))
        if read == 0 { break }
        count += read
        if count == capacity {
          guard capacity < ceiling else { break }
          let larger = UnsafeMutableRawBufferPointer.allocate(
            byteCount: Swift.min(capacity * 2, ceiling), alignment: 16)
          larger.copyMemory(from: UnsafeRawBufferPointer(rebasing: buffer[..<count]))
          buffer.deallocate()
          buffer = larger
          capacity = larger.count
        } else if count >= expectedSize {
          // A short read of a regular file means its end was reached: skip the `read` that
          // would return 0. (Were it wrong, the length check would catch the short file.)
          break
        }
      }
    } catch {
      buffer.deallocate()
      throw error
    }
    return (buffer, count)
  }

  /// Reads until `buffer` is full or the file ends; returns the number of bytes read.
  func readFully(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(DiskSystemError) -> Int {
    var count = 0
    while count < buffer.count {
      let read = try fileSystem.read(descriptor, into: UnsafeMutableRawBufferPointer(rebasing: buffer[count...]))
      if read == 0 { break }
      count += read
    }
    return count
  }

  // MARK: Writing

  /// Deletes least recently used entries (never the file `name`, which is being replaced) until
  /// an entry of `size` bytes fits the limits.
  func makeRoom(for size: Int, replacing name: SHA256.Digest) throws {
    // The reads answered on callers' threads count in the order of use.
    applyReadsInPlace()
    var expiredRemoved = false
    while true {
      let replaced = index.slot(of: name)
      let replacedSize = replaced.map { index[$0].size } ?? 0
      let reason: EvictionReason
      if index.totalBytes - replacedSize + size > configuration.sizeLimit {
        reason = .costLimit
      } else if let countLimit = configuration.countLimit, index.count + (replaced == nil ? 1 : 0) > countLimit {
        reason = .countLimit
      } else {
        return
      }
      // Expired entries make room first: they are misses already.
      if !expiredRemoved {
        expiredRemoved = true
        if try removeExpiredEntries(sparing: replaced) > 0 { continue }
      }
      var victim = index.oldest
      if victim == replaced { victim = index[victim].newer }
      // Unreachable while maximumEntrySize <= sizeLimit and countLimit >= 1, which `validate` checks.
      guard victim >= 0 else { return }
      try deleteFile(at: victim)
      evictions[reason] += 1
    }
  }

  /// Writes an entry atomically: a temporary file, `fsync`, `rename`, `fsync` of the directory.
  func writeEntry(
    named name: SHA256.Digest, key: inout String, metadata: [UInt8], payload: Data, expiresAt: Int64
  ) throws {
    let finalPath = path(of: name)
    let temporaryPath = finalPath + ".tmp-" + Self.randomSuffix()
    let descriptor: Int32
    do throws(DiskSystemError) {
      descriptor = try createTemporaryFile(temporaryPath)
    } catch {
      throw failure(error, doing: "write the entry for key \(Self.describe(key))", writing: true)
    }
    var isOpen = true
    var temporaryExists = true
    defer {
      if isOpen { try? fileSystem.close(descriptor) }
      if temporaryExists { try? fileSystem.removeFile(temporaryPath) }
    }
    let size = DiskEntryFormat.headerSize + key.utf8.count + metadata.count + payload.count
    do {
      try key.withUTF8 { keyBuffer in
        let keyBytes = UnsafeRawBufferPointer(keyBuffer)
        try metadata.withUnsafeBytes { metadataBytes in
          try payload.withUnsafeBytes { payloadBytes in
            let header = DiskEntryFormat.header(
              key: keyBytes, metadata: metadataBytes, payload: payloadBytes, expiresAt: expiresAt)
            try header.withUnsafeBytes { try writeAll(descriptor, $0) }
            try writeAll(descriptor, keyBytes)
            try writeAll(descriptor, metadataBytes)
            try writeAll(descriptor, payloadBytes)
          }
        }
      }
      try fileSystem.synchronize(descriptor)
      isOpen = false
      try fileSystem.close(descriptor)
      try fileSystem.rename(temporaryPath, to: finalPath)
      temporaryExists = false
    } catch let error as DiskSystemError {
      throw failure(error, doing: "write the entry for key \(Self.describe(key))", writing: true)
    }
    index.insert(
      DiskIndex.Record(
        name: name, key: key, size: size, expiresAt: expiresAt, touchedAt: SystemTime.realtimeNanoseconds()))
    writes += 1
    do throws(DiskSystemError) {
      try fileSystem.synchronizeDirectory(directoryPath)
    } catch {
      // The new value is in place and readable; only its durability across a power loss is
      // in doubt, which the caller learns.
      throw failure(error, doing: "flush the directory after writing key \(Self.describe(key))", writing: true)
    }
  }

  /// Creates a temporary file, recreating the directory first if it was deleted.
  func createTemporaryFile(_ path: String) throws(DiskSystemError) -> Int32 {
    do throws(DiskSystemError) {
      return try fileSystem.createExclusively(path)
    } catch {
      guard error.code == ENOENT else { throw error }
      // The directory is gone, and every entry with it.
      let lost = index.count
      index.removeAll()
      try fileSystem.createDirectory(directoryPath)
      layerEnvironment.log(
        .warning, "the directory was deleted; recreated it, and its \(lost) entries are gone",
        metadata: ["count": "\(lost)"])
      return try fileSystem.createExclusively(path)
    }
  }

  /// Writes all of `bytes`, however many calls it takes.
  func writeAll(_ descriptor: Int32, _ bytes: UnsafeRawBufferPointer) throws(DiskSystemError) {
    var offset = 0
    while offset < bytes.count {
      let written = try fileSystem.write(descriptor, from: UnsafeRawBufferPointer(rebasing: bytes[offset...]))
      guard written > 0 else { throw DiskSystemError(code: EIO, operation: "write", path: "fd \(descriptor)") }
      offset += written
    }
  }

  // MARK: Removing

  /// Removes the entry of `key` from the file `name`, if the file holds it, and flushes the
  /// directory.
  func removeEntry(named name: SHA256.Digest, key: String) throws {
    guard let slot = index.slot(of: name), Self.sameBytes(index[slot].key, key) else { return }
    try deleteFile(at: slot)
    do throws(DiskSystemError) {
      try fileSystem.synchronizeDirectory(directoryPath)
    } catch {
      // A directory that is gone has nothing left to flush.
      guard error.code == ENOENT else {
        throw failure(error, doing: "flush the directory after removing key \(Self.describe(key))", writing: true)
      }
    }
  }

  /// Deletes every expired entry except the one at `spared` (the file being replaced); returns
  /// how many were deleted. O(n) in the entries held.
  func removeExpiredEntries(sparing spared: Int?) throws -> Int {
    let now = followedClock.now.nanosecondsSince1970
    let expired = index.records.filter { $0.expiresAt <= now }.map(\.name)
    var removed = 0
    for name in expired {
      guard let slot = index.slot(of: name), slot != spared else { continue }
      try deleteFile(at: slot)
      evictions[.expired] += 1
      removed += 1
    }
    return removed
  }

  /// Deletes the file of the record at `slot` and removes the record; a file that is already
  /// gone counts as deleted.
  func deleteFile(at slot: Int) throws {
    let record = index[slot]
    do throws(DiskSystemError) {
      try fileSystem.removeFile(path(of: record.name))
    } catch {
      guard error.code == ENOENT else {
        throw failure(error, doing: "delete the entry for key \(Self.describe(record.key))", writing: true)
      }
    }
    index.remove(slot)
  }

  /// Deletes the file at `slot` if possible, removes its record and counts the eviction.
  func discard(_ slot: Int, reason: EvictionReason) {
    try? fileSystem.removeFile(path(of: index[slot].name))
    index.remove(slot)
    evictions[reason] += 1
  }

  /// Deletes a damaged file if possible, removes its record, counts it and the miss, and logs it.
  func discardDamaged(_ slot: Int, reason: String) {
    let record = index[slot]
    let removed = (try? fileSystem.removeFile(path(of: record.name))) != nil
    index.remove(slot)
    damagedEntries += 1
    readCounts.misses.add(1, ordering: .relaxed)
    logDamagedFile(record.name.hexString, key: record.key, reason: reason, removed: removed)
  }

  /// Deletes every entry and temporary file in the directory.
  func removeAllFiles() throws {
    let names: [String]
    do throws(DiskSystemError) {
      names = try fileSystem.contentsOfDirectory(directoryPath)
    } catch {
      guard error.code == ENOENT else { throw failure(error, doing: "list the directory", writing: false) }
      index.removeAll()  // the directory is gone, and every entry with it
      return
    }
    var firstError: DiskSystemError?
    for name in names {
      let digest = SHA256.Digest(hexString: name)
      guard digest != nil || Self.isTemporaryFileName(name) else { continue }
      do throws(DiskSystemError) {
        try fileSystem.removeFile(path(of: name))
      } catch {
        if error.code != ENOENT {  // a file that is already gone counts as deleted
          firstError = firstError ?? error
          continue
        }
      }
      if let digest, let slot = index.slot(of: digest) { index.remove(slot) }
    }
    if firstError == nil {
      // Files the listing did not show were deleted behind the layer's back.
      index.removeAll()
      try? fileSystem.synchronizeDirectory(directoryPath)
    }
    if let firstError { throw failure(firstError, doing: "remove all entries", writing: true) }
  }

  // MARK: Names and errors

  /// Encodes a key, wrapping a failure in ``PersistenceError/Code/encodingFailed``.
  nonisolated func encode(_ key: Key) throws -> String {
    try keyEncoding.encode(key, for: "DiskLayer")
  }

  /// The name of the file of an encoded key.
  nonisolated func fileName(of encodedKey: inout String) -> SHA256.Digest {
    encodedKey.withUTF8 { fileNameHash(UnsafeRawBufferPointer($0)) }
  }

  nonisolated func path(of name: SHA256.Digest) -> String {
    // One allocation (every read builds one): the directory, a slash, the 64 digits.
    let directory = directoryPath.utf8
    return String(unsafeUninitializedCapacity: directory.count + 65) { buffer in
      var index = buffer.initialize(from: directory).1
      buffer[index] = UInt8(ascii: "/")
      index += 1
      name.writeHex(into: buffer, at: index)
      return index + 64
    }
  }

  nonisolated func path(of name: String) -> String {
    directoryPath + "/" + name
  }

  /// Whether two encoded keys are the same bytes (not merely canonically equivalent strings,
  /// which would be different files).
  static func sameBytes(_ lhs: String, _ rhs: String) -> Bool {
    lhs.utf8.count == rhs.utf8.count && lhs.utf8.elementsEqual(rhs.utf8)
  }

  /// Whether `name` is a temporary file of a write: `<64 hex digits>.tmp-<suffix>`.
  static func isTemporaryFileName(_ name: String) -> Bool {
    let utf8 = name.utf8
    guard utf8.count > 69, let marker = name.range(of: ".tmp-") else { return false }
    return SHA256.Digest(hexString: name[..<marker.lowerBound]) != nil
  }

  static func randomSuffix() -> String {
    let digits = String(UInt64.random(in: .min ... .max), radix: 16)
    return String(repeating: "0", count: 16 - digits.count) + digits
  }

  /// A key for a message: quoted, escaped, and cut at 200 characters.
  static func describe(_ key: String) -> String {
    key.count > 200 ? String(key.prefix(200)).debugDescription + "…" : key.debugDescription
  }

  /// The error for a failed system call while reading the entry of `key`.
  func readFailure(_ error: DiskSystemError, key: String) -> PersistenceError {
    failure(error, doing: "read the entry for key \(Self.describe(key))", writing: false)
  }

  /// A failed system call as a ``PersistenceError``: full and read-only file systems get their
  /// own codes when writing; anything else is ``PersistenceError/Code/ioFailure``.
  func failure(_ error: DiskSystemError, doing action: String, writing: Bool) -> PersistenceError {
    let code = writing ? PersistenceError.Code(writeErrno: error.code) : .ioFailure
    return PersistenceError(
      code: code, message: "DiskLayer could not \(action) in \(directoryPath): \(error)",
      underlying: error.posixError)
  }
}
