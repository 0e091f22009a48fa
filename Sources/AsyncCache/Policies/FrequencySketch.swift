/// A count-min sketch of how often keys were seen recently, with 4-bit counters that age: the
/// popularity estimate behind the TinyLFU admission of ``WTinyLFUPolicy``.
///
/// The design is Caffeine's `FrequencySketch`: a table of 64-bit words, each holding sixteen
/// 4-bit counters. A key picks one group of four counters (its low hash bits choose which
/// quarter of a word) and one word per hash function (depth 4); its frequency is the smallest
/// of its four counters, so the estimate never falls below the true count (until the sketch
/// ages) and rarely rises much above it. Counters saturate at 15.
///
/// After ``sampleSize`` increments (10 × the maximum size) every counter is halved, so that
/// the sketch forgets old popularity and follows a changing workload (the *reset* of the
/// TinyLFU paper by Einziger, Friedman and Manes).
///
/// Not thread-safe: a value type, guarded by its owner. O(1) per call, no allocation after
/// `init`.
@usableFromInline
struct FrequencySketch {
  /// The counters, sixteen 4-bit counters per word. Its length is a power of two.
  @usableFromInline var table: [UInt64]
  /// `table.count - 1`, to map a hash onto a word.
  @usableFromInline let tableMask: Int
  /// How many increments (that raised at least one counter) trigger an aging.
  @usableFromInline var sampleSize: Int
  /// Increments (that raised at least one counter) since the last aging, adjusted after it.
  @usableFromInline var sampleCount: Int

  /// The largest number of entries a sketch is sized for (a table of 128 MiB); larger caches
  /// share counters a little more.
  @usableFromInline static var maximumCapacity: Int { 1 << 24 }

  /// Every counter's lowest bit.
  @usableFromInline static var oneMask: UInt64 { 0x1111_1111_1111_1111 }
  /// Every counter's three lowest bits: what is left of each counter after a right shift.
  @usableFromInline static var resetMask: UInt64 { 0x7777_7777_7777_7777 }

  /// Creates a sketch for a cache of at most `maximumSize` entries.
  ///
  /// - Parameter maximumSize: The number of entries the cache holds at most; the table gets
  ///   the next power of two at or above it (at least one word, at most ``maximumCapacity``),
  ///   and aging happens every 10 × `maximumSize` increments.
  init(maximumSize: Int) {
    let size = Swift.min(Swift.max(maximumSize, 1), Self.maximumCapacity)
    var length = 1
    while length < size { length <<= 1 }
    table = Array(repeating: 0, count: length)
    tableMask = length - 1
    sampleSize = 10 * size
    sampleCount = 0
  }

  /// Spreads a key's hash over 64 bits (MurmurHash3's finalizer), so that weak hashes (small
  /// integers hash to themselves on some types) still pick well-distributed counters.
  @inlinable
  @inline(__always)
  static func spread(_ hash: Int) -> UInt64 {
    var x = UInt64(UInt(bitPattern: hash))
    x ^= x >> 33
    x &*= 0xFF51_AFD7_ED55_8CCD
    x ^= x >> 33
    x &*= 0xC4CE_B9FE_1A85_EC53
    x ^= x >> 33
    return x
  }

  /// The word of hash function `seed` for a spread hash.
  @inlinable
  @inline(__always)
  func index(_ spread: UInt64, seed: UInt64) -> Int {
    var hash = (spread &+ seed) &* seed
    hash &+= hash >> 32
    return Int(truncatingIfNeeded: hash) & tableMask
  }

  /// The counter `counter` (0..<16) of word `index`.
  @inlinable
  @inline(__always)
  func counter(_ index: Int, _ counter: Int) -> Int {
    Int(truncatingIfNeeded: (table[index] >> UInt64(counter << 2)) & 0xF)
  }

  /// Raises counter `counter` (0..<16) of word `index` unless it is saturated, and says
  /// whether it did.
  @inlinable
  @inline(__always)
  mutating func incrementAt(_ index: Int, _ counter: Int) -> Bool {
    let offset = UInt64(counter << 2)
    let mask: UInt64 = 0xF << offset
    guard table[index] & mask != mask else { return false }
    table[index] &+= 1 << offset
    return true
  }

  /// The estimated number of times `hash` was seen since it was last aged, from 0 to 15.
  ///
  /// Never below the true count (saturated at 15) until an aging halves it. O(1).
  @inlinable
  func frequency(_ hash: Int) -> Int {
    let spread = Self.spread(hash)
    let start = Int(truncatingIfNeeded: spread & 3) << 2
    let first = counter(index(spread, seed: 0xC3A5_C85C_97CB_3127), start)
    let second = counter(index(spread, seed: 0xB492_B66F_BE98_F273), start + 1)
    let third = counter(index(spread, seed: 0x9AE1_6A3B_2F90_404F), start + 2)
    let fourth = counter(index(spread, seed: 0xCBF2_9CE4_8422_2325), start + 3)
    return Swift.min(Swift.min(first, second), Swift.min(third, fourth))
  }

  /// Records one more occurrence of `hash`, aging the whole sketch once ``sampleSize``
  /// increments were recorded.
  ///
  /// O(1); an aging is O(table size) and happens once per ``sampleSize`` increments.
  @inlinable
  mutating func increment(_ hash: Int) {
    let spread = Self.spread(hash)
    let start = Int(truncatingIfNeeded: spread & 3) << 2
    // Every counter is raised (no short-circuit): each hash function has its own counter.
    let first = incrementAt(index(spread, seed: 0xC3A5_C85C_97CB_3127), start)
    let second = incrementAt(index(spread, seed: 0xB492_B66F_BE98_F273), start + 1)
    let third = incrementAt(index(spread, seed: 0x9AE1_6A3B_2F90_404F), start + 2)
    let fourth = incrementAt(index(spread, seed: 0xCBF2_9CE4_8422_2325), start + 3)
    guard first || second || third || fourth else { return }
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
    for position in table.indices {
      odd &+= (table[position] & Self.oneMask).nonzeroBitCount
      table[position] = (table[position] >> 1) & Self.resetMask
    }
    sampleCount = Swift.max(0, (sampleCount &- (odd >> 2)) >> 1)
  }
}

extension FrequencySketch: Sendable {}
