import AsyncCache

/// The instances' waits for the holders of leases, by key: the load channel's messages are
/// handed to the waits for their key.
final class LeaseWaits: Sendable {
  /// What wakes a wait.
  enum Signal: Sendable, Equatable {
    /// A message about the key.
    case announced(LoadAnnouncement)
    /// Messages may have been lost (the subscription broke), or the wait's time is up: look
    /// again.
    case lookAgain
    /// Redis stopped answering (the subscription's health check timed out): load without
    /// coordination.
    case unreachable
    /// The waiting task was cancelled.
    case cancelled
  }

  /// One task's wait for messages about a key: they are kept until it reads them.
  final class Mailbox: Sendable {
    private struct State {
      var signals: [Signal] = []
      var continuation: CheckedContinuation<Signal, Never>?
    }

    private let state = Locked(State())

    func post(_ signal: Signal) {
      let continuation = state.withLock { state -> CheckedContinuation<Signal, Never>? in
        guard let continuation = state.continuation else {
          state.signals.append(signal)
          return nil
        }
        state.continuation = nil
        return continuation
      }
      continuation?.resume(returning: signal)
    }

    /// The next signal, waiting at most `limit` on `clock` for one: ``Signal/lookAgain`` then.
    func next(within limit: Duration, on clock: any CacheClock) async -> Signal {
      let timer = Task {
        try? await clock.sleep(until: clock.now.advanced(by: limit), tolerance: nil)
        if !Task.isCancelled { self.post(.lookAgain) }
      }
      defer { timer.cancel() }
      return await withTaskCancellationHandler {
        await withCheckedContinuation { (continuation: CheckedContinuation<Signal, Never>) in
          let ready = state.withLock { state -> Signal? in
            if Task.isCancelled { return .cancelled }
            guard state.signals.isEmpty else { return state.signals.removeFirst() }
            state.continuation = continuation
            return nil
          }
          if let ready { continuation.resume(returning: ready) }
        }
      } onCancel: {
        post(.cancelled)
      }
    }
  }

  private let mailboxes = Locked<[String: [ObjectIdentifier: Mailbox]]>([:])

  /// A mailbox that gets the messages about `key` from now on.
  func register(_ key: String) -> Mailbox {
    let mailbox = Mailbox()
    mailboxes.withLock { $0[key, default: [:]][ObjectIdentifier(mailbox)] = mailbox }
    return mailbox
  }

  func unregister(_ key: String, _ mailbox: Mailbox) {
    mailboxes.withLock { mailboxes in
      mailboxes[key]?.removeValue(forKey: ObjectIdentifier(mailbox))
      if mailboxes[key]?.isEmpty == true { mailboxes.removeValue(forKey: key) }
    }
  }

  /// Hands `announcement` to the waits for its key.
  func deliver(_ announcement: LoadAnnouncement) {
    let waiting = mailboxes.withLock { $0[announcement.key].map { Array($0.values) } ?? [] }
    for mailbox in waiting { mailbox.post(.announced(announcement)) }
  }

  /// Tells every wait to look again, or what `signal` says.
  func wakeAll(with signal: Signal = .lookAgain) {
    let waiting = mailboxes.withLock { $0.values.flatMap(\.values) }
    for mailbox in waiting { mailbox.post(signal) }
  }

  /// The keys waited for now.
  var count: Int { mailboxes.withLock { $0.values.reduce(0) { $0 + $1.count } } }
}
