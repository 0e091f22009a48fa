import Dispatch
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

/// The file format of a memory layer's snapshot, and the blocking file I/O that reads and writes
/// it.
///
/// A snapshot is a 56-byte header followed by the payload. Integers are little-endian:
///
/// | Offset | Size | Field |
/// |---|---|---|
/// | 0 | 8 | magic `89 41 43 53 4E 41 50 0A` (`\x89ACSNAP\n`) |
/// | 8 | 4 | format version (`1`, or `2` when an entry has metadata) |
/// | 12 | 4 | flags, `0` |
/// | 16 | 8 | when it was written, nanoseconds since 1970 (`Int64`) |
/// | 24 | 8 | number of entries |
/// | 32 | 8 | payload length in bytes |
/// | 40 | 8 | XXH64 of the payload |
/// | 48 | 8 | XXH64 of bytes 0..<48 |
///
/// The payload of version 1 is a binary property list: an array of `[key, value, expiry]`
/// arrays, least recently used first, the expiry in nanoseconds since 1970 (`Int64.max` for
/// never). Version 2 (written when an entry has ``EntryMetadata``) adds a fourth element to
/// the arrays of entries that have metadata: its stored form, as data. Both are read. A file is written to a temporary sibling, flushed, renamed over the old snapshot and
/// the directory flushed, so a crash leaves either the old snapshot or the new one, whole.
enum SnapshotFile {
  static let magic: [UInt8] = [0x89, 0x41, 0x43, 0x53, 0x4E, 0x41, 0x50, 0x0A]
  /// The newest version this library reads; it writes 1 unless an entry has metadata.
  static let formatVersion: UInt32 = 2
  static let headerSize = 56
  /// How old a temporary file of an interrupted write must be before a later write removes it:
  /// old enough that no write still in progress (in another process) owns it.
  static let staleTemporaryFileAge: TimeInterval = 600
  static let temporarySuffix = ".snapshot-tmp"

  struct Header: Equatable {
    var formatVersion: UInt32
    var writtenAt: Int64
    var entryCount: UInt64
    var payloadLength: UInt64
    var payloadChecksum: UInt64
  }

  // MARK: Header

  /// The 56 header bytes for `header`, its own checksum included.
  static func bytes(of header: Header) -> [UInt8] {
    var bytes = magic
    bytes.reserveCapacity(headerSize)
    append(header.formatVersion, to: &bytes)
    append(UInt32(0), to: &bytes)
    append(UInt64(bitPattern: header.writtenAt), to: &bytes)
    append(header.entryCount, to: &bytes)
    append(header.payloadLength, to: &bytes)
    append(header.payloadChecksum, to: &bytes)
    append(XXH64.hash(bytes), to: &bytes)
    return bytes
  }

  /// Parses and checks the header of a file of `fileSize` bytes.
  ///
  /// - Throws: ``PersistenceError/Code/corrupted`` for anything but a whole, intact header that
  ///   matches the file's size; ``PersistenceError/Code/decodingFailed`` for a newer format.
  static func header(from bytes: [UInt8], fileSize: Int, file: URL) throws -> Header {
    guard fileSize > 0 else { throw corrupted(file, "is empty") }
    guard bytes.count >= headerSize else {
      throw corrupted(file, "is truncated: \(fileSize) bytes, shorter than the \(headerSize)-byte header")
    }
    guard Array(bytes[0..<8]) == magic else { throw corrupted(file, "is not a snapshot (its magic number is wrong)") }
    let version = UInt32(truncatingIfNeeded: load(bytes, at: 8, size: 4))
    guard version <= formatVersion else {
      throw PersistenceError(
        code: .decodingFailed,
        message: "the snapshot \(file.path) has format version \(version); this version of AsyncCache reads "
          + "format \(formatVersion) and older")
    }
    guard load(bytes, at: 48, size: 8) == XXH64.hash(bytes[0..<48]) else {
      throw corrupted(file, "has a damaged header (checksum mismatch)")
    }
    guard version >= 1, load(bytes, at: 12, size: 4) == 0 else {
      throw corrupted(file, "has an invalid header (version \(version), flags \(load(bytes, at: 12, size: 4)))")
    }
    let header = Header(
      formatVersion: version,
      writtenAt: Int64(bitPattern: load(bytes, at: 16, size: 8)),
      entryCount: load(bytes, at: 24, size: 8),
      payloadLength: load(bytes, at: 32, size: 8),
      payloadChecksum: load(bytes, at: 40, size: 8)
    )
    let expected = UInt64(headerSize).addingReportingOverflow(header.payloadLength)
    guard !expected.overflow, expected.partialValue == UInt64(fileSize) else {
      let expectedSize = expected.overflow ? "more than \(UInt64.max)" : "\(expected.partialValue)"
      throw corrupted(
        file, "is \(fileSize) bytes long but its header describes \(expectedSize) (truncated or extended)")
    }
    return header
  }

