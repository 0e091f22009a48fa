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

/// The file-system calls a ``DiskLayer`` makes: a seam through which tests inject the faults a
/// machine cannot produce on demand (a write that fails after some bytes, a failing `fsync` or
/// `rename`) and check that every call happens off the cooperative thread pool.
///
/// The live implementation is ``POSIXDiskFileSystem``. Paths are absolute; file descriptors are
/// POSIX ones. Calls block, so the layer makes them on its own executor.
protocol DiskFileSystem: Sendable {
  /// Opens an existing file for reading.
  func openForReading(_ path: String) throws(DiskSystemError) -> Int32
  /// Creates a new file for writing, failing if it exists (`O_CREAT | O_EXCL`).
  func createExclusively(_ path: String) throws(DiskSystemError) -> Int32
  /// Reads up to `buffer.count` bytes; returns how many (0 at the end of the file).
  func read(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(DiskSystemError) -> Int
  /// Writes some of `buffer` (possibly fewer bytes than asked); returns how many.
  func write(_ descriptor: Int32, from buffer: UnsafeRawBufferPointer) throws(DiskSystemError) -> Int
  /// The size and modification time of an open file.
  func status(_ descriptor: Int32) throws(DiskSystemError) -> DiskFileStatus
  /// Flushes a file's data and metadata to the storage device.
  func synchronize(_ descriptor: Int32) throws(DiskSystemError)
  /// Closes a file; reports the deferred write errors some file systems report only here.
  func close(_ descriptor: Int32) throws(DiskSystemError)
  /// Sets a file's modification time to now; returns whether that worked.
  func touch(_ descriptor: Int32) -> Bool
  /// Renames `source` to `destination` atomically, replacing it.
  func rename(_ source: String, to destination: String) throws(DiskSystemError)
  /// Removes a file.
  func removeFile(_ path: String) throws(DiskSystemError)
  /// Flushes a directory's entries (the result of renames and removals) to the storage device.
  func synchronizeDirectory(_ path: String) throws(DiskSystemError)
  /// Creates a directory and any missing parents; succeeds when it exists already.
  func createDirectory(_ path: String) throws(DiskSystemError)
  /// The names in a directory, without `.` and `..`.
  func contentsOfDirectory(_ path: String) throws(DiskSystemError) -> [String]
  /// Decides, once and where waiting is allowed (the layer's thread, when it opens), whether
  /// ``readCached(_:size:closeElsewhere:)`` may answer for files in `directory`: only on a local file
  /// system (see `fileSystemReadsFromMemoryWithoutWaiting(at:)`).
  func prepareCachedReads(in directory: String)
  /// Reads the whole file at `path`, of `size` bytes (as the index knows it), if the kernel can
  /// answer without waiting for the device: every component of the path in its lookup caches
  /// and every byte in its page cache. Never blocks, so that the layer may call it on the
  /// caller's thread. A file of another size is `.unavailable` (the layer's thread reads it).
  ///
  /// A file deleted or replaced while it was open is not closed here, as closing its last
  /// descriptor frees its blocks, which may wait for the device: its descriptor goes to
  /// `closeElsewhere`, for the layer's thread.
  func readCached(_ path: String, size: Int, closeElsewhere: (Int32) -> Void) -> CachedRead
  /// Sets the modification time of the file at `path` to now; returns whether that worked.
  func touchFile(_ path: String) -> Bool
}

extension DiskFileSystem {
  /// Never answers: every read goes to the layer's thread (file systems of tests, platforms
  /// other than Linux).
  func readCached(_ path: String, size: Int, closeElsewhere: (Int32) -> Void) -> CachedRead { .unavailable }

  func prepareCachedReads(in directory: String) {}

  func touchFile(_ path: String) -> Bool {
    guard let descriptor = try? openForReading(path) else { return false }
    defer { try? close(descriptor) }
    return touch(descriptor)
  }
}

/// What ``DiskFileSystem/readCached(_:size:closeElsewhere:)`` found.
enum CachedRead {
  /// The file does not exist (its directory may not either).
  case missing
  /// The kernel would have to wait for the device (a lookup, a page), or cannot say without
  /// waiting: read it on the layer's thread.
  case unavailable
  /// The file's bytes, in an allocation the caller deallocates, and its modification time in
  /// nanoseconds since 1970.
  case file(UnsafeMutableRawBufferPointer, count: Int, modificationTime: Int64)
}

/// What ``DiskFileSystem/status(_:)`` reports about a file.
struct DiskFileStatus: Sendable, Equatable {
  /// The length in bytes.
  var size: Int
  /// The modification time, in nanoseconds since 1970.
  var modificationTime: Int64
}

/// A failed system call: its `errno`, the operation and the path.
struct DiskSystemError: Error, Sendable, Equatable, CustomStringConvertible {
  /// The `errno` value.
  var code: Int32
  /// The operation that failed, such as `"open"` or `"write"`.
  var operation: String
  /// The path involved (the file, or the directory for directory operations).
  var path: String

  var description: String {
    "\(operation) \(path.debugDescription): \(String(cString: strerror(code))) (errno \(code))"
  }

  /// The error as the underlying error of a ``PersistenceError``.
  var posixError: POSIXError {
    POSIXError(POSIXErrorCode(rawValue: code) ?? .EIO)
  }
}
