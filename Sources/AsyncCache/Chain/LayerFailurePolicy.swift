/// What a ``CacheChain`` does when one of its layers throws.
///
/// A layer that fails (a disk error, a server that is down) is not a miss in disguise: the
/// chain either goes on without it, recording the failure, or fails the operation.
public enum LayerFailurePolicy: Sendable, Hashable {
  /// Go on without the layer: a failed lookup counts as a miss in that layer and the next layer
  /// is asked; a failed write is followed by a best-effort removal of the key from that layer
  /// (so it cannot serve an older value later). The failure is counted in
  /// ``CacheChain/statistics`` and passed to ``CacheChain/Configuration-swift.struct/onFailure``.
  case skip
  /// Fail the operation with ``AsyncCacheError/Code/layerFailure``, whose
  /// ``AsyncCacheError/underlying`` is the layer's error. The failure is recorded as well.
  case propagate
}

/// When a ``CacheChain`` copies an entry found in a lower layer into the layers above it.
public enum BackfillPolicy: Sendable, Hashable {
  /// Before the lookup returns: the next lookup is served by the top layer.
  case awaited
  /// In a task of its own, after the lookup returned: the lookup returns sooner. Await
  /// ``CacheChain/waitForBackfills()`` to know when the copies are done.
  case background
}

/// A layer of a ``CacheChain`` that threw.
public struct LayerFailure: Sendable, CustomStringConvertible {
  /// The chain operation during which a layer failed.
  public enum Operation: String, Sendable, Hashable {
    /// Looking up an entry.
    case lookup
    /// Inserting an entry.
    case insert
    /// Copying an entry found lower down into an upper layer.
    case backfill
    /// Removing an entry.
    case remove
    /// Removing every entry.
    case removeAll
    /// Invalidating a tag (``CacheChain/invalidate(tag:)``).
    case invalidateTag
    /// Closing the layer (``CacheChain/close()``).
    case close
  }

  /// The position of the layer in the chain, 0 being the top.
  public var tierIndex: Int
  /// The layer's name (its type unless the tier was given a name).
  public var layerName: String
  /// What the chain was doing.
  public var operation: Operation
  /// What the layer threw.
  public var error: any Error

  public var description: String {
    "layer \(tierIndex) (\(layerName)) failed during \(operation.rawValue): \(error)"
  }
}