  static func corrupted(_ file: URL, _ problem: String) -> PersistenceError {
    PersistenceError(code: .corrupted, message: "the snapshot \(file.path) \(problem)")
  }

  private static func append<Integer: FixedWidthInteger>(_ value: Integer, to bytes: inout [UInt8]) {
    withUnsafeBytes(of: value.littleEndian) { bytes.append(contentsOf: $0) }
  }

  private static func load(_ bytes: [UInt8], at offset: Int, size: Int) -> UInt64 {
    var value: UInt64 = 0
    for index in (offset..<offset + size).reversed() { value = value << 8 | UInt64(bytes[index]) }
    return value
  }

  // MARK: Reading

  /// Reads and checks the snapshot at `url`; `nil` when there is no file there. Blocking.
  ///
  /// - Throws: ``PersistenceError/Code/corrupted`` (or ``PersistenceError/Code/decodingFailed``
  ///   for a newer format) when the file is not a whole, intact snapshot, and a file-system
  ///   code when it cannot be read.
  static func readSnapshot(from url: URL) throws -> (header: Header, payload: Data)? {
    let path = try fileSystemPath(of: url)
    let descriptor = open(path, O_RDONLY | O_CLOEXEC)
    guard descriptor >= 0 else {
      let code = errno
      if code == ENOENT { return nil }
      throw failure(code, "cannot open the snapshot", url)
    }
    defer { close(descriptor) }
    var status = stat()
    guard fstat(descriptor, &status) == 0 else { throw failure(errno, "cannot read the snapshot", url) }
    guard status.st_mode & S_IFMT == S_IFREG else {
      throw PersistenceError(code: .ioFailure, message: "the snapshot \(url.path) is not a regular file")
    }
    guard let fileSize = Int(exactly: status.st_size) else {
      throw PersistenceError(
        code: .ioFailure,
        message: "the snapshot \(url.path) is \(status.st_size) bytes long, more than this platform reads")
    }
    var headerBytes = [UInt8](repeating: 0, count: Swift.min(fileSize, headerSize))
    let headerRead = headerBytes.withUnsafeMutableBytes { readFully(descriptor, into: $0) }
    if let code = headerRead.error { throw failure(code, "cannot read the snapshot", url) }
    headerBytes.removeLast(headerBytes.count - headerRead.count)
    let header = try self.header(from: headerBytes, fileSize: fileSize, file: url)
    var payload = Data(count: Int(header.payloadLength))
    let payloadRead = payload.withUnsafeMutableBytes { readFully(descriptor, into: $0) }
    if let code = payloadRead.error { throw failure(code, "cannot read the snapshot", url) }
    guard payloadRead.count == payload.count else {
      throw corrupted(url, "was truncated while it was read (\(payloadRead.count) of \(payload.count) payload bytes)")
    }
    guard payload.withUnsafeBytes({ XXH64.hash($0) }) == header.payloadChecksum else {
      throw corrupted(url, "has a damaged payload (checksum mismatch)")
    }
    return (header, payload)
  }

