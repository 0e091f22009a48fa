#if canImport(Darwin)
  import Dispatch

  /// The system's memory pressure events on Apple platforms, from
  /// `DispatchSource.makeMemoryPressureSource`.
  ///
  /// Each sequence of ``levels()`` owns a dispatch source that is cancelled when the sequence
  /// is no longer iterated. The system reports `normal`, `warning` and `critical` as they
  /// happen; nothing is polled, so an idle source costs nothing. On iOS the system also sends
  /// `UIApplication.didReceiveMemoryWarningNotification`; this source does not need it.
  ///
  /// Safe from any context.
  public final class DispatchMemoryPressureSource: MemoryPressureSource {
    /// The queue the dispatch sources deliver their events on.
    private let queue: DispatchQueue

    /// Creates a source whose dispatch sources deliver events on a private utility queue.
    public init() {
      queue = DispatchQueue(label: "AsyncCache.DispatchMemoryPressureSource", qos: .utility)
    }

    /// A new sequence of the system's memory pressure levels as they change, starting from
    /// ``MemoryPressureLevel/normal``. Makes and activates one dispatch source, cancelled when
    /// the sequence is no longer iterated. Safe from any context.
    public func levels() -> AsyncStream<MemoryPressureLevel> {
      let (stream, continuation) = AsyncStream.makeStream(of: MemoryPressureLevel.self)
      let box = SourceBox(
        DispatchSource.makeMemoryPressureSource(eventMask: [.normal, .warning, .critical], queue: queue))
      let last = Locked(MemoryPressureLevel.normal)
      box.source.setEventHandler {
        let event = box.source.data
        let level: MemoryPressureLevel =
          if event.contains(.critical) {
            .critical
          } else if event.contains(.warning) {
            .warning
          } else {
            .normal
          }
        let changed = last.withLock { last in
          defer { last = level }
          return last != level
        }
        if changed { continuation.yield(level) }
      }
      continuation.onTermination = { _ in box.source.cancel() }
      box.source.activate()
      return stream
    }
  }

  /// Holds a dispatch source so that the event handler and the termination handler can share
  /// it.
  // SAFETY: `source` is a `let`, and a dispatch source is thread-safe: its `data`, `cancel()`
  // and `activate()` may be called from any thread.
  private final class SourceBox: @unchecked Sendable {
    let source: any DispatchSourceMemoryPressure

    init(_ source: any DispatchSourceMemoryPressure) {
      self.source = source
    }
  }
#endif
