// Tags: invalidating one through the chain, and the instants its invalidations and tagged
// entries are stamped with (see <doc:Semantics#Tags>).
extension CacheChain {
  /// Invalidates `tag`: every entry filed under it (``EntryMetadata/tags``) that any layer of
  /// the chain holds, produced before now, is a miss from now on. O(1) in the entries: records
  /// the tag's invalidation instant, and a read tells a dead entry from its metadata; the
  /// entries themselves go lazily (see <doc:Semantics#Tags>).
  ///
  /// The chain checks what every layer answers with against its invalidations, for as long as
  /// it lives, and hands each invalidation to its layers
  /// (``AsyncCacheLayer/invalidate(tag:at:)``), so that a layer that keeps entries across
  /// restarts or shares them between processes keeps them dead there too.
  ///
  /// - Throws: ``EntryMetadataError`` when `tag` could be no entry's tag (empty, or longer than
  ///   ``EntryMetadata/maximumTagLength`` bytes); ``AsyncCacheError/Code/layerFailure`` for the
  ///   first layer whose policy is ``LayerFailurePolicy/propagate`` that failed to record it,
  ///   after trying all of them (the chain's own reads hold it dead all the same).
  public nonisolated func invalidate(tag: String) async throws {
    try EntryMetadata.validate(tag: tag)
    try await invalidate(tag: tag, at: tagStamp())
  }

  /// Invalidates `tag` as of `instant`, as ``invalidate(tag:)`` does as of now: the chain's
  /// entries filed under it and produced at or before `instant` are misses from now on.
  ///
  /// - Throws: What ``invalidate(tag:)`` throws.
  public nonisolated func invalidate(tag: String, at instant: CacheInstant) async throws {
    try EntryMetadata.validate(tag: tag)
    try checkOpen("invalidate(tag:)")
    tagInvalidations.record(tag, at: instant)
    try await removeEverywhere(operation: .invalidateTag, key: nil) { try await $0.invalidate(tag: tag, at: instant) }
  }

  /// An instant to stamp an invalidation or a tagged entry with: now on the chain's clock, after
  /// every instant stamped before (see ``TagStamps``).
  nonisolated func tagStamp() -> CacheInstant {
    tagStamps.next(now: followedClock.value.now)
  }
}
