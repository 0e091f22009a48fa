public import AsyncCache

// What the layer is asked to do besides reads and writes: delete expired rows now, answer memory
// pressure, and close.
extension SQLiteLayer {
  /// Deletes the namespace's expired rows now; returns how many were deleted.
  ///
  /// Runs on the layer's thread, in one statement.
  ///
  /// - Throws: `PersistenceError` when SQLite fails, for example `PersistenceError.Code.busy`.
  @discardableResult
  public func removeExpired() throws -> Int {
    let now = followedClock.now.nanosecondsSince1970
    pending.withLock { state in
      for (key, write) in state.writes {
        if case .upsert(let row, let stamp, _) = write, let expiresAt = row.expiresAt, expiresAt <= now {
          state.put(.delete(stamp: stamp), for: key)
        }
      }
    }
    do {
      let store = try openStore()
      store.endReading()
      let removed = try store.deleteExpired(now: now)
      counters.expiredRemoved += removed
      return removed
    } catch let error as SQLiteError {
      throw PersistenceError.sqlite(error, while: "removing expired rows")
    }
  }

  /// Writes what is pending and closes the database, and ends the event sequences. Later
  /// operations throw `PersistenceError.Code.closed`; calling it again does nothing. A
  /// `LoadingCache` or `CacheChain` that holds the layer calls it from its own `close()`, once
  /// its writes have ended.
  ///
  /// It says what it did, at notice: the rows it wrote (and their bytes, and the time it took),
  /// or, when the final write failed, at error: the rows that are lost.
  ///
  /// - Throws: the error of the final write, if it failed; the database is closed regardless.
  ///
  /// `async` although it does not suspend: a synchronous overload would lose, in `async` code,
  /// to the protocol's do-nothing default.
  public func close() async throws {
    guard lifecycle.beginClosing() else { return }
    let (rows, bytes, clears, touched) = pending.withLock { state in
      state.isClosed = true
      return (state.writes.count, state.bytes, state.clearStamp != nil, state.touches.count)
    }
    // Access times, damaged and expired rows: bookkeeping the final write also does.
    let housekeeping = touched + damaged.count + expired.count
    let started = ContinuousClock.now
    var failure: (any Error)?
    do {
      try writePending(background: false)
    } catch {
      failure = error
    }
    let lost = pending.withLock { ($0.writes.count, $0.bytes) }
    // The readers first: the layer's own connection, closed last, then removes the WAL.
    closeReaders()
    store?.endReading()
    store?.connection.close()
    store = nil
    isClosed = true
    // Nothing happens after this: the event sequences end once read.
    eventHub.finishAll()
    let elapsed = (ContinuousClock.now - started).readable
    if let failure {
      layerEnvironment.log(
        .error, "closed; the final write failed, \(lost.0) pending rows (\(lost.1) bytes) are lost: \(failure)",
        metadata: ["rows": "\(lost.0)", "bytes": "\(lost.1)", "error": CacheLogger.describe(failure)])
      throw failure
    }
    var done: [String] = []
    if rows > 0 || clears {
      done.append("wrote \(rows) pending rows (\(bytes) bytes)\(clears ? " and a removeAll()" : "")")
    }
    if housekeeping > 0 { done.append("\(housekeeping) access times and removals of damaged or expired rows") }
    let what = done.isEmpty ? "nothing was pending" : done.joined(separator: ", ")
    layerEnvironment.log(
      .notice, "closed in \(elapsed); \(what)", metadata: ["rows": "\(rows)", "bytes": "\(bytes)", "elapsed": elapsed])
  }

  /// Waits until the calling task is cancelled, the configuration's `gracefulShutdown` signal
  /// returns, or the layer is closed; then closes it (``close()``), writing what is pending: the
  /// shape of swift-service-lifecycle's `Service` requirement, for a layer used without a
  /// `LoadingCache` (whose own `run()` closes its layers).
  ///
  /// - Throws: What ``close()`` throws.
  public nonisolated func run() async throws {
    try await lifecycle.run(orUntil: configuration.gracefulShutdown)
    try await close()
  }

  /// On `.critical` pressure, writes pending values so that their memory is released.
  public func handleMemoryPressure(_ level: MemoryPressureLevel) {
    if level == .critical, !isClosed { try? writePending(background: false) }
  }
}
