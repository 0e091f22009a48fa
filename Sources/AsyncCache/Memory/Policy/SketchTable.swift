/// The counters of a ``FrequencySketch``: one allocation aligned on a 64-byte cache line, so
/// that each block of eight words is exactly one line and a key's four counters cost one miss.
@usableFromInline
final class SketchTable {
  @usableFromInline let words: UnsafeMutablePointer<UInt64>
  @usableFromInline let count: Int

  init(count: Int) {
    self.count = count
    words = UnsafeMutableRawPointer.allocate(byteCount: count * MemoryLayout<UInt64>.stride, alignment: 64)
      .bindMemory(to: UInt64.self, capacity: count)
    words.initialize(repeating: 0, count: count)
  }

  deinit {
    words.deallocate()
  }
}
