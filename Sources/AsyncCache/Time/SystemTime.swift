#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#elseif canImport(Android)
  import Android
#endif

enum SystemTime {
  /// Nanoseconds since 1970 from `CLOCK_REALTIME`.
  static func realtimeNanoseconds() -> Int64 {
    var spec = timespec()
    clock_gettime(CLOCK_REALTIME, &spec)
    return Int64(spec.tv_sec) &* 1_000_000_000 &+ Int64(spec.tv_nsec)
  }
}
