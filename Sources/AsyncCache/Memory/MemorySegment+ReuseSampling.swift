// A segment's part in the hit-ratio curve (see `ReuseSampler.swift`): about one lookup in a
// hundred watches its key, and the key's next lookup records how long it took.

extension MemorySegment {
  /// Counts a hit on `slot` (counted in ``hits`` already) for the sampler: one decrement and one
  /// bit of the node, read with its expiry, unless the hit is watched or ends a watch.
  @inlinable
  @inline(__always)
  mutating func sampleHit(_ key: Key, at slot: Int) {
    sampler.countdown &-= 1
    if _slowPath(sampler.countdown <= 0 || nodes[slot].isWatched) { sampleLookup(key, at: slot) }
  }

  /// Counts a miss (counted in ``misses`` already) for the sampler: a watched key missing now
  /// was evicted, or never inserted, since its watch began.
  @inlinable
  @inline(__always)
  mutating func sampleMiss(_ key: Key) {
    sampler.countdown &-= 1
    if sampler.countdown <= 0 || !sampler.watches.isEmpty { sampleLookup(key, at: nil) }
  }

  /// Ends the watch of `key` if it has one, and begins one if the countdown says so; `slot` is
  /// where its node is, `nil` for a miss.
  @usableFromInline
  @inline(never)
  mutating func sampleLookup(_ key: Key, at slot: Int?) {
    let time = hits &+ misses
    if let slot {
      if nodes[slot].isWatched {
        nodes[slot].isWatched = false
        sampler.resolve(key, at: time)
      }
    } else {
      sampler.resolve(key, at: time)
    }
    guard sampler.countdown <= 0 else { return }
    sampler.countdown = sampler.nextGap()
    sampler.watch(key, at: time)
    if let slot { nodes[slot].isWatched = true }
    // The oldest watches are looked at every 32 new ones, or as soon as there are too many.
    if sampler.order.count & 31 == 0 || sampler.watches.count > ReuseSampler<Key>.limits(forEntries: count).watches {
      sampler.dropOld(at: time, entries: count)
    }
  }

  /// Marks the node just inserted at `slot` for `key` as watched if its key is: a miss began the
  /// watch, and the load that followed it inserted the key.
  @inlinable
  mutating func markIfWatched(_ slot: Int, key: Key) {
    if !sampler.watches.isEmpty, sampler.watches[key] != nil { nodes[slot].isWatched = true }
  }
}
