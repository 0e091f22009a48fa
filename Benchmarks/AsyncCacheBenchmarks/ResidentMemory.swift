#if canImport(Darwin)
  import CAsyncCacheShims
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Android)
  import Android
#endif

/// The physical memory this process uses.
enum ResidentMemory {
  /// The resident set size of this process in bytes, or `nil` when the platform does not say.
  static func currentBytes() -> Int? {
    #if os(Linux) || os(Android)
      // /proc/self/statm holds "size resident shared text lib data dt", counted in pages.
      let descriptor = open("/proc/self/statm", O_RDONLY)
      guard descriptor >= 0 else { return nil }
      defer { close(descriptor) }
      var buffer = [UInt8](repeating: 0, count: 128)
      let length = buffer.withUnsafeMutableBytes { read(descriptor, $0.baseAddress, $0.count) }
      guard length > 0 else { return nil }
      let fields = buffer[..<length].split(separator: UInt8(ascii: " "))
      guard fields.count > 1, let pages = Int(String(decoding: fields[1], as: UTF8.self)) else { return nil }
      return pages * Int(sysconf(Int32(_SC_PAGESIZE)))
    #elseif canImport(Darwin)
      var info = mach_task_basic_info()
      var count = mach_msg_type_number_t(MemoryLayout<mach_task_basic_info>.size / MemoryLayout<natural_t>.size)
      let result = withUnsafeMutablePointer(to: &info) { pointer in
        pointer.withMemoryRebound(to: integer_t.self, capacity: Int(count)) {
          task_info(async_cache_mach_task_self(), task_flavor_t(MACH_TASK_BASIC_INFO), $0, &count)
        }
      }
      return result == KERN_SUCCESS ? Int(info.resident_size) : nil
    #else
      return nil
    #endif
  }
}
