/// The watches of a segment's ``ReuseSampler``, by the hash of the key watched: an open-addressing
/// table (linear probing, at most half full) of 24-byte slots, keyed by the hash the lookup
/// computed anyway, so a watch begun or ended neither hashes its key again nor calls the key's
/// `==`. Two watched keys whose hashes match are one watch (rare with 64-bit hashes; where `Int`
/// has 32 bits, among a few thousand watches, still rare).
@usableFromInline
struct WatchTable: Sendable {
  /// A slot: the key's hash, and when its watch began; `time` is `Int.min` when empty.
  @usableFromInline
  struct Slot: Sendable {
    @usableFromInline var hash: Int
    @usableFromInline var watch: ReuseSampler.Watch

    @inlinable
    init(hash: Int, watch: ReuseSampler.Watch) {
      self.hash = hash
      self.watch = watch
    }

    @inlinable static var empty: Slot { Slot(hash: 0, watch: .init(time: .min, keys: 0)) }
    @inlinable var isEmpty: Bool { watch.time == .min }
  }

  /// The slots; a power of two of them, or none.
  @usableFromInline var slots: [Slot] = []
  /// The watches held.
  @usableFromInline var count = 0

  @inlinable
  init() {}

  @inlinable var isEmpty: Bool { count == 0 }

  /// Where a probe for `hash` starts in a table of `mask + 1` slots: the hash's bits, mixed.
  @inlinable
  static func home(of hash: Int, mask: Int) -> Int {
    Int(truncatingIfNeeded: (UInt64(truncatingIfNeeded: hash) &* 0x9E37_79B9_7F4A_7C15) >> 32) & mask
  }

  /// The slot where `hash` is, or the empty one where it would go.
  @inlinable
  func position(of hash: Int) -> Int {
    let mask = slots.count - 1
    var index = Self.home(of: hash, mask: mask)
    while !slots[index].isEmpty, slots[index].hash != hash { index = (index + 1) & mask }
    return index
  }

  /// The watch of the key whose hash is `hash`.
  @inlinable
  subscript(hash hash: Int) -> ReuseSampler.Watch? {
    guard count != 0 else { return nil }
    let slot = slots[position(of: hash)]
    return slot.isEmpty ? nil : slot.watch
  }

  /// Begins (or begins again) the watch of the key whose hash is `hash`.
  @inlinable
  mutating func insert(_ watch: ReuseSampler.Watch, forHash hash: Int) {
    if (count + 1) * 2 > slots.count { resize(to: Swift.max(16, slots.count * 2)) }
    let index = position(of: hash)
    if slots[index].isEmpty { count += 1 }
    var watch = watch
    // `Int.min` marks an empty slot: a watch begun then (time wraps where `Int` has 32 bits)
    // is a lookup later.
    if watch.time == .min { watch.time = .min + 1 }
    slots[index] = Slot(hash: hash, watch: watch)
  }

  /// Ends the watch of the key whose hash is `hash`, returning it.
  @inlinable
  mutating func remove(hash: Int) -> ReuseSampler.Watch? {
    guard count != 0 else { return nil }
    let mask = slots.count - 1
    var hole = position(of: hash)
    guard !slots[hole].isEmpty else { return nil }
    let removed = slots[hole].watch
    slots[hole] = .empty
    count -= 1
    // Backward-shift deletion: move up each slot of the run after the hole that may sit there.
    var index = (hole + 1) & mask
    while !slots[index].isEmpty {
      let home = Self.home(of: slots[index].hash, mask: mask)
      // The slot may move to the hole when its home is not cyclically within (hole, index].
      if (index &- home) & mask >= (index &- hole) & mask {
        slots[hole] = slots[index]
        slots[index] = .empty
        hole = index
      }
      index = (index + 1) & mask
    }
    return removed
  }

  /// Every watch, in no order.
  @usableFromInline var all: [ReuseSampler.Watch] { slots.filter { !$0.isEmpty }.map { $0.watch } }

  /// Keeps only the watches that `isIncluded` accepts, in a table sized for them.
  @usableFromInline
  mutating func keep(where isIncluded: (ReuseSampler.Watch) -> Bool) {
    let kept = slots.filter { !$0.isEmpty && isIncluded($0.watch) }
    slots = []
    count = 0
    if !kept.isEmpty { resize(to: Swift.max(16, (kept.count * 2).nextPowerOfTwo)) }
    for slot in kept { insert(slot.watch, forHash: slot.hash) }
  }

  /// Moves every watch into a table of `capacity` slots (a power of two).
  @usableFromInline
  mutating func resize(to capacity: Int) {
    let old = slots
    slots = Array(repeating: .empty, count: capacity)
    count = 0
    for slot in old where !slot.isEmpty {
      let index = position(of: slot.hash)
      slots[index] = slot
      count += 1
    }
  }
}

extension Int {
  /// The smallest power of two at least `self` (1 for 0 or less).
  var nextPowerOfTwo: Int {
    self <= 1 ? 1 : 1 << (Int.bitWidth - (self - 1).leadingZeroBitCount)
  }
}
