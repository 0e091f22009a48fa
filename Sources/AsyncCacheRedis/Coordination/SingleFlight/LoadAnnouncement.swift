import AsyncCache

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
