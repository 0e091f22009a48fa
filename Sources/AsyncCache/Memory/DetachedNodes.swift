/// The storage of a segment that was emptied, released when the last reference goes away.
// SAFETY: sole owner of pointers a segment replaced under its lock; touched only in deinit.
@usableFromInline
final class DetachedNodes<Key, Value>: @unchecked Sendable {
  // Created under a segment's lock from the pointers the segment has just replaced, so this
  // object is their only owner; it never reads or writes them except to release them in deinit,
  // and the nodes hold only Sendable keys and values (a MemoryStore's).
  private let nodes: UnsafeMutablePointer<MemoryNode<Key, Value>>
  private let count: Int
  private let buckets: UnsafeMutablePointer<UInt64>

  @usableFromInline
  init(nodes: UnsafeMutablePointer<MemoryNode<Key, Value>>, count: Int, buckets: UnsafeMutablePointer<UInt64>) {
    self.nodes = nodes
    self.count = count
    self.buckets = buckets
  }

  deinit {
    nodes.deinitialize(count: count)
    nodes.deallocate()
    buckets.deallocate()
  }
}
