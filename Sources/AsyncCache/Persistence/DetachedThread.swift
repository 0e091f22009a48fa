import CAsyncCacheShims

#if canImport(Darwin)
  import Darwin
#elseif canImport(Glibc)
  import Glibc
#elseif canImport(Musl)
  import Musl
#endif

/// A detached POSIX thread running one closure, with a 1 MiB stack, named after its label: for
/// the threads that do blocking work off the cooperative pool (executors, socket loops, the
/// published wall time).
package struct DetachedThread {
  private let label: String
  private let body: @Sendable () -> Void

  /// - Parameters:
  ///   - reactsQuickly: Whether the thread mostly sleeps and has little to do when it wakes (a
  ///     socket loop), so that it should run soon after it wakes, ahead of threads that compute
  ///     (the cooperative pool's): on Linux it asks for short time slices, which the EEVDF
  ///     scheduler (6.12 and later) lets preempt; elsewhere, or when refused, nothing changes.
  package init(label: String, reactsQuickly: Bool = false, body: @escaping @Sendable () -> Void) {
    self.label = label
    if reactsQuickly {
      self.body = {
        _ = Self.askForShortSlices()
        body()
      }
    } else {
      self.body = body
    }
  }

  /// Asks the scheduler for 100 µs slices for the calling thread (see `reactsQuickly`); returns
  /// whether it agreed (`false` off Linux).
  package static func askForShortSlices() -> Bool {
    #if os(Linux)
      async_cache_request_slice(100_000) == 0
    #else
      false
    #endif
  }

  /// The longest prefix of `label`, in whole characters, of at most `bytes` bytes of UTF-8: a
  /// thread's name (15 bytes on Linux, 63 on Darwin), never cut inside a character.
  package static func name(_ label: String, bytes: Int) -> String {
    var length = 0
    return String(
      label.prefix { character in
        length += character.utf8.count
        return length <= bytes
      })
  }

  /// Starts the thread, named after its label (as much as the system keeps: see
  /// ``name(_:bytes:)``); returns `pthread_create`'s result (0 on success).
  package func start() -> Int32 {
    final class Box: Sendable {
      let label: String
      let body: @Sendable () -> Void
      init(_ label: String, _ body: @escaping @Sendable () -> Void) {
        self.label = label
        self.body = body
      }
    }
    let box = Unmanaged.passRetained(Box(label, body)).toOpaque()
    var attributes = pthread_attr_t()
    pthread_attr_init(&attributes)
    defer { pthread_attr_destroy(&attributes) }
    pthread_attr_setdetachstate(&attributes, Int32(PTHREAD_CREATE_DETACHED))
    pthread_attr_setstacksize(&attributes, 1 << 20)
    #if canImport(Darwin)
      var thread: pthread_t?
    #else
      var thread = pthread_t()
    #endif
    let result = pthread_create(
      &thread, &attributes,
      { argument in
        let box = Unmanaged<Box>.fromOpaque(argument!).takeRetainedValue()
        #if canImport(Darwin)
          pthread_setname_np(DetachedThread.name(box.label, bytes: 63))
        #elseif os(Linux)
          if !box.label.isEmpty { _ = async_cache_name_this_thread(DetachedThread.name(box.label, bytes: 15)) }
        #endif
        box.body()
        return nil
      }, box)
    if result != 0 { Unmanaged<Box>.fromOpaque(box).release() }
    return result
  }
}
