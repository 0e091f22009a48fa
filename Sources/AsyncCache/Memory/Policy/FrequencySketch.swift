// Public because the prefetch is called from inlinable code; the module declares a few inline C
// functions (hints, and the futex calls of the lock) and nothing else.
public import CAsyncCacheShims

/// A count-min sketch of how often keys were seen recently, with 4-bit counters that age: the
/// popularity estimate behind the W-TinyLFU admission of ``MemorySegment``.
///
/// The design is Caffeine's `FrequencySketch` (version 3): a table of 64-bit words, each
/// holding sixteen 4-bit counters, grouped in blocks of eight words (one 64-byte cache line).
/// A key picks one block, and in it one counter in each of four word pairs (depth 4), so all of
/// a key's counters share a cache line: an increment or an estimate touches one line, not four.
/// Its frequency is the smallest of its four counters, so the estimate never falls below the
/// true count (until the sketch ages) and rarely rises much above it. Counters saturate at 15.
///
/// After ``sampleSize`` increments (15 × the maximum size) every counter is halved, so that
/// the sketch forgets old popularity and follows a changing workload (the *reset* of the
/// TinyLFU paper by Einziger, Friedman and Manes).
///
/// Not thread-safe: guarded by its owner. The table has reference semantics (a copy shares it;
/// ``copy()`` makes an independent one). O(1) per call, no allocation after `init`.
@usableFromInline
struct FrequencySketch {
  /// The counters, sixteen 4-bit counters per word, aligned on a cache line so that a block
  /// is one line. Its length is a power of two, at least one block of eight words.
  @usableFromInline let storage: SketchTable
  /// `storage.words`, kept here (``storage`` keeps it alive) so that a hit reaches the table
  /// without loading the table object first.
  @usableFromInline let words: UnsafeMutablePointer<UInt64>
  /// `storage.count / 8 - 1`, to map a hash onto a block.
  @usableFromInline let blockMask: Int
  /// How many increments (that raised at least one counter) trigger an aging.
  @usableFromInline var sampleSize: Int
  /// Increments (that raised at least one counter) since the last aging, adjusted after it.
  @usableFromInline var sampleCount: Int
  /// The number of entries the sketch is sized for.
  @usableFromInline let size: Int

  /// Table words per entry: 32 counters of 4 bits (Caffeine has 16). Fewer collisions, so
  /// sharper admission decisions: on the Zipf traces of `cache.hitRatio` at 10k entries,
  /// +0.01 to +0.02 of capture ratio for 8 more bytes per entry.
  @usableFromInline static var wordsPerEntry: Int { 2 }
  /// Table words per entry of ``EvictionPolicy/adaptive``'s sketch beyond its first
  /// ``compactFullWords`` words: Caffeine's 16 counters, so that an entry of the default policy
  /// stays within 64 bytes (`memory.bytesPerEntry`).
  @usableFromInline static var compactWordsPerEntry: Int { 1 }
  /// The words up to which ``EvictionPolicy/adaptive``'s sketch keeps ``wordsPerEntry`` words
  /// per entry: a segment of up to 4,096 entries (a layer of up to 131k entries with 32
  /// segments) gets the sharper sketch, whose 64 KiB matter little, and a larger one grows by
  /// ``compactWordsPerEntry``. With one word per entry throughout, `cache.hitRatio` lost up to
  /// 0.4 point on a loop and a shifting hot set at 10k entries (small sketches collide most).
  @usableFromInline static var compactFullWords: Int { 8_192 }
  /// The increments between two agings, per entry (Caffeine has 10). A longer memory keeps the
  /// estimates of a steady workload sharper (+0.01 to +0.03 of capture ratio on the Zipf
  /// traces) while a shifting one still halves its old counts after 15 accesses per entry.
  @usableFromInline static var sampleFactor: Int { 15 }

  /// The largest number of entries a sketch is sized for (a table of 256 MiB); larger caches
  /// share counters a little more.
  @usableFromInline static var maximumCapacity: Int { 1 << 24 }

  /// The words of one block: one 64-byte cache line.
  @usableFromInline static var blockLength: Int { 8 }

  /// Every counter's lowest bit.
  @usableFromInline static var oneMask: UInt64 { 0x1111_1111_1111_1111 }
  /// Every counter's three lowest bits: what is left of each counter after a right shift.
  @usableFromInline static var resetMask: UInt64 { 0x7777_7777_7777_7777 }

  /// Creates a sketch for a cache of at most `maximumSize` entries.
  ///
  /// - Parameter maximumSize: The number of entries the cache holds at most; the table gets
  ///   ``wordsPerEntry`` words per entry, rounded up to a power of two (at least one block of
  ///   eight words), and aging happens every ``sampleFactor`` × `maximumSize` increments. Sizes
  ///   above ``maximumCapacity`` count as it.
  ///   With `compact`, the table of ``EvictionPolicy/adaptive`` (``compactTableLength(forMaximumSize:)``);
  ///   with `dense` too, at least ``denseWords(forMaximumSize:)`` words.
  @usableFromInline
  init(maximumSize: Int, compact: Bool = false, dense: Bool = false) {
    let size = Swift.min(Swift.max(maximumSize, 1), Self.maximumCapacity)
    var length = compact ? Self.compactTableLength(forMaximumSize: size) : Self.tableLength(forMaximumSize: size)
    if dense { length = Swift.max(length, Self.powerOfTwo(atLeast: Self.denseWords(forMaximumSize: size))) }
    self.init(maximumSize: size, tableLength: length)
  }

