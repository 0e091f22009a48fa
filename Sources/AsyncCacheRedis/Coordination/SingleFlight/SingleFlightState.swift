import AsyncCache
import Synchronization

/// The state of a layer's single flight.
final class SingleFlightState: Sendable {
  let settings: RedisSingleFlight
  /// The namespace's load channel.
  let channel: [UInt8]
  /// This instance's id in announcements.
  let sender: [UInt8]
  /// The waits for other instances' loads.
  let waits = LeaseWaits()
  /// The renewals of the leases this instance holds, and the leases' stored values.
  let renewals = Locked<[Lease: (task: Task<Void, Never>, value: [UInt8])]>([:])
  /// The clock of the coordination's timers (lease waits, renewals): the layer's timers' clock.
  let clock: any CacheClock
  /// Set when Redis stopped answering the subscription's health check in time, until the
  /// subscription is open again: claims are then uncoordinated at once, and completions do not
  /// wait for a fill that cannot land.
  let isUnreachable = Atomic<Bool>(false)
  /// The completions that did not wait for Redis because it was unreachable.
  let completionsNotAwaited = Atomic<Int>(0)

  init(settings: RedisSingleFlight, channel: [UInt8], sender: [UInt8], clock: any CacheClock) {
    self.settings = settings
    self.channel = channel
    self.sender = sender
    self.clock = clock
  }

  /// The completions deferred while Redis was unreachable, until they end or the layer closes.
  private let deferred = Locked<(next: UInt64, tasks: [UInt64: Task<Void, Never>], isClosed: Bool)>((0, [:], false))

  /// Runs `work` (a completion Redis could not take) in a task that the layer's close cancels.
  func runDeferred(_ work: @escaping @Sendable () async -> Void) {
    deferred.withLock { deferred in
      guard !deferred.isClosed else { return }
      deferred.next += 1
      let id = deferred.next
      deferred.tasks[id] = Task {
        await work()
        _ = self.deferred.withLock { $0.tasks.removeValue(forKey: id) }
      }
    }
  }

  /// Cancels the deferred completions, and any deferred later: the layer is closed.
  func cancelDeferred() {
    let tasks = deferred.withLock { deferred in
      deferred.isClosed = true
      defer { deferred.tasks = [:] }
      return Array(deferred.tasks.values)
    }
    for task in tasks { task.cancel() }
  }

  /// Whether the server must be watched closely now: this instance waits for another's load,
  /// or holds a lease whose fill must know whether it can land.
  /// While Redis is unreachable, too: the probes that find it answering again end that.
  var isUrgent: Bool {
    waits.count > 0 || !renewals.withLock { $0.isEmpty } || isUnreachable.load(ordering: .acquiring)
  }

  /// Redis stopped answering: the waits for other instances' loads end, to load without
  /// coordination.
  func markUnreachable() {
    isUnreachable.store(true, ordering: .releasing)
    waits.wakeAll(with: .unreachable)
  }

  /// Takes a message on the load channel at once, on the subscription's connection thread:
  /// load announcements wake waits with no hop through the ordered delivery. Returns whether the
  /// message was on the load channel (it is taken then, read or not).
  func receiveNow(_ channel: [UInt8], _ payload: [UInt8]) -> Bool {
    guard channel == self.channel else { return false }
    if let announcement = LoadAnnouncement(payload) { waits.deliver(announcement) }
    return true
  }

  /// The subscription is open again after a break.
  func resubscribed() {
    // Redis answers again (if it had stopped): claims may be coordinated again.
    isUnreachable.store(false, ordering: .releasing)
    // Announcements sent while the subscription was down are lost: the waits look again.
    waits.wakeAll()
  }
  /// Other instances' loads whose value this instance took from their announcement, until the
  /// fill's invalidation (``InvalidationMessage/Change/loaded(key:token:)``) comes: that one
  /// must not drop the copy. The oldest are forgotten past ``answeredLimit``.
  let answered = Locked<(order: [Lease], set: Set<Lease>)>(([], []))
  static let answeredLimit = 1_024

  /// Notes that this instance took the value of load `lease` from its announcement.
  func noteAnswered(_ lease: Lease) {
    answered.withLock { answered in
      guard answered.set.insert(lease).inserted else { return }
      answered.order.append(lease)
      if answered.order.count > Self.answeredLimit {
        answered.set.remove(answered.order.removeFirst())
      }
    }
  }

  /// Whether this instance took the value of load `lease` from its announcement; forgets it.
  func takeAnswered(_ lease: Lease) -> Bool {
    answered.withLock { answered in
      guard answered.set.remove(lease) != nil else { return false }
      answered.order.removeAll { $0 == lease }
      return true
    }
  }

  struct Lease: Hashable, Sendable {
    var key: String
    var token: UInt64
  }

  /// A claim's nonce: 16 hexadecimal digits. A lease reads `<token> <nonce>`, so that a claim
  /// abandoned while its script was in flight can remove the lease it may have been granted.
  static func makeNonce() -> [UInt8] { randomHexDigits(16) }
}
