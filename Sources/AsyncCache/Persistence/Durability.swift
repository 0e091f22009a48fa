#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Android)
  import Android
#endif

/// Flushing a file or a directory to the storage device, so that it survives a power loss: the
/// one place where platforms differ on what that takes.
///
/// On Linux `fsync` waits until the device has written the data, drive cache included (the
/// kernel sends the drive a cache flush). On Apple platforms `fsync` only hands the data to the
/// drive, which may keep it in a volatile cache and write it later, in any order (Apple's
/// fsync(2)); `fcntl(F_FULLFSYNC)` asks the drive to flush that cache too. It costs more (the
/// whole drive cache is flushed, milliseconds on a busy disk), which is the price of the
/// promise. File systems that do not implement it (some network and FAT volumes) refuse it, and
/// then `fsync` is the best there is.
enum Durability {
  /// Flushes the file or directory open at `descriptor` to the storage device: `F_FULLFSYNC`
  /// on Apple platforms, falling back to `fsync` where the file system refuses it; `fsync`
  /// elsewhere. Calls interrupted by a signal are repeated.
  ///
  /// Blocking: call it off the cooperative thread pool.
  /// - Returns: 0 on success, otherwise the `errno` of the call that failed.
  static func synchronize(_ descriptor: Int32) -> Int32 {
    synchronize(descriptor, fullSync: fullSync, fsync: { fsync($0) == -1 ? errno : 0 })
  }

  #if canImport(Darwin)
    /// `F_FULLFSYNC`: the drive writes out its cache too.
    static let fullSync: (@Sendable (Int32) -> Int32)? = { fcntl($0, F_FULLFSYNC) == -1 ? errno : 0 }
  #else
    /// None: `fsync` already waits for the drive's cache.
    static let fullSync: (@Sendable (Int32) -> Int32)? = nil
  #endif

  /// The logic of ``synchronize(_:)`` over the system calls it makes, each of which returns 0
  /// or an `errno`: `fullSync` (none where `fsync` is already full), then `fsync` when
  /// `fullSync` is refused as unsupported. Any other failure is the result: after an I/O
  /// error a plain `fsync` could succeed without the data, and hide the loss.
  static func synchronize(
    _ descriptor: Int32, fullSync: ((Int32) -> Int32)?, fsync: (Int32) -> Int32
  ) -> Int32 {
    if let fullSync {
      let code = repeatingIfInterrupted { fullSync(descriptor) }
      guard isRefusal(code) else { return code }
    }
    return repeatingIfInterrupted { fsync(descriptor) }
  }

  /// Whether `code` says the file system does not implement a full flush (rather than that the
  /// flush failed): `ENOTSUP`, `EOPNOTSUPP` (a different number on Apple platforms), `ENOTTY`
  /// (the file system's ioctl does not know the command) or `EINVAL`.
  static func isRefusal(_ code: Int32) -> Bool {
    code == ENOTSUP || code == EOPNOTSUPP || code == ENOTTY || code == EINVAL
  }

  private static func repeatingIfInterrupted(_ call: () -> Int32) -> Int32 {
    while true {
      let code = call()
      if code != EINTR { return code }
    }
  }
}
