/// The storage of a segment that was emptied, released when the last reference goes away.
// SAFETY: sole owner of pointers a segment replaced under its lock; touched only in deinit.
@usableFromInline
final class DetachedNodes<Key: Hashable, Value>: @unchecked Sendable {
  // Created under a segment's lock from the pointers (and the metadata table) the segment has
  // just replaced, so this object is their only owner; it never reads or writes them except to
  // release them in deinit, and the nodes and the table hold only Sendable keys and values (a
  // MemoryStore's) and EntryMetadata, which is Sendable.
  private let nodes: UnsafeMutablePointer<MemoryNode<Key, Value>>
  private let controls: UnsafeMutablePointer<UInt8>
  private let slotCount: Int
  /// Released with the nodes, after the segment's lock.
  private let metadata: [Key: EntryMetadata]

  @usableFromInline
  init(
    nodes: UnsafeMutablePointer<MemoryNode<Key, Value>>, controls: UnsafeMutablePointer<UInt8>, slotCount: Int,
    metadata: [Key: EntryMetadata]
  ) {
    self.nodes = nodes
    self.controls = controls
    self.slotCount = slotCount
    self.metadata = metadata
  }

  deinit {
    MemorySegment<Key, Value>.release(nodes: nodes, controls: controls, slotCount: slotCount)
  }
}