  /// Reads until `buffer` is full or the file ends; returns the bytes read, or the `errno`.
  private static func readFully(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer) -> (
    count: Int, error: Int32?
  ) {
    var offset = 0
    while offset < buffer.count {
      let result = read(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
      if result < 0 {
        if errno == EINTR { continue }
        return (offset, errno)
      }
      if result == 0 { break }
      offset += result
    }
    return (offset, nil)
  }

  // MARK: Writing

  /// Writes a snapshot of `payload` to `url` atomically: a temporary sibling is written,
  /// flushed and renamed over `url`, then the directory is flushed. Blocking.
  ///
  /// On failure the temporary file is removed and whatever was at `url` is left as it was.
  /// Temporary files that interrupted writes left behind, older than
  /// ``staleTemporaryFileAge``, are removed first.
  ///
  /// - Parameter beforeRename: Runs after the temporary file is complete and before the rename;
  ///   a test seam that fails a write at its last moment.
  static func writeSnapshot(
    payload: Data,
    entryCount: Int,
    version: UInt32,
    writtenAt: CacheInstant,
    to url: URL,
    beforeRename: (@Sendable () throws -> Void)? = nil
  ) throws {
    let path = try fileSystemPath(of: url)
    let directory = url.deletingLastPathComponent()
    let directoryPath = try fileSystemPath(of: directory)
    let prefix = temporaryPrefix(for: url)
    removeStaleTemporaryFiles(in: directory, prefix: prefix)

    let header = bytes(
      of: Header(
        formatVersion: version,
        writtenAt: writtenAt.nanosecondsSince1970,
        entryCount: UInt64(entryCount),
        payloadLength: UInt64(payload.count),
        payloadChecksum: payload.withUnsafeBytes { XXH64.hash($0) }
      ))
    let temporaryPath = directory.appendingPathComponent(prefix + UUID().uuidString + temporarySuffix).path
    let descriptor = open(temporaryPath, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o600)
    guard descriptor >= 0 else { throw failure(errno, "cannot create a temporary file for the snapshot", url) }
    var isOpen = true
    var isRenamed = false
    defer {
      if isOpen { close(descriptor) }
      if !isRenamed { unlink(temporaryPath) }
    }
    if let code = header.withUnsafeBytes({ writeFully(descriptor, $0) }) {
      throw failure(code, "cannot write the snapshot", url)
    }
    if let code = payload.withUnsafeBytes({ writeFully(descriptor, $0) }) {
      throw failure(code, "cannot write the snapshot", url)
    }
    let flushed = Durability.synchronize(descriptor)
    guard flushed == 0 else { throw failure(flushed, "cannot flush the snapshot", url) }
    isOpen = false
    // A failing close may report a delayed write error (NFS); the file is unusable then.
    guard close(descriptor) == 0 else { throw failure(errno, "cannot write the snapshot", url) }
    try beforeRename?()
    guard rename(temporaryPath, path) == 0 else { throw failure(errno, "cannot replace the snapshot", url) }
    isRenamed = true
    // Flush the directory so that the rename itself survives a power loss. Some file systems
    // cannot flush a directory (EINVAL); the snapshot is written all the same.
    let directoryDescriptor = open(directoryPath, O_RDONLY | O_DIRECTORY | O_CLOEXEC)
    if directoryDescriptor >= 0 {
      defer { close(directoryDescriptor) }
      let code = Durability.synchronize(directoryDescriptor)
      if code != 0, code != EINVAL, code != ENOTSUP {
        throw failure(code, "cannot flush the directory of the snapshot", url)
      }
    }
  }

  /// Writes all of `buffer`; returns the `errno` on failure.
  private static func writeFully(_ descriptor: Int32, _ buffer: UnsafeRawBufferPointer) -> Int32? {
    var offset = 0
    while offset < buffer.count {
      let result = write(descriptor, buffer.baseAddress! + offset, buffer.count - offset)
      if result < 0 {
        if errno == EINTR { continue }
        return errno
      }
      offset += result
    }
    return nil
  }

  /// The start of the names of `url`'s temporary files: hidden, and short enough that a long
  /// file name still leaves room for the rest.
  static func temporaryPrefix(for url: URL) -> String {
    "." + String(decoding: url.lastPathComponent.utf8.prefix(100), as: UTF8.self) + "."
  }

  /// Removes the temporary files of `prefix` in `directory` older than
  /// ``staleTemporaryFileAge``: the leftovers of writes that were killed. Best effort.
  private static func removeStaleTemporaryFiles(in directory: URL, prefix: String) {
    let files = FileManager.default
    guard let names = try? files.contentsOfDirectory(atPath: directory.path) else { return }
    let cutoff = Date(timeIntervalSinceNow: -staleTemporaryFileAge)
    for name in names where name.hasPrefix(prefix) && name.hasSuffix(temporarySuffix) {
      let file = directory.appendingPathComponent(name)
      guard let modified = (try? files.attributesOfItem(atPath: file.path))?[.modificationDate] as? Date,
        modified < cutoff
      else { continue }
      try? files.removeItem(at: file)
    }
  }

  // MARK: Errors and paths

  private static func fileSystemPath(of url: URL) throws -> String {
    guard url.isFileURL else {
      throw PersistenceError(code: .ioFailure, message: "the snapshot location \(url) is not a file URL")
    }
    return url.path
  }

  /// A typed error for the `errno` of a failed file operation on the snapshot at `url`.
  static func failure(_ code: Int32, _ action: String, _ url: URL) -> PersistenceError {
    let reason = String(cString: strerror(code))
    let underlying = POSIXErrorCode(rawValue: code).map { POSIXError($0) }
    return PersistenceError(
      code: PersistenceError.Code(writeErrno: code), message: "\(action) \(url.path): \(reason)", underlying: underlying
    )
  }

  // MARK: Running off the cooperative pool

  /// The queue that runs snapshot I/O: blocking file calls never run on the cooperative pool.
  /// Serial, so two snapshots of one file never interleave within a process.
  private static let queue = DispatchQueue(label: "AsyncCache.MemoryLayer.snapshot", autoreleaseFrequency: .workItem)

  /// Runs `work` on the snapshot queue, at the quality of service of the calling task, and
  /// returns its result. Not cancellable: once started, `work` runs to the end, so a write is
  /// never abandoned half-way.
  static func perform<Success: Sendable>(_ work: @escaping @Sendable () throws -> Success) async throws -> Success {
    let qos = qualityOfService(for: Task.currentPriority)
    return try await withCheckedThrowingContinuation { continuation in
      queue.async(qos: qos) { continuation.resume(with: Result { try work() }) }
    }
  }

  private static func qualityOfService(for priority: TaskPriority) -> DispatchQoS {
    switch priority {
    case .high, .userInitiated: .userInitiated
    case .medium: .default
    case .low, .utility: .utility
    case .background: .background
    default: priority > .medium ? .userInitiated : .utility
    }
  }
}
