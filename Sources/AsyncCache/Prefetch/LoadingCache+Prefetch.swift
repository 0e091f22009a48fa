import Synchronization  // Atomic

extension LoadingCache {
  // MARK: Urgent and background work

  /// Turns the requests waiting for `key` into background work: the key's load no longer holds
  /// back prefetching, and it waits for urgent loads to end before it asks the origin again.
  /// The requests still get its value.
  ///
  /// Use it for content that scrolled away but will likely be wanted again, instead of
  /// cancelling its request. A later request for `key` promotes the load again. Swift cannot
  /// lower a running task's priority, so a load already talking to the origin finishes that
  /// attempt at the priority it has; the demotion governs what it does next.
  ///
  /// - Returns: Whether a load of `key` was urgent and is now background work.
  @discardableResult
  public func demote(_ key: Key) -> Bool {
    loadTable.demote(key)
  }

  /// Whether a load that a request waits for is in flight. Safe from any context.
  public var hasUrgentLoads: Bool {
    loadTable.hasUrgentLoads
  }

  /// Registers `observer`, called each time urgent loads start being in flight or stop being
  /// (see ``LoadTable/addUrgencyObserver(_:)``). Returns the identifier to remove it with.
  func addUrgencyObserver(_ observer: @escaping @Sendable () -> Void) -> UInt64 {
    loadTable.addUrgencyObserver(observer)
  }

  func removeUrgencyObserver(_ id: UInt64) {
    loadTable.removeUrgencyObserver(id)
  }

  /// Keeps room for `entries` entries in the admission window of the top ``MemoryLayer`` while
  /// a prefetcher runs (see ``MemoryStore/reserveWindow(entries:)``); `nil` when there is
  /// nothing to release (no memory layer on top, or one under least recently used).
  func reserveAdmissionWindow(entries: Int) -> UInt64? {
    front?.reserveAdmissionWindow(entries: entries)
  }

  /// Ends a reservation of ``reserveAdmissionWindow(entries:)``.
  func releaseAdmissionWindow(_ id: UInt64) {
    front?.releaseAdmissionWindow(id)
  }

  /// Returns once at least `count` background loads wait for urgent work to end (for tests:
  /// `AsyncCacheTesting` offers it as `waitForLoadsWaitingForUrgentWork(_:)`).
  package func waitForGate(_ count: Int) async {
    await loadTable.waitUntil(orCancellation: true) { $0.loadsAtGate >= count }
  }

  // MARK: Prefetching

  /// Makes a ticket for one prefetch of a key.
  func makePrefetchTicket() -> PrefetchTicket {
    PrefetchTicket()
  }

  /// Loads `key` as background work, unless the top memory layer has it, and reports how it
  /// went; never throws.
  ///
  /// Joins the key's load in flight or starts one; a request for the key that arrives meanwhile
  /// joins it and promotes it. With `skipsTopLayer`, a value from the origin or a lower layer is
  /// stored in the layers below the top one only (unless a request or another prefetch wants it
  /// on top too). Withdrawing `ticket` (``withdraw(_:for:)``) or cancelling the calling task
  /// withdraws this prefetch: the load goes on if a request waits for it, and is cancelled
  /// otherwise; this method then returns once that load has ended, so no work outlives it.
  func prefetch(_ key: Key, ticket: PrefetchTicket, skipsTopLayer: Bool) async -> PrefetchOutcome {
    if hasServableTopValue(for: key) { return .skipped }
    do { try checkOpen("a prefetch") } catch { return .failed(error) }
    do {
      // Taken now, as a request takes its own: waiters join in identifier order.
      let waiter = nextWaiterID.wrappingAdd(1, ordering: .relaxed).newValue
      // Published before the join: `withdraw` sets its flag, then reads this, and the join reads
      // the flag under the lock; so either the join sees the flag, or `withdraw` finds the
      // waiter (or finds it not joined yet, and the join sees the flag).
      ticket.waiter.store(waiter, ordering: .sequentiallyConsistent)
      let source = try await waitInTable { (continuation: UnsafeContinuation<LoadSource, any Error>) in
        // A key the origin said it does not have is not asked for again. Prefetches are not
        // checked for recursion: a prefetcher runs beside the requests, not inside a load.
        var dependencies: [LoadIdentity] = []
        let refusal = loadTable.join(
          key, waiter: waiter, as: .prefetch(continuation), skipsTopLayer: skipsTopLayer,
          negativeNow: negativeNow, dependencies: &dependencies,
          isCancelled: { Task.isCancelled || ticket.isWithdrawn.load(ordering: .sequentiallyConsistent) })
        return refusal.map { failure($0, key: key, joining: .prefetch) }
      } leave: {
        withdraw(ticket, for: key)
      }
      switch source {
      case .origin, .revalidated: return .loaded
      case .layer(let tier): return tier == 0 || skipsTopLayer ? .skipped : .loaded
      }
    } catch is CancellationError where ticket.isWithdrawn.load(ordering: .sequentiallyConsistent) || Task.isCancelled {
      // See out the load this prefetch abandoned, if it did: it is cancelled and ends soon.
      // Its task; or, for a load of a batch whose other loads go on (the batch's task is not
      // cancelled), the table tells when the batch's body ends.
      if let (id, task) = ticket.abandonedLoad.withLock({ $0 }) {
        if let task { await task.value } else { await loadTable.waitUntil { !$0.running.contains(id) } }
      }
      return .cancelled
    } catch {
      // Includes a CancellationError the origin threw on its own (a timeout of its own, say):
      // a failure, not a withdrawal, or the prefetcher would ask again at once, forever.
      return .failed(error)
    }
  }

  /// Withdraws the prefetch of `key` that holds `ticket`: it returns `.cancelled` at once, and
  /// the key's load is cancelled unless a request or another prefetch still waits for it.
  /// Safe from any context; withdrawing twice, or after the prefetch ended, does nothing.
  func withdraw(_ ticket: PrefetchTicket, for key: Key) {
    ticket.isWithdrawn.store(true, ordering: .sequentiallyConsistent)
    // 0 when the prefetch has not published its waiter (and will see the flag when it joins).
    let id = ticket.waiter.load(ordering: .sequentiallyConsistent)
    guard id != 0 else { return }
    let (waiter, abandoned) = loadTable.leave(id, key: key, because: .cancelled)
    if let abandoned { ticket.abandonedLoad.withLock { $0 = (abandoned.id, abandoned.task) } }
    waiter?.resume(throwing: CancellationError())
  }
}

/// A prefetcher's claim on the load of one key, which the prefetcher can withdraw from outside
/// the task that waits for it.
final class PrefetchTicket: Sendable {
  /// The waiter identifier of the prefetch in the in-flight table, set just before it joins;
  /// 0 before.
  let waiter = Atomic<UInt64>(0)
  /// Set before the waiter is removed, so a prefetch that has not joined yet never does.
  let isWithdrawn = Atomic<Bool>(false)
  /// The load that withdrawing this ticket abandoned (and cancelled), if it did: its identifier,
  /// and its task unless it was a batch's that goes on for the batch's other loads. Its task
  /// may still run: the prefetch waits for it.
  let abandonedLoad = Locked<(id: UInt64, task: Task<Void, Never>?)?>(nil)
}

/// How one prefetch ended.
enum PrefetchOutcome: Sendable {
  /// The value came from the origin, or from a lower layer into the top one.
  case loaded
  /// The value was already where the prefetch puts it.
  case skipped
  /// The load failed (after the retries of the cache's policy).
  case failed(any Error)
  /// The prefetch was withdrawn or its task cancelled.
  case cancelled
}
