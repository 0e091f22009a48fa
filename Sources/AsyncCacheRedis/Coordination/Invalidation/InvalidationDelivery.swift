import AsyncCache

/// What an instance does with the messages its subscription receives on the invalidation
/// channel: removes the keys they name from the layers it forwards invalidations to, or empties
/// those layers; and what it does after subscribing again, when messages may have been lost.
///
/// The messages are other instances' (``RedisInvalidation/Mode-swift.struct/publish``: its own
/// are ignored) or the server's (``RedisInvalidation/Mode-swift.struct/serverAssisted``).
struct InvalidationDelivery<Key: Hashable & Sendable, Value: Sendable>: Sendable {
  /// Whether the server reports the changes (`CLIENT TRACKING` on `__redis__:invalidate`)
  /// rather than the instances (``InvalidationMessage``).
  let tracks: Bool
  /// `<escaped namespace>:`: the start of the namespace's stored keys.
  let prefix: [UInt8]
  /// This instance's id in its messages.
  let sender: [UInt8]
  /// Reads a key from its encoded form.
  let decode: @Sendable (String) throws -> Key
  /// The layers invalidations are forwarded to.
  let targets: Locked<[any AsyncCacheLayer<Key, Value>]>
  /// The layer's single flight, when configured: the values this instance took from a load's
  /// announcement are kept when the load's invalidation comes.
  let flight: SingleFlightState?
  let counters: RedisCounters
  /// The instance's copy of the namespace's tag invalidations.
  let tags: RedisTagMirror
  /// The namespace's hash of tag invalidations, whose change the server reports (tracking).
  let tagsKey: [UInt8]
  /// Tells the chain the layer is in of tag invalidations by other instances.
  let tellChain: @Sendable (LearntInvalidation) -> Void

  /// Applies one message (its channel, its payload); the subscription calls it in order.
  func deliver(_ channel: [UInt8], _ payload: RESPValue) async {
    var changes: [InvalidationMessage.Change] = []
    if tracks {
      // `__redis__:invalidate`: the keys changed, or null for a flush of the database.
      switch payload {
      case .array(let keys?):
        for case .bulkString(let stored?) in keys where stored == tagsKey {
          // Which tag changed is not said: the copy is read again, the layers above emptied, and
          // the cache turns later requests away from its loads in flight.
          tags.markStale()
          tellChain(.unknown)
          changes.append(.all)
        }
        for case .bulkString(let stored?) in keys where stored.starts(with: prefix) {
          guard let encodedKey = String(validating: stored[prefix.count...], as: UTF8.self) else { continue }
          changes.append(.key(encodedKey))
        }
      case .bulkString(nil), .null, .array(nil):
        changes.append(.all)
      default:
        return
      }
    } else {
      guard case .bulkString(let bytes?) = payload, let message = InvalidationMessage(bytes),
        message.sender != sender
      else { return }
      changes.append(message.change)
    }
    guard !changes.isEmpty else { return }
    // Counted once applied: a reader that sees the count grow finds the layers told.
    defer { counters.invalidationsReceived.add(1, ordering: .releasing) }
    let layers = targets.withLock { $0 }
    for change in changes {
      switch change {
      case .loaded(let encodedKey, let token):
        // This instance took that load's value from its announcement: its copy is the new one.
        if flight?.takeAnswered(SingleFlightState.Lease(key: encodedKey, token: token)) == true { continue }
        guard let key = try? decode(encodedKey) else { continue }
        for layer in layers { try? await layer.removeValue(for: key) }
      case .key(let encodedKey):
        // A key this layer's encoding cannot read was not written by an instance of it.
        guard let key = try? decode(encodedKey) else { continue }
        for layer in layers { try? await layer.removeValue(for: key) }
      case .all:
        for layer in layers { try? await layer.removeAll() }
      case .tag(let tag, let nanoseconds):
        let instant = CacheInstant(nanosecondsSince1970: nanoseconds)
        tags.invalidations.record(tag, at: instant)
        tellChain(.tag(tag, at: instant))
        for layer in layers { try? await layer.invalidate(tag: tag, at: instant) }
      }
    }
  }

  /// Empties the layers invalidations are forwarded to, and marks the copy of the tag
  /// invalidations stale: the messages sent while the subscription was down are lost.
  func resynchronize() async {
    tags.markStale()
    tellChain(.unknown)
    for layer in targets.withLock({ $0 }) { try? await layer.removeAll() }
  }
}
