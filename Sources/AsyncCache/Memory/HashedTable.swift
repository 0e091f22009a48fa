/// A value that a ``HashedTable`` holds: one of its values (``vacant``) marks an empty slot and
/// is never stored.
@usableFromInline
protocol HashedTableValue: Sendable {
  /// The value of an empty slot.
  static var vacant: Self { get }
  /// Whether this is ``vacant``.
  var isVacant: Bool { get }
}

/// An open-addressing table (linear probing, at most half full) keyed by a hash its caller
/// computed anyway, so that an operation neither hashes a key again nor calls its `==`: the
/// watches of a segment's ``ReuseSampler`` (``WatchTable``) and the latest access of each key of
/// the layer's ``KeySample``. Two keys whose hashes match are one entry (rare with 64-bit hashes;
/// where `Int` has 32 bits, among a few thousand entries, still rare).
@usableFromInline
struct HashedTable<Value: HashedTableValue>: Sendable {
  /// A slot: the hash, and its value; ``HashedTableValue/vacant`` when empty.
  @usableFromInline
  struct Slot: Sendable {
    @usableFromInline var hash: UInt64
    @usableFromInline var value: Value

    @inlinable
    init(hash: UInt64, value: Value) {
      self.hash = hash
      self.value = value
    }

    @inlinable static var empty: Slot { Slot(hash: 0, value: .vacant) }
    @inlinable var isEmpty: Bool { value.isVacant }
  }

  /// The slots; a power of two of them, or none.
  @usableFromInline var slots: [Slot] = []
  /// The entries held.
  @usableFromInline var count = 0

  @inlinable
  init() {}

  @inlinable var isEmpty: Bool { count == 0 }

  /// Where a probe for `hash` starts in a table of `mask + 1` slots: the hash's bits, mixed.
  @inlinable
  static func home(of hash: UInt64, mask: Int) -> Int {
    Int(truncatingIfNeeded: (hash &* 0x9E37_79B9_7F4A_7C15) >> 32) & mask
  }

  /// The slot where `hash` is, or the empty one where it would go.
  @inlinable
  func position(of hash: UInt64) -> Int {
    let mask = slots.count - 1
    var index = Self.home(of: hash, mask: mask)
    while !slots[index].isEmpty, slots[index].hash != hash { index = (index + 1) & mask }
    return index
  }

  /// The value for `hash`.
  @inlinable
  subscript(hash: UInt64) -> Value? {
    guard count != 0 else { return nil }
    let slot = slots[position(of: hash)]
    return slot.isEmpty ? nil : slot.value
  }

  /// Sets the value for `hash`, which must not be ``HashedTableValue/vacant``; returns the one
  /// it replaces.
  @inlinable
  @discardableResult
  mutating func updateValue(_ value: Value, forHash hash: UInt64) -> Value? {
    if (count + 1) * 2 > slots.count { resize(to: Swift.max(16, slots.count * 2)) }
    let index = position(of: hash)
    let replaced = slots[index]
    slots[index] = Slot(hash: hash, value: value)
    guard !replaced.isEmpty else {
      count += 1
      return nil
    }
    return replaced.value
  }

  /// Removes the value for `hash`, returning it.
  @inlinable
  @discardableResult
  mutating func removeValue(forHash hash: UInt64) -> Value? {
    guard count != 0 else { return nil }
    let mask = slots.count - 1
    var hole = position(of: hash)
    guard !slots[hole].isEmpty else { return nil }
    let removed = slots[hole].value
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

  /// Every value, in no order.
  @usableFromInline var values: [Value] { slots.filter { !$0.isEmpty }.map { $0.value } }

  /// Keeps only the values that `isIncluded` accepts, in a table sized for them.
  @usableFromInline
  mutating func keep(where isIncluded: (Value) -> Bool) {
    let kept = slots.filter { !$0.isEmpty && isIncluded($0.value) }
    slots = []
    count = 0
    if !kept.isEmpty { resize(to: Swift.max(16, (kept.count * 2).nextPowerOfTwo)) }
    for slot in kept { updateValue(slot.value, forHash: slot.hash) }
  }

  /// Moves every entry into a table of `capacity` slots (a power of two).
  @usableFromInline
  mutating func resize(to capacity: Int) {
    let old = slots
    slots = Array(repeating: .empty, count: capacity)
    count = 0
    for slot in old where !slot.isEmpty {
      slots[position(of: slot.hash)] = slot
      count += 1
    }
  }
}

/// The watches of a segment's ``ReuseSampler``, by the hash of the key watched (its lookup's).
@usableFromInline
typealias WatchTable = HashedTable<ReuseSampler.Watch>

extension HashedTable where Value == ReuseSampler.Watch {
  /// The watch of the key whose hash is `hash`.
  @inlinable
  subscript(hash hash: Int) -> Value? { self[UInt64(truncatingIfNeeded: hash)] }

  /// Begins (or begins again) the watch of the key whose hash is `hash`; returns the one it
  /// replaces.
  @inlinable
  @discardableResult
  mutating func insert(_ watch: Value, forHash hash: Int) -> Value? {
    updateValue(watch, forHash: UInt64(truncatingIfNeeded: hash))
  }

  /// Ends the watch of the key whose hash is `hash`, returning it.
  @inlinable
  mutating func remove(hash: Int) -> Value? {
    removeValue(forHash: UInt64(truncatingIfNeeded: hash))
  }
}

extension Int {
  /// The smallest power of two at least `self` (1 for 0 or less).
  var nextPowerOfTwo: Int {
    self <= 1 ? 1 : 1 << (Int.bitWidth - (self - 1).leadingZeroBitCount)
  }
}
