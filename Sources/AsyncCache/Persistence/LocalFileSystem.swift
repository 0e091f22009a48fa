import CAsyncCacheShims

/// Whether the file system that holds `path` answers a read from memory without waiting: a
/// local one (ext4, xfs, btrfs, tmpfs, an overlay in a container...) on Linux. A network or FUSE
/// file system may ask a server or a daemon to open, close or lock a file even when its bytes
/// are cached, so persistent layers read there only on their own threads. `false` elsewhere
/// than Linux, and when `path` cannot be examined.
package func fileSystemReadsFromMemoryWithoutWaiting(at path: String) -> Bool {
  #if os(Linux)
    async_cache_file_system_is_local(path) != 0
  #else
    false
  #endif
}
