// A segment's part in the hit-ratio curve (see `ReuseSampler.swift`): about one lookup in a
// hundred watches its key, and the key's next lookup records how long it took.

extension MemorySegment {
  /// Counts a hit on `slot` (of `key`, whose hash is `hash`) for the sampler: one decrement and
  /// two bits of the node, read with its expiry (and with the layer's `keys`, a multiplication
  /// and a comparison), unless the hit is watched, ends a watch, is the first of a node inserted
  /// unasked for, or is of a sampled key.
  @inlinable
  @inline(__always)
  mutating func sampleHit(_ key: Key, hash: Int, at slot: Int, keys: KeySample?) {
    sampleCountdown &-= 1
    if _slowPath(
      sampleCountdown <= 0 || nodes[slot].concernsSampler || KeySample.mixed(hash) < keySampleThreshold)
    {
      sampleLookup(key, hash: hash, at: slot, keys: keys)
    }
  }

  /// Counts a miss for the sampler: a watched key missing now was evicted, or never inserted,
  /// since its watch began.
  @inlinable
  @inline(__always)
  mutating func sampleMiss(_ key: Key, hash: Int, keys: KeySample?) {
    sampleCountdown &-= 1
    sampler.noteMiss(hash: hash)
    if sampleCountdown <= 0 || !sampler.watches.isEmpty || KeySample.mixed(hash) < keySampleThreshold {
      sampleLookup(key, hash: hash, at: nil, keys: keys)
    }
  }

  /// Ends the watch of `key` if it has one, and begins one if the countdown says so; `slot` is
  /// where its node is, `nil` for a miss.
  ///
  /// Inlinable so that a client specializes it for its types (unspecialized, each dictionary
  /// operation went through the generic witnesses: about a microsecond a call), and never
  /// inlined, so that the hit path stays small.
  @inlinable
  @inline(never)
  mutating func sampleLookup(_ key: Key, hash: Int, at slot: Int?, keys: KeySample?) {
    guard sampler.isOn else {
      // Off: the countdown ran out (after 2^31 lookups where Int has 32 bits); start it again.
      sampleCountdown = .max
      return
    }
    let time = sampler.gapEnd &- sampleCountdown
    if let slot {
      // A hit on a node asked for (or hit) before is a repeated hit: its key's lookup before it
      // was counted. The watch it ends goes to that stratum.
      let isUnasked = nodes[slot].isUnasked
      if isUnasked {
        nodes[slot].isUnasked = false
        sampler.unaskedHits &+= 1
      }
      if nodes[slot].isWatched {
        nodes[slot].isWatched = false
        sampler.resolve(hash: hash, at: time, sample: keys, repeated: !isUnasked)
      }
    } else {
      sampler.resolve(hash: hash, at: time, sample: keys, repeated: false)
    }
    // The key's own access counts after the window it ends, and before the one it begins.
    if let keys, case let mixed = KeySample.mixed(hash), mixed < keySampleThreshold {
      sampler.recordAccess(mixed, in: keys)
    }
    guard sampleCountdown <= 0 else { return }
    // The watch first, with the weight of the gap that ended; then the next gap.
    sampler.watch(hash: hash, at: time, keys: keys?.position ?? 0, entries: count)
    if let slot { nodes[slot].isWatched = true }
    let gap = sampler.nextGap()
    sampleCountdown = gap
    sampler.gapEnd = time &+ gap
  }

  /// Marks the node just inserted at `slot` (for a key whose hash is `hash`) as unasked for,
  /// unless it fills one of the segment's latest misses; and as watched if its key is: a miss
  /// began the watch, and the load that followed it inserted the key.
  @inlinable
  mutating func markInserted(_ slot: Int, hash: Int) {
    guard sampler.isOn else { return }
    if !sampler.takeRecentMiss(hash: hash) { nodes[slot].isUnasked = true }
    if !sampler.watches.isEmpty, sampler.watches[hash: hash] != nil { nodes[slot].isWatched = true }
  }

  /// Ends the watch of the node at `slot`, which leaves other than by eviction (it expired, was
  /// removed or is dead by tag), as never reused; `hash` is its key's, when the caller has it.
  @usableFromInline
  mutating func abandonWatch(at slot: Int, hash: Int? = nil) {
    if nodes[slot].isWatched { sampler.abandon(hash: hash ?? nodes[slot].key.hashValue) }
  }
}
