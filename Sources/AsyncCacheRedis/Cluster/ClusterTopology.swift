/// Which node serves which slots, as a node's `CLUSTER SLOTS` reply says.
struct ClusterTopology: Sendable, Equatable {
  /// A range of slots and the master that serves it.
  struct Range: Sendable, Equatable {
    var slots: ClosedRange<Int>
    var master: RedisEndpoint
  }

  /// The served ranges, in the order the node listed them.
  var ranges: [Range]

  /// The masters, each once, in the order of their first range.
  var masters: [RedisEndpoint] {
    var seen = Set<RedisEndpoint>()
    return ranges.map(\.master).filter { seen.insert($0).inserted }
  }

  /// Reads a `CLUSTER SLOTS` reply: an array of `[start, end, [host, port, id, …], replica…]`.
  ///
  /// A master without a host (an empty or `NULL` host, or `?` for an endpoint the node does not
  /// know) is reached at `askedHost`, the host of the node that answered.
  ///
  /// - Throws: ``RedisError/Code/protocolError`` naming what is wrong with the reply.
  init(slotsReply reply: RESPValue, askedHost: String, server: String) throws(RedisError) {
    func malformed(_ what: String) -> RedisError {
      RedisError(
        code: .protocolError,
        message: "\(server) answered CLUSTER SLOTS with \(what): \(String(describing: reply).prefix(300))")
    }
    guard case .array(let entries?) = reply else { throw malformed("a reply that is not an array") }
    var ranges: [Range] = []
    ranges.reserveCapacity(entries.count)
    for entry in entries {
      guard case .array(let parts?) = entry, parts.count >= 3, case .integer(let start) = parts[0],
        case .integer(let end) = parts[1], case .array(let master?) = parts[2], master.count >= 2,
        case .integer(let port) = master[1]
      else { throw malformed("an entry that is not [start, end, [host, port, …], …]") }
      guard 0 <= start, start <= end, end < Int64(ClusterSlot.count) else {
        throw malformed("the slot range \(start)...\(end), outside 0...\(ClusterSlot.count - 1)")
      }
      guard (1...65535).contains(port) else { throw malformed("the port \(port)") }
      let host: String
      switch master[0] {
      case .bulkString(let bytes?) where !bytes.isEmpty && bytes != [UInt8(ascii: "?")]:
        host = String(decoding: bytes, as: UTF8.self)
      case .bulkString, .null:
        host = askedHost
      default:
        throw malformed("a host that is not a string")
      }
      ranges.append(Range(slots: Int(start)...Int(end), master: RedisEndpoint(host: host, port: Int(port))))
    }
    self.ranges = ranges
  }

  init(ranges: [Range]) {
    self.ranges = ranges
  }
}

/// A cluster's answer that a key's slot is served elsewhere.
struct ClusterRedirect: Sendable, Equatable {
  enum Kind: Sendable, Equatable {
    /// `MOVED`: the slot lives on `target` now; ask it from now on.
    case moved
    /// `ASK`: the slot is migrating and this key may be on `target` already; ask it this once,
    /// after `ASKING`.
    case ask
  }

  var kind: Kind
  var slot: Int
  var target: RedisEndpoint

  init(kind: Kind, slot: Int, target: RedisEndpoint) {
    self.kind = kind
    self.slot = slot
    self.target = target
  }

  /// Reads `MOVED <slot> <host>:<port>` or `ASK <slot> <host>:<port>`; `nil` for any other
  /// error. An empty host (`:6380`) is `askedHost`.
  init?(errorText text: String, askedHost: String) {
    let words = text.split(separator: " ")
    guard words.count == 3 else { return nil }
    let kind: Kind
    switch words[0] {
    case "MOVED": kind = .moved
    case "ASK": kind = .ask
    default: return nil
    }
    guard let slot = Int(words[1]), (0..<ClusterSlot.count).contains(slot),
      let colon = words[2].lastIndex(of: ":"), let port = Int(words[2][words[2].index(after: colon)...]),
      (1...65535).contains(port)
    else { return nil }
    var host = String(words[2][..<colon])
    // An IPv6 address may come in brackets.
    if host.hasPrefix("[") && host.hasSuffix("]") { host = String(host.dropFirst().dropLast()) }
    if host.isEmpty || host == "?" { host = askedHost }
    self.kind = kind
    self.slot = slot
    self.target = RedisEndpoint(host: host, port: port)
  }
}
