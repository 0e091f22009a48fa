import AsyncCache

extension RedisLayer {
  /// The key as the key encoding writes it, without the namespace.
  @usableFromInline
  nonisolated func encodedKey(_ key: Key) throws -> String {
    do {
      return try keyEncoding.encode(key)
    } catch {
      throw PersistenceError(
        code: .encodingFailed, message: "RedisLayer could not encode the key \(String(describing: key).prefix(200))",
        underlying: error)
    }
  }

  /// The start of every stored key of `namespace`: the namespace with `\` and `:` escaped by
  /// a `\`, then `:`.
  ///
  /// An escaped namespace has no unescaped `:`, so the first unescaped `:` of a stored key ends
  /// its namespace: no prefix starts another (`a:` never starts `a\:b:…`), and a `SCAN` for
  /// one prefix matches that namespace's keys only. A namespace without `:` or `\` keeps the
  /// prefix it had before this escaping.
  static func keyPrefix(of namespace: String) -> [UInt8] {
    var prefix: [UInt8] = []
    prefix.reserveCapacity(namespace.utf8.count + 1)
    for byte in namespace.utf8 {
      if byte == UInt8(ascii: ":") || byte == UInt8(ascii: "\\") { prefix.append(UInt8(ascii: "\\")) }
      prefix.append(byte)
    }
    prefix.append(UInt8(ascii: ":"))
    return prefix
  }

  /// `bytes` with the glob characters of `SCAN MATCH` escaped.
  static func globEscaped(_ bytes: [UInt8]) -> [UInt8] {
    var escaped: [UInt8] = []
    escaped.reserveCapacity(bytes.count)
    for byte in bytes {
      if byte == UInt8(ascii: "*") || byte == UInt8(ascii: "?") || byte == UInt8(ascii: "[")
        || byte == UInt8(ascii: "]") || byte == UInt8(ascii: "\\")
      {
        escaped.append(UInt8(ascii: "\\"))
      }
      escaped.append(byte)
    }
    return escaped
  }
}
