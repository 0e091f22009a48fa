#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Android)
  import Android
#endif

enum SystemInfo {
  /// The number of processors currently online (at least 1).
  static let processorCount: Int = {
    let online = sysconf(Int32(_SC_NPROCESSORS_ONLN))
    return online > 0 ? Int(online) : 1
  }()
}