  /// A sketch for a cache of at most `maximumSize` entries (1 to ``maximumCapacity``) over a
  /// table of `length` words, a power of two of at least one block.
  private init(maximumSize size: Int, tableLength length: Int) {
    storage = SketchTable(count: length)
    words = storage.words
    blockMask = length / Self.blockLength - 1
    sampleSize = Self.sampleFactor * size
    self.size = size
    sampleCount = 0
  }

  /// The words of the table for a cache of at most `maximumSize` entries.
  static func tableLength(forMaximumSize maximumSize: Int) -> Int {
    let size = Swift.min(Swift.max(maximumSize, 1), Self.maximumCapacity)
    return powerOfTwo(atLeast: Self.wordsPerEntry * size)
  }

  /// The words of ``EvictionPolicy/adaptive``'s table for a cache of at most `maximumSize`
  /// entries: ``wordsPerEntry`` per entry up to ``compactFullWords``, ``compactWordsPerEntry``
  /// beyond.
  static func compactTableLength(forMaximumSize maximumSize: Int) -> Int {
    let size = Swift.min(Swift.max(maximumSize, 1), Self.maximumCapacity)
    let full = Swift.min(Self.wordsPerEntry * size, Self.compactFullWords)
    return powerOfTwo(atLeast: Swift.max(full, Self.compactWordsPerEntry * size))
  }

  /// The fewest words of a dense table (a small refereed layer's) for a cache of at most
  /// `maximumSize` entries: ``denseWordsPerEntry`` per entry, up to ``denseFloorWords``.
  static func denseWords(forMaximumSize maximumSize: Int) -> Int {
    Swift.min(
      Self.denseWordsPerEntry * Swift.min(Swift.max(maximumSize, 1), Self.maximumCapacity), Self.denseFloorWords)
  }

  /// Table words per entry of a dense sketch, up to ``denseFloorWords``. A small cache sees a
  /// workload's keys many times over: a table of two words per entry counted several of them on
  /// each counter, so that its duels (and a referee's shadows, which read the same sketch) went
  /// by the process's hash seed. Dense, on the LIRS suite (seven unseeded runs each), `multi1`
  /// at 200 entries went from 46.8–47.4% to 47.6–47.7%, `cpp` at 100 from 75.7–76.1% to
  /// 76.0–76.1%, `multi3` at 400 from 40.8–41.2% to 41.2–41.4%, and no row lost more than 0.3
  /// point. Aging still happens every ``sampleFactor`` increments per entry of the cache, so
  /// halving the table costs at most about 4 words per increment (32 words per entry, rounded up
  /// to a power of two, every 15 increments per entry).
  @usableFromInline static var denseWordsPerEntry: Int { 32 }
  /// The words (32 KiB) up to which a dense sketch takes ``denseWordsPerEntry`` per entry.
  @usableFromInline static var denseFloorWords: Int { 4_096 }

  /// The smallest power of two, at least one block, that is `words` or more.
  static func powerOfTwo(atLeast words: Int) -> Int {
    var length = Self.blockLength
    while length < words { length <<= 1 }
    return length
  }

  /// The counters, for tests.
  var table: [UInt64] { Array(UnsafeBufferPointer(start: storage.words, count: storage.count)) }

  /// An independent sketch with the same counts. For tests.
  func copy() -> FrequencySketch {
    var copy = FrequencySketch(maximumSize: size, tableLength: storage.count)
    copy.storage.words.update(from: storage.words, count: storage.count)
    copy.sampleSize = sampleSize
    copy.sampleCount = sampleCount
    return copy
  }

  /// Mixes the low 32 bits of a key's hash (all that a segment keeps of it) into 32 bits that
  /// pick its block: the high half of a product with an odd constant (Fibonacci hashing), in
  /// which every bit of the hash counts, so that weak hashes (a type whose `hashValue` is a
  /// small integer) still spread over the blocks. Swift's own hashes are uniform already, so
  /// one multiplication is enough; Caffeine, over Java's weaker `hashCode`, mixes more.
  @inlinable
  @inline(__always)
  static func spread(_ hash: Int) -> UInt64 {
    (UInt64(UInt32(truncatingIfNeeded: hash)) &* 0x9E37_79B9_7F4A_7C15) >> 32
  }

