import CAsyncCacheShims
import Synchronization

#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Android)
  import Android
#endif

/// The live ``DiskFileSystem``: POSIX calls, retried on `EINTR`.
struct POSIXDiskFileSystem: DiskFileSystem {
  func openForReading(_ path: String) throws(DiskSystemError) -> Int32 {
    try retrying("open", path) { Int(open(path, O_RDONLY | O_CLOEXEC)) }.descriptor
  }

  func createExclusively(_ path: String) throws(DiskSystemError) -> Int32 {
    try retrying("open", path) { Int(open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0o644)) }.descriptor
  }

  func read(_ descriptor: Int32, into buffer: UnsafeMutableRawBufferPointer) throws(DiskSystemError) -> Int {
    guard let base = buffer.baseAddress, !buffer.isEmpty else { return 0 }
    return try retrying("read", "fd \(descriptor)") { systemRead(descriptor, base, buffer.count) }
  }

  func write(_ descriptor: Int32, from buffer: UnsafeRawBufferPointer) throws(DiskSystemError) -> Int {
    guard let base = buffer.baseAddress, !buffer.isEmpty else { return 0 }
    return try retrying("write", "fd \(descriptor)") { systemWrite(descriptor, base, buffer.count) }
  }

  func status(_ descriptor: Int32) throws(DiskSystemError) -> DiskFileStatus {
    var info = stat()
    guard fstat(descriptor, &info) == 0 else {
      throw DiskSystemError(code: errno, operation: "fstat", path: "fd \(descriptor)")
    }
    #if canImport(Darwin)
      let time = info.st_mtimespec
    #else
      let time = info.st_mtim
    #endif
    return DiskFileStatus(
      // Clamped where `Int` has 32 bits: such a file is no entry of the layer's (damage), not a trap.
      size: Int(clamping: info.st_size),
      modificationTime: Int64(time.tv_sec) &* 1_000_000_000 &+ Int64(time.tv_nsec))
  }

  func synchronize(_ descriptor: Int32) throws(DiskSystemError) {
    let code = Durability.synchronize(descriptor)
    guard code == 0 else { throw DiskSystemError(code: code, operation: "fsync", path: "fd \(descriptor)") }
  }

  func close(_ descriptor: Int32) throws(DiskSystemError) {
    // Not retried on EINTR: the descriptor is released whatever `close` returns (Linux, and
    // POSIX 2024), so a retry could close a descriptor another thread has just opened.
    let result: Int32
    #if canImport(Darwin)
      result = Darwin.close(descriptor)
    #elseif canImport(Glibc)
      result = Glibc.close(descriptor)
    #elseif canImport(Musl)
      result = Musl.close(descriptor)
    #else
      result = Android.close(descriptor)
    #endif
    if result != 0, errno != EINTR {
      throw DiskSystemError(code: errno, operation: "close", path: "fd \(descriptor)")
    }
  }

  func touch(_ descriptor: Int32) -> Bool {
    futimens(descriptor, nil) == 0
  }

  func rename(_ source: String, to destination: String) throws(DiskSystemError) {
    _ = try retrying("rename", source) {
      #if canImport(Darwin)
        Int(Darwin.rename(source, destination))
      #elseif canImport(Glibc)
        Int(Glibc.rename(source, destination))
      #elseif canImport(Musl)
        Int(Musl.rename(source, destination))
      #else
        Int(Android.rename(source, destination))
      #endif
    }
  }

  func removeFile(_ path: String) throws(DiskSystemError) {
    _ = try retrying("unlink", path) { Int(unlink(path)) }
  }

  func synchronizeDirectory(_ path: String) throws(DiskSystemError) {
    let descriptor = try retrying("open", path) { Int(open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) }.descriptor
    defer { try? close(descriptor) }
    try synchronize(descriptor)
  }

  func createDirectory(_ path: String) throws(DiskSystemError) {
    if mkdir(path, 0o755) == 0 { return }
    let code = errno
    switch code {
    case EEXIST:
      var info = stat()
      guard stat(path, &info) == 0, info.st_mode & S_IFMT == S_IFDIR else {
        throw DiskSystemError(code: ENOTDIR, operation: "mkdir", path: path)
      }
    case ENOENT:
      let parent = String(path[..<(path.lastIndex(of: "/") ?? path.startIndex)])
      guard !parent.isEmpty, parent != path else { throw DiskSystemError(code: code, operation: "mkdir", path: path) }
      try createDirectory(parent)
      guard mkdir(path, 0o755) == 0 || errno == EEXIST else {
        throw DiskSystemError(code: errno, operation: "mkdir", path: path)
      }
    default:
      throw DiskSystemError(code: code, operation: "mkdir", path: path)
    }
  }

  func contentsOfDirectory(_ path: String) throws(DiskSystemError) -> [String] {
    guard let directory = opendir(path) else {
      throw DiskSystemError(code: errno, operation: "opendir", path: path)
    }
    defer { closedir(directory) }
    var names: [String] = []
    while true {
      errno = 0
      guard let entry = readdir(directory) else {
        if errno != 0 { throw DiskSystemError(code: errno, operation: "readdir", path: path) }
        return names
      }
      let name = withUnsafeBytes(of: entry.pointee.d_name) { bytes in
        String(decoding: bytes.prefix { $0 != 0 }, as: UTF8.self)
      }
      if name != "." && name != ".." { names.append(name) }
    }
  }

  /// Whether files in `directory` can be read without waiting here: a local file system, and a
  /// kernel (and seccomp filter) that lets `openat2` with `RESOLVE_CACHED` through. For tests
  /// that expect such reads.
  static func readsCachedFiles(in directory: String) -> Bool {
    #if os(Linux)
      guard fileSystemReadsFromMemoryWithoutWaiting(at: directory) else { return false }
      let descriptor = async_cache_open_cached(directory)
      guard descriptor >= 0 else { return false }
      try? POSIXDiskFileSystem().close(descriptor)
      return true
    #else
      return false
    #endif
  }

  /// Whether reads without waiting work here: decided by the directory's file system when the
  /// layer opens it, and turned off when the kernel or the file system cannot. One per layer
  /// (each makes its own file system), as layers may sit on different file systems.
  private let cachedReads = CachedReadSupport()

  func prepareCachedReads(in directory: String) {
    cachedReads.decide(local: fileSystemReadsFromMemoryWithoutWaiting(at: directory))
  }

  func readCached(_ path: String, size: Int, closeElsewhere: (Int32) -> Void) -> CachedRead {
    #if os(Linux)
      guard cachedReads.isSupported else { return .unavailable }
      let descriptor = async_cache_open_cached(path)
      guard descriptor >= 0 else {
        switch -descriptor {
        case ENOENT: return .missing
        case ENOSYS, EINVAL, EPERM:
          // A kernel before 5.12, a seccomp filter that refuses the call, or files this process
          // does not own (`O_NOATIME`): the layer's thread reads.
          cachedReads.turnOff()
          return .unavailable
        default: return .unavailable
        }
      }
      // Whatever the outcome: a file deleted or replaced while open (an eviction of a cold
      // file, a rewrite) is closed elsewhere, as closing its last descriptor frees its blocks.
      // (A deletion between this `fstat` and the `close` is not seen: a window of one call.)
      // One `fstat` serves a read that succeeds: its size, its time and its links.
      var status = stat()
      var examined = false
      defer {
        if !examined { examined = fstat(descriptor, &status) == 0 }
        if examined, status.st_nlink > 0 {
          try? close(descriptor)
        } else {
          closeElsewhere(descriptor)
        }
      }
      // Entry files are replaced by renames, never grown in place: `size` bytes are the file,
      // and a file of another size (checked below) is read on the layer's thread.
      let buffer = UnsafeMutableRawBufferPointer.allocate(byteCount: Swift.max(1, size), alignment: 16)
      var count = 0
      while count < size {
        let read = async_cache_read_cached(descriptor, buffer.baseAddress! + count, size - count, Int64(count))
        if read == 0 { break }
        guard read > 0 else {
          if read == -Int(EINTR) { continue }
          if read == -Int(EOPNOTSUPP) || read == -Int(ENOSYS) || read == -Int(EINVAL) {
            // The layer's file system (or the kernel) cannot: its reads all go to its thread.
            cachedReads.turnOff()
          }
          buffer.deallocate()
          return .unavailable
        }
        count += read
      }
      examined = fstat(descriptor, &status) == 0
      guard examined, status.st_size == size, count == size else {
        buffer.deallocate()
        return .unavailable
      }
      #if canImport(Darwin)
        let time = status.st_mtimespec
      #else
        let time = status.st_mtim
      #endif
      return .file(buffer, count: count, modificationTime: Int64(time.tv_sec) &* 1_000_000_000 &+ Int64(time.tv_nsec))
    #else
      return .unavailable
    #endif
  }

  func touchFile(_ path: String) -> Bool {
    utimensat(AT_FDCWD, path, nil, 0) == 0
  }

  /// Runs a system call until it does not fail with `EINTR`; throws for any other failure.
  private func retrying(
    _ operation: String, _ path: @autoclosure () -> String, _ call: () -> Int
  ) throws(DiskSystemError) -> Int {
    while true {
      let result = call()
      if result >= 0 { return result }
      let code = errno
      if code != EINTR { throw DiskSystemError(code: code, operation: operation, path: path()) }
    }
  }
}

