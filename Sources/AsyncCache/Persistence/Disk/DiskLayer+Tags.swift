import Foundation

// Tag invalidations on disk: one file beside the entries, read when the layer opens and
// rewritten, atomically, by each invalidation; entries are checked against them when read.
extension DiskLayer {
  /// The file that keeps the directory's tag invalidations (see ``TagInvalidationRecord``).
  static var tagFileName: String { "tag-invalidations" }

  /// Makes the entries filed under `tag` and produced at or before `instant` misses from now
  /// on, also after a restart (see ``AsyncCacheLayer/invalidate(tag:at:)``): records the instant
  /// in the directory's `tag-invalidations` file, written atomically and flushed to the device
  /// when it returns, in O(1) in the entries (the file holds one record per tag invalidated). A
  /// lookup that comes to such an entry deletes its file (counted as
  /// ``EvictionReason/invalidated``).
  ///
  /// - Throws: ``PersistenceError/Code/noSpace`` or ``PersistenceError/Code/readOnly`` when the
  ///   file cannot be written, ``PersistenceError/Code/ioFailure`` for other system errors; the
  ///   layer holds the entries dead all the same until it is closed.
  public func invalidate(tag: String, at instant: CacheInstant) async throws {
    try EntryMetadata.validate(tag: tag)
    guard tagInvalidations.record(tag, at: instant) else { return }
    try writeTagFile()
  }

  /// Reads the directory's tag invalidations into ``tagInvalidations``, and sweeps the temporary
  /// files of interrupted rewrites. A file that does not read back is damage: every entry is
  /// removed then, since any of them may have been invalidated.
  func loadTagFile() throws {
    let path = path(of: Self.tagFileName)
    let bytes: [UInt8]
    do throws(DiskSystemError) {
      let descriptor = try fileSystem.openForReading(path)
      defer { try? fileSystem.close(descriptor) }
      let (buffer, count) = try readWholeFile(descriptor, expectedSize: 4_096)
      bytes = Array(UnsafeRawBufferPointer(rebasing: buffer[..<count]))
      buffer.deallocate()
    } catch {
      guard error.code == ENOENT else { throw failure(error, doing: "read the tag invalidations", writing: false) }
      return
    }
    do {
      for (tag, instant) in try TagInvalidationRecord.decode(bytes) { tagInvalidations.record(tag, at: instant) }
    } catch {
      layerEnvironment.log(
        .error, "the tag invalidations file is damaged; every entry was removed, since any may have been invalidated",
        metadata: ["file": Self.tagFileName, "reason": "\(error)"])
      damagedEntries += 1
      try removeAllFiles()
      try? fileSystem.removeFile(path)
    }
  }

  /// Whether `name` is a temporary file of a rewrite of the tag invalidations.
  static func isTemporaryTagFileName(_ name: String) -> Bool {
    name.hasPrefix(tagFileName + ".tmp-")
  }

  /// Writes every invalidation the layer knows to the tag file: a temporary file, `fsync`,
  /// `rename`, `fsync` of the directory.
  private func writeTagFile() throws {
    let bytes = TagInvalidationRecord.encode(tagInvalidations.all)
    let finalPath = path(of: Self.tagFileName)
    let temporaryPath = finalPath + ".tmp-" + Self.randomSuffix()
    do throws(DiskSystemError) {
      let descriptor = try createTemporaryFile(temporaryPath)
      var isOpen = true
      var temporaryExists = true
      defer {
        if isOpen { try? fileSystem.close(descriptor) }
        if temporaryExists { try? fileSystem.removeFile(temporaryPath) }
      }
      let written: Result<Void, DiskSystemError> = bytes.withUnsafeBytes { bytes in
        Result { () throws(DiskSystemError) in try writeAll(descriptor, bytes) }
      }
      try written.get()
      try fileSystem.synchronize(descriptor)
      isOpen = false
      try fileSystem.close(descriptor)
      try fileSystem.rename(temporaryPath, to: finalPath)
      temporaryExists = false
      try fileSystem.synchronizeDirectory(directoryPath)
    } catch {
      throw failure(error, doing: "record the invalidation of a tag", writing: true)
    }
  }
}
