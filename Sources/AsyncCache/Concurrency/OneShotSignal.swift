/// A signal that fires once: ``wait()`` returns once ``fire()`` has been called (at once if it
/// has), or once the waiting task is cancelled. Safe from any context.
package final class OneShotSignal: Sendable {
  private struct State: Sendable {
    var fired = false
    var nextID: UInt64 = 0
    var waiters: [UInt64: UnsafeContinuation<Void, Never>] = [:]
  }

  private let state = Locked(State())

  package init() {}

  /// Fires the signal: every wait returns, now and later.
  package func fire() {
    let waiters = state.withLock { state in
      state.fired = true
      defer { state.waiters = [:] }
      return state.waiters.values
    }
    for waiter in waiters { waiter.resume() }
  }

  /// Returns once the signal has fired, or once the calling task is cancelled.
  package func wait() async {
    let id = state.withLock { state in
      state.nextID += 1
      return state.nextID
    }
    await withTaskCancellationHandler {
      await withUnsafeContinuation { (continuation: UnsafeContinuation<Void, Never>) in
        let returnsNow = state.withLock { state in
          if state.fired || Task.isCancelled { return true }
          state.waiters[id] = continuation
          return false
        }
        if returnsNow { continuation.resume() }
      }
    } onCancel: {
      state.withLock { $0.waiters.removeValue(forKey: id) }?.resume()
    }
  }
}

extension OneShotSignal {
  /// Returns once this signal fires, `gracefulShutdown` returns or throws (when given), or the
  /// calling task is cancelled: how a `run()` waits for its end.
  package func wait(orUntil gracefulShutdown: (@Sendable () async throws -> Void)?) async {
    await withTaskGroup(of: Void.self) { group in
      if let gracefulShutdown { group.addTask { try? await gracefulShutdown() } }
      group.addTask { await self.wait() }
      await group.next()
      group.cancelAll()
    }
  }

  /// Runs `work` (when given) until this signal fires, `gracefulShutdown` returns or throws, or
  /// the calling task is cancelled; then cancels it and returns once it has ended: the body of
  /// a `run()` whose background work is `work`.
  package func wait(
    orUntil gracefulShutdown: (@Sendable () async throws -> Void)?,
    meanwhile work: (@Sendable () async -> Void)?
  ) async {
    await withTaskGroup(of: Bool.self) { group in
      if let work {
        group.addTask {
          await work()
          return false
        }
      }
      group.addTask {
        await self.wait(orUntil: gracefulShutdown)
        return true
      }
      for await endsRun in group where endsRun { group.cancelAll() }
    }
  }
}