private final class CachedReadSupport: Sendable {
  private static let unknown = 0
  private static let supported = 1
  private static let unsupported = 2
  private let state = Atomic<Int>(CachedReadSupport.unknown)

  /// Whether reads without waiting are tried: decided when the layer opens its directory (no
  /// read is tried before), turned off for good if they fail for want of support.
  var isSupported: Bool { state.load(ordering: .relaxed) == Self.supported }

  func decide(local: Bool) {
    _ = state.compareExchange(
      expected: Self.unknown, desired: local ? Self.supported : Self.unsupported, ordering: .relaxed)
  }

  /// Every later read goes to the layer's thread: the kernel or the file system cannot.
  func turnOff() { state.store(Self.unsupported, ordering: .relaxed) }
}

extension Int {
  /// The value as a file descriptor (the system calls that return one return an `Int32`).
  fileprivate var descriptor: Int32 { Int32(truncatingIfNeeded: self) }
}

// `read` and `write` are shadowed by the protocol's methods inside the conforming type.
private func systemRead(_ descriptor: Int32, _ buffer: UnsafeMutableRawPointer, _ count: Int) -> Int {
  #if canImport(Darwin)
    Darwin.read(descriptor, buffer, count)
  #elseif canImport(Glibc)
    Glibc.read(descriptor, buffer, count)
  #elseif canImport(Musl)
    Musl.read(descriptor, buffer, count)
  #else
    Android.read(descriptor, buffer, count)
  #endif
}

private func systemWrite(_ descriptor: Int32, _ buffer: UnsafeRawPointer, _ count: Int) -> Int {
  #if canImport(Darwin)
    Darwin.write(descriptor, buffer, count)
  #elseif canImport(Glibc)
    Glibc.write(descriptor, buffer, count)
  #elseif canImport(Musl)
    Musl.write(descriptor, buffer, count)
  #else
    Android.write(descriptor, buffer, count)
  #endif
}
