public import AsyncCache

/// A log handler that records every record it receives, so that a test can assert what the
/// cache logged.
///
/// ```swift
/// @Test func aFailingDiskIsSkippedWithAWarning() async throws {
///     let logs = RecordingLogHandler()
///     let chain = try CacheChain<String, Int>(
///         [.init(memory), .init(disk, failurePolicy: .skip, name: "disk")],
///         configuration: .init(logger: logs.logger()))
///     _ = try await chain.value(for: "a")
///     let warning = try #require(logs.records(atLeast: .warning).first)
///     #expect(warning.metadata["layer"] == "disk")
/// }
/// ```
///
/// Records logged by background work (a background back-fill, a prefetcher, a memory-pressure
/// follower) arrive later than the call that caused them: await ``waitForRecords(_:where:)``
/// instead of polling. Safe from any context.
public final class RecordingLogHandler: CacheLogHandler, Sendable {
  private struct Watcher {
    var matches: @Sendable (CacheLogRecord) -> Bool
    var remaining: Int
    var continuation: UnsafeContinuation<Void, Never>
  }

  private struct State {
    var records: [CacheLogRecord] = []
    var nextID: UInt64 = 0
    var watchers: [UInt64: Watcher] = [:]
  }

  private let state = Locked(State())

  /// Creates a handler with no records.
  public init() {}

  /// A logger that sends the records of `minimumLevel` and above to this handler.
  ///
  /// - Parameter minimumLevel: The least severe level recorded. Default
  ///   ``AsyncCache/CacheLogLevel/trace``: everything.
  public func logger(minimumLevel: CacheLogLevel = .trace) -> CacheLogger {
    CacheLogger(handler: self, minimumLevel: minimumLevel)
  }

  /// Records `record` and wakes the waiters it satisfies.
  ///
  /// - Parameter record: The record.
  public func log(_ record: CacheLogRecord) {
    let woken = state.withLock { state -> [UnsafeContinuation<Void, Never>] in
      state.records.append(record)
      var woken: [UnsafeContinuation<Void, Never>] = []
      for (id, watcher) in state.watchers where watcher.matches(record) {
        if watcher.remaining <= 1 {
          state.watchers[id] = nil
          woken.append(watcher.continuation)
        } else {
          state.watchers[id]?.remaining -= 1
        }
      }
      return woken
    }
    // Resumed outside the lock: a woken test may log again at once.
    for continuation in woken { continuation.resume() }
  }

  /// Every record so far, oldest first.
  public var records: [CacheLogRecord] { state.withLock { $0.records } }

  /// The records so far of `level` and above, oldest first.
  ///
  /// - Parameter level: The least severe level returned.
  public func records(atLeast level: CacheLogLevel) -> [CacheLogRecord] {
    state.withLock { $0.records.filter { $0.level >= level } }
  }

  /// Forgets the records so far (waiters keep waiting for new ones).
  public func removeAll() {
    state.withLock { $0.records.removeAll() }
  }

  /// Returns once at least `count` records so far match `predicate`, with every record so far
  /// that matches it, oldest first.
  ///
  /// Returns at once if enough have been recorded already; when the calling task is cancelled,
  /// returns the matches so far, which may be fewer.
  ///
  /// - Parameters:
  ///   - count: How many matching records to wait for. Default 1.
  ///   - predicate: Which records count; it runs under the handler's lock, so keep it to a
  ///     quick test of the record. Default: every record.
  /// - Returns: The records that match, oldest first.
  @discardableResult
  public func waitForRecords(
    _ count: Int = 1,
    where predicate: @escaping @Sendable (CacheLogRecord) -> Bool = { _ in true }
  ) async -> [CacheLogRecord] {
    let id = state.withLock { state -> UInt64 in
      state.nextID += 1
      return state.nextID
    }
    await withTaskCancellationHandler {
      await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
        let ready = state.withLock { state -> Bool in
          let found = state.records.count(where: predicate)
          if found >= count || Task.isCancelled { return true }
          state.watchers[id] = Watcher(matches: predicate, remaining: count - found, continuation: continuation)
          return false
        }
        if ready { continuation.resume() }
      }
    } onCancel: {
      let continuation = state.withLock { $0.watchers.removeValue(forKey: id)?.continuation }
      continuation?.resume()
    }
    return state.withLock { $0.records.filter(predicate) }
  }
}
