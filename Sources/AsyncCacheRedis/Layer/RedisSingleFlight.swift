import AsyncCache

/// One load per key for the whole fleet: the instances that share a ``RedisLayer`` namespace
/// ask the origin once between them for a key that none has (see
/// <doc:RunningOnManyMachines#One-load-per-key-for-the-fleet>).
///
/// With it set in the layer's configuration, a `LoadingCache` over the layer claims a lease for
/// the key in Redis before it asks its origin. The instance that gets the lease loads, stores
/// the value (if no write or removal of the key came after the lease was granted: a fenced
/// fill) and announces it on the namespace's load channel; the others wait for the
/// announcement and read the value from Redis. Every instance of a namespace must set it:
/// an instance without it neither waits for leases nor moves the key's version forward when it
/// writes.
public struct RedisSingleFlight: Sendable, Hashable {
  /// How long a lease lasts unless its holder renews it: the longest the other instances wait
  /// for an instance that died in the middle of a load. The holder renews it every third of
  /// this while its load runs, so a load may take longer. Default 5 seconds; from 30 ms to one
  /// day.
  public var leaseTime: Duration
  /// The pub/sub channel of the load announcements, or `nil` (the default) for
  /// `asynccache:loads:<namespace>`. Every instance of a namespace must use the same one, and
  /// no other namespace's: neither one of theirs nor a name of the
  /// `asynccache:invalidations:` family (refused).
  public var channel: String?
  /// How often the holder renews its lease; `nil` for a third of the lease time. Tests set it
  /// shorter, to see renewals without waiting for them.
  var renewalInterval: Duration?

  /// Creates single-flight settings.
  public init(leaseTime: Duration = .seconds(5), channel: String? = nil) {
    self.leaseTime = leaseTime
    self.channel = channel
  }

  /// The channel for `namespace`.
  func channel(for namespace: String) -> String {
    channel ?? "asynccache:loads:\(namespace)"
  }

  /// The lease time in whole milliseconds.
  var leaseMilliseconds: Int64 { max(1, leaseTime.saturatingMilliseconds) }

  /// How long a key's version outlives its last lease, write or removal, in milliseconds: long
  /// enough that a holder cut off from Redis cannot see its own token come back.
  var versionMilliseconds: Int64 { max(60_000, leaseMilliseconds * 4) }
}

extension Duration {
  /// The duration in whole milliseconds, rounded down, within `Int64`.
  var saturatingMilliseconds: Int64 {
    let (seconds, attoseconds) = components
    let (product, overflow) = seconds.multipliedReportingOverflow(by: 1000)
    guard !overflow else { return seconds < 0 ? .min : .max }
    return product &+ attoseconds / 1_000_000_000_000_000
  }
}

/// What one message on a namespace's load channel says:
/// `<kind> <token> <sender> <key length> <key>[<detail>]`, where kind is `D` (the holder of
/// lease `token` stored the key's value; the detail is the stored bytes when they are small, so
/// that waiting instances need not read them), `R` (look again: the holder released the lease
/// without storing, cancelled or superseded by a write; or another instance wrote the key while
/// the lease was held, and is the sender), `N` (it loaded a value Redis cannot keep: the others
/// load on their own) or `F` (its origin failed; the detail is the error, as text).
struct LoadAnnouncement: Sendable, Equatable {
  enum Kind: UInt8, Sendable {
    case done = 68  // D
    case released = 82  // R
    case failed = 70  // F
    /// The holder loaded a value it could not store (expired already, too large): each waiting
    /// instance loads on its own, at once.
    case notStored = 78  // N
  }

  var kind: Kind
  var token: UInt64
  /// The id of the instance that held the lease: 32 hexadecimal digits.
  var sender: [UInt8]
  var key: String
  /// The stored bytes (`D`) or the error's description (`F`); may be empty.
  var detail: [UInt8]

  /// The most stored bytes a `D` announcement carries: every instance receives it.
  static let maximumDetail = 16 << 10

  /// The detail as text.
  var reason: String { String(decoding: detail, as: UTF8.self) }

  init(kind: Kind, token: UInt64, sender: [UInt8], key: String, reason: String = "") {
    self.init(kind: kind, token: token, sender: sender, key: key, detail: Array(reason.utf8))
  }

  init(kind: Kind, token: UInt64, sender: [UInt8], key: String, detail: [UInt8]) {
    self.kind = kind
    self.token = token
    self.sender = sender
    self.key = key
    self.detail = detail
  }

  /// The message's bytes.
  var encoded: [UInt8] {
    var bytes: [UInt8] = [kind.rawValue, UInt8(ascii: " ")]
    bytes += Array(String(token).utf8)
    bytes.append(UInt8(ascii: " "))
    bytes += sender
    bytes.append(UInt8(ascii: " "))
    bytes += Array(String(key.utf8.count).utf8)
    bytes.append(UInt8(ascii: " "))
    bytes += Array(key.utf8)
    bytes += detail
    return bytes
  }

  /// Reads a message; `nil` for bytes that are not one.
  init?(_ bytes: [UInt8]) {
    var index = 0
    func field() -> ArraySlice<UInt8>? {
      guard let end = bytes[index...].firstIndex(of: UInt8(ascii: " ")) else { return nil }
      defer { index = end + 1 }
      return bytes[index..<end]
    }
    guard let kindField = field(), kindField.count == 1, let kind = Kind(rawValue: kindField.first!),
      let tokenField = field(), let token = UInt64(String(decoding: tokenField, as: UTF8.self)),
      let sender = field(), sender.count == 32,
      let lengthField = field(), let length = Int(String(decoding: lengthField, as: UTF8.self)),
      length >= 0, length <= bytes.count - index,
      let key = String(validating: bytes[index..<index + length], as: UTF8.self)
    else { return nil }
    self.kind = kind
    self.token = token
    self.sender = Array(sender)
    self.key = key
    self.detail = Array(bytes[(index + length)...])
  }
}

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
