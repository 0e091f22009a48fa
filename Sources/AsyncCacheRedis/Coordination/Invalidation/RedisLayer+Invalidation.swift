public import AsyncCache

extension RedisLayer {
  /// Removes a key from `layers` whenever another instance writes or removes it in Redis, and
  /// empties them when another instance calls ``removeAll()``: pass the layers above this one
  /// in the chain (its memory layer). Can be called more than once; the layers add up.
  ///
  /// The layer subscribes to the namespace's invalidation channel on a connection of its own,
  /// in the background, and keeps the subscription until it is shut down. Its own writes do
  /// not come back to it. When the subscription breaks, it subscribes again and then empties
  /// `layers`, because messages sent in between are lost. See ``RedisInvalidation`` for the
  /// consistency this gives.
  ///
  /// - Throws: `AsyncCacheError.Code.invalidConfiguration` when the configuration has no
  ///   ``Configuration-swift.struct/invalidation``: writes are not announced then.
  public nonisolated func forwardInvalidations(to layers: [any AsyncCacheLayer<Key, Value>]) throws {
    guard let subscription, configuration.invalidation != nil else {
      throw AsyncCacheError.invalidConfiguration(
        "RedisLayer: forwardInvalidations(to:) needs Configuration.invalidation to be set on every instance")
    }
    invalidationTargets.withLock { $0.append(contentsOf: layers) }
    subscription.start()
  }

  /// Whether the layer is subscribed to invalidations now: it forwards them, the subscription
  /// is open, and, when it opened again after a break, the layers it forwards to have been
  /// emptied of what the break may have left stale. Every change made from now on reaches them
  /// (until a break, which turns it `false` once the layer notices it).
  ///
  /// `false` until the first subscription opens, too: a copy a forwarded-to layer took before
  /// then may have missed a change made in that moment. A service that must not serve one
  /// reports itself ready (its readiness probe) only once this is `true`.
  public nonisolated var isReceivingInvalidations: Bool {
    configuration.invalidation != nil && !invalidationTargets.withLock(\.isEmpty)
      && (subscription?.isInSync ?? false)
  }

  /// Appends `PUBLISH <channel> <message>` to `writer` when writes are announced.
  nonisolated func announce(_ change: InvalidationMessage.Change, in writer: inout RESPCommandWriter) {
    guard let announcement else { return }
    writer.beginCommand(argumentCount: 3)
    writer.argument("PUBLISH")
    writer.argument(announcement.channel)
    writer.argument(InvalidationMessage(sender: announcement.sender, change: change).encoded)
  }

  /// Counts an invalidation message published, once the commands that carried it ran.
  nonisolated func countPublished() {
    if announcement != nil { counters.invalidationsPublished.add(1, ordering: .relaxed) }
  }

  /// The invalidation channel and the message announcing a change of `encodedKey`, or two empty
  /// arguments when writes are not announced: the last arguments of the fenced scripts.
  nonisolated func invalidationArguments(for encodedKey: String) -> [[UInt8]] {
    guard let announcement else { return [[], []] }
    return [announcement.channel, InvalidationMessage(sender: announcement.sender, change: .key(encodedKey)).encoded]
  }
}
