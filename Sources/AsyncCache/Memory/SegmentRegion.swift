/// The list a node of a ``MemorySegment`` is in.
///
/// Under ``EvictionPolicy/leastRecentlyUsed`` every node is in the ``window`` list, which is
/// then the one recency list.
@usableFromInline
enum SegmentRegion: UInt8, Sendable, CaseIterable {
  /// W-TinyLFU's admission window, where new entries start; LRU's only list.
  case window
  /// W-TinyLFU's main region: the entries not used since they entered it.
  case probation
  /// W-TinyLFU's main region: the entries used while in probation.
  case protected
}