  /// Where the counters of `hash` are: the first word of its block, and 32 bits that pick, for
  /// each depth `i`, a word of the pair `2i, 2i + 1` of the block (bit `8i`) and a counter in
  /// it (bits `8i + 1 ..< 8i + 5`).
  ///
  /// The block and the picks come from two products with different constants, so that keys of
  /// one block rarely share all four counters. Cheap on purpose: a hit computes this (see
  /// `SegmentAdmission.recordUse`), and `memory.policy.hit` measured the two products at 1.28×
  /// LRU's hit where MurmurHash3's finalizer and a remix cost 1.37×, with the same hit ratios.
  @inlinable
  @inline(__always)
  func slots(_ hash: Int) -> (block: Int, picks: UInt64) {
    (block(hash), Self.picks(hash))
  }

  /// The first word of the block of `hash` (see ``slots(_:)``).
  @inlinable
  @inline(__always)
  func block(_ hash: Int) -> Int {
    Int(truncatingIfNeeded: Self.spread(hash)) & blockMask &* Self.blockLength
  }

  /// The counter picks of `hash` (see ``slots(_:)``): they depend on the hash alone, not on the
  /// table's size.
  @inlinable
  @inline(__always)
  static func picks(_ hash: Int) -> UInt64 {
    (UInt64(UInt32(truncatingIfNeeded: hash)) &* 0xC4CE_B9FE_1A85_EC53) >> 32
  }

  /// The counter of depth `depth` in `slots`, packed as `word << 4 | counter`.
  @inlinable
  @inline(__always)
  static func counter(_ depth: Int, of slots: (block: Int, picks: UInt64)) -> Int {
    let bits = Int(truncatingIfNeeded: slots.picks >> UInt64(depth << 3))
    let word = slots.block &+ (depth << 1) &+ (bits & 1)
    return word << 4 | (bits >> 1) & 15
  }

  /// The four counters of a hash, one per depth, each packed as `word << 4 | counter`.
  @inlinable
  @inline(__always)
  func counters(_ hash: Int) -> (Int, Int, Int, Int) {
    let slots = slots(hash)
    return (
      Self.counter(0, of: slots), Self.counter(1, of: slots), Self.counter(2, of: slots), Self.counter(3, of: slots)
    )
  }

  /// Starts bringing in the cache line of the block that starts at word `block`, for an
  /// increment soon, without waiting for it: a prefetch retires at once, and the lock that is
  /// released next does not wait for it either.
  @inlinable
  @inline(__always)
  func prefetch(block: Int) {
    async_cache_prefetch_for_write(words + block)
  }

  /// The counter at packed position `position` (`word << 4 | counter`).
  @inlinable
  @inline(__always)
  func counter(at position: Int) -> Int {
    Int(truncatingIfNeeded: (words[position >> 4] >> UInt64((position & 15) << 2)) & 0xF)
  }

  /// The estimated number of times `hash` was seen since it was last aged, from 0 to 15.
  ///
  /// Never below the true count (saturated at 15) until an aging halves it. O(1).
  @inlinable
  func frequency(_ hash: Int) -> Int {
    let (first, second, third, fourth) = counters(hash)
    return Swift.min(
      Swift.min(counter(at: first), counter(at: second)),
      Swift.min(counter(at: third), counter(at: fourth))
    )
  }

  /// Raises the counter at packed position `position` unless it is saturated, and says
  /// whether it did. Branch-free: the word is written back either way.
  @inlinable
  @inline(__always)
  mutating func increment(at position: Int) -> Bool {
    let offset = UInt64((position & 15) << 2)
    let word = words + (position >> 4)
    let value = word.pointee
    let raised = (value >> offset) & 0xF != 0xF
    word.pointee = value &+ (UInt64(raised ? 1 : 0) << offset)
    return raised
  }

  /// Records one more occurrence of `hash`, aging the whole sketch once ``sampleSize``
  /// increments were recorded.
  ///
  /// O(1); an aging is O(table size) and happens once per ``sampleSize`` increments.
  @inlinable
  @inline(__always)
  mutating func increment(_ hash: Int) {
    increment(slots: slots(hash))
  }

  /// Records one more occurrence of the key whose counters are at `slots` (see
  /// ``slots(_:)``).
  @inlinable
  @inline(__always)
  mutating func increment(slots: (block: Int, picks: UInt64)) {
    // Every counter is raised (no short-circuit): each depth has its own counter.
    let raisedFirst = increment(at: Self.counter(0, of: slots))
    let raisedSecond = increment(at: Self.counter(1, of: slots))
    let raisedThird = increment(at: Self.counter(2, of: slots))
    let raisedFourth = increment(at: Self.counter(3, of: slots))
    guard raisedFirst || raisedSecond || raisedThird || raisedFourth else { return }
    sampleCount &+= 1
    if sampleCount >= sampleSize { reset() }
  }

  /// Halves every counter (rounding down) and the sample count, so that old popularity fades.
  ///
  /// The sample count loses, besides half of itself, a quarter of the odd counters: the
  /// increments lost to rounding (each increment raised four counters). O(table size).
  @usableFromInline
  mutating func reset() {
    var odd = 0
    let words = storage.words
    for position in 0..<storage.count {
      odd &+= (words[position] & Self.oneMask).nonzeroBitCount
      words[position] = (words[position] >> 1) & Self.resetMask
    }
    sampleCount = Swift.max(0, (sampleCount &- (odd >> 2)) >> 1)
  }
}
