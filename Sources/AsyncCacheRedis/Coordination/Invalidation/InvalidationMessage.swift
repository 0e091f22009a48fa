import AsyncCache

/// What one message on the invalidation channel says: `<sender id> K <encoded key>` (the key
/// was written or removed), `<sender id> A` (the namespace was emptied), or
/// `<sender id> T <nanoseconds since 1970> <tag>` (the tag was invalidated then).
struct InvalidationMessage: Sendable, Equatable {
  enum Change: Sendable, Equatable {
    case key(String)
    /// A load stored the key's value under lease `token` (single flight): the instances that
    /// took that value from the load's announcement keep it; the others drop their copy.
    case loaded(key: String, token: UInt64)
    case all
    /// The tag was invalidated at the instant (nanoseconds since 1970).
    case tag(String, at: Int64)
  }

  /// The instance that made the change: 32 hexadecimal digits.
  var sender: [UInt8]
  var change: Change

  /// The message's bytes.
  var encoded: [UInt8] {
    switch change {
    case .key(let key): sender + Array(" K ".utf8) + Array(key.utf8)
    case .loaded(let key, let token): sender + Array(" L \(token) ".utf8) + Array(key.utf8)
    case .all: sender + Array(" A".utf8)
    case .tag(let tag, let instant): sender + Array(" T \(instant) ".utf8) + Array(tag.utf8)
    }
  }

  init(sender: [UInt8], change: Change) {
    self.sender = sender
    self.change = change
  }

  /// Reads a message; `nil` for bytes that are not one.
  init?(_ bytes: [UInt8]) {
    guard bytes.count >= 34, bytes[32] == UInt8(ascii: " ") else { return nil }
    sender = Array(bytes[..<32])
    switch (bytes[33], bytes.count) {
    case (UInt8(ascii: "A"), 34):
      change = .all
    case (UInt8(ascii: "K"), 35...) where bytes[34] == UInt8(ascii: " "):
      guard let key = String(validating: bytes[35...], as: UTF8.self) else { return nil }
      change = .key(key)
    case (UInt8(ascii: "L"), 37...) where bytes[34] == UInt8(ascii: " "):
      guard let space = bytes[35...].firstIndex(of: UInt8(ascii: " ")),
        let token = UInt64(String(decoding: bytes[35..<space], as: UTF8.self)),
        let key = String(validating: bytes[(space + 1)...], as: UTF8.self)
      else { return nil }
      change = .loaded(key: key, token: token)
    case (UInt8(ascii: "T"), 37...) where bytes[34] == UInt8(ascii: " "):
      guard let space = bytes[35...].firstIndex(of: UInt8(ascii: " ")),
        let instant = Int64(String(decoding: bytes[35..<space], as: UTF8.self)),
        let tag = String(validating: bytes[(space + 1)...], as: UTF8.self),
        (try? EntryMetadata.validate(tag: tag)) != nil
      else { return nil }
      change = .tag(tag, at: instant)
    default:
      return nil
    }
  }

  /// A new random instance id.
  static func makeSender() -> [UInt8] { randomHexDigits(32) }
}

/// `count` random lowercase hexadecimal digits: ids of instances and claims.
func randomHexDigits(_ count: Int) -> [UInt8] {
  let digits = Array("0123456789abcdef".utf8)
  var generator = SystemRandomNumberGenerator()
  return (0..<count).map { _ in digits[Int(generator.next() & 15)] }
}
