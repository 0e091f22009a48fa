// The W-TinyLFU of a `MemorySegment`: the window's overflow, the duels at admission, the
// adaptive window's sizes and the referee's choice.

extension MemorySegment {
  /// Whether the window is over its size.
  ///
  /// An entry costing more than the window's share of the cost limit passes straight on to
  /// probation as a candidate (as in Caffeine); the insert that wrote it still spares it.
  @inlinable
  var windowOverflows: Bool {
    admission.windowCount > admission.windowCountMaximum || admission.windowCost > admission.windowCostMaximum
  }

  /// Whether protected is over its size.
  @inlinable
  var protectedOverflows: Bool {
    admission.protectedCount > admission.protectedCountMaximum
      || admission.protectedCost > admission.protectedCostMaximum
  }

  /// Records a hit on `slot`: under W-TinyLFU counts it in the sketch and moves it up its lists
  /// (window to the window's MRU end, probation to protected, protected to protected's MRU
  /// end); under LRU makes it the most recently used.
  ///
  /// The move waits in ``pendingHits``, and ``settleHits()`` makes the moves of the queue in
  /// order when it is full, or before anything else reads or changes the lists (the store's
  /// `withLock` settles first; only its lookups do not). A move writes the node's neighbours,
  /// which are rarely in cache: made at once, each hit waited for two misses (about 30 ns of a
  /// 100 ns hit over 100k keys). Queued, the hit touches only its own lines, and a settle's
  /// moves wait for their misses together: the neighbours of one move do not depend on the
  /// last. (Prefetching the neighbours at the hit, as this did before, cost every hit 2 to 3 ns
  /// more on `memory.hit.1task` and `memory.zipf.mixed`: the lines it fetched competed with the
  /// hit's own.) Every list reads as if each move had been made at once, so every decision is
  /// the same.
  @inlinable
  @inline(__always)
  mutating func recordHit(_ slot: Int, hash: Int) {
    hits &+= 1
    if admission.isEnabled { admission.recordUse(Self.tag(of: hash)) }
    let index = pendingHitCount
    withUnsafeMutableBytes(of: &pendingHits) {
      $0.storeBytes(of: UInt32(truncatingIfNeeded: slot), toByteOffset: index &* 4, as: UInt32.self)
    }
    pendingHitCount = index &+ 1
    if pendingHitCount == Self.pendingHitCapacity { settleHits() }
  }

  /// Makes the moves of the hits in ``pendingHits``, in the order of the hits. Call before
  /// reading or changing the lists, the regions' sizes or the table.
  @inlinable
  mutating func settleHits() {
    let count = pendingHitCount
    guard count > 0 else { return }
    pendingHitCount = 0
    let queued = pendingHits
    withUnsafeBytes(of: queued) { bytes in
      for index in 0..<count {
        applyHit(Int(bytes.load(fromByteOffset: index &* 4, as: UInt32.self)))
      }
    }
  }

  /// The move of a hit on `slot` (see ``recordHit(_:hash:)``).
  @inlinable
  @inline(__always)
  mutating func applyHit(_ slot: Int) {
    guard admission.isEnabled else {
      Self.moveToFront(slot, in: nodes, mru: &windowMRU, lru: &windowLRU)
      return
    }
    switch nodes[slot].region {
    case .protected:
      mainHits &+= 1
      Self.moveToFront(slot, in: nodes, mru: &protectedMRU, lru: &protectedLRU)
    case .window:
      windowHits &+= 1
      Self.moveToFront(slot, in: nodes, mru: &windowMRU, lru: &windowLRU)
    case .probation:
      mainHits &+= 1
      promote(slot)
    }
  }

  /// Moves `slot` up after a use; a probation entry goes to protected unless it alone is
  /// larger than protected.
  @inlinable
  mutating func promote(_ slot: Int) {
    switch nodes[slot].region {
    case .window, .protected:
      touch(slot)
    case .probation:
      if nodes[slot].cost > admission.protectedCostMaximum || admission.protectedCountMaximum < 1 {
        touch(slot)
      } else {
        move(slot, toMRUOf: .protected)
        demoteProtectedOverflow()
      }
    }
  }

  /// Demotes protected's least recently used entries to probation's MRU end while protected is
  /// over its size.
  @inlinable
  mutating func demoteProtectedOverflow() {
    while protectedOverflows, protectedLRU != Self.none {
      move(Int(protectedLRU), toMRUOf: .probation)
    }
  }

  /// Moves the window's least recently used entries to probation's MRU end, as candidates,
  /// while the window is over its size.
  @inlinable
  mutating func drainWindowOverflow() {
    while windowOverflows, windowLRU != Self.none {
      move(Int(windowLRU), toMRUOf: .probation)
    }
  }

  /// Records that the node at `slot`, already present, was written again with a cost that was
  /// `oldCost`: counts it as a use and updates its region's size. A window entry that grew
  /// past the window's size moves to the window's LRU end, to leave it first.
  @inlinable
  mutating func recordRewrite(_ slot: Int, hash: Int, oldCost: Int64) {
    let region = nodes[slot].region
    account(region, cost: oldCost, sign: -1)
    account(region, cost: nodes[slot].cost, sign: 1)
    guard admission.isEnabled else {
      Self.moveToFront(slot, in: nodes, mru: &windowMRU, lru: &windowLRU)
      return
    }
    admission.recordUse(Self.tag(of: hash))
    if region == .window && nodes[slot].cost > admission.windowCostMaximum {
      unlink(slot)
      link(slot, atLRUOf: .window)
    } else {
      promote(slot)
    }
    demoteProtectedOverflow()
  }

  /// Whether `candidate` should enter main in place of `victim`, by the segment's admission
  /// rule (W-TinyLFU's: strictly more popular; see ``PolicyExpert/admits(candidateFrequency:victimFrequency:by:random:)``),
  /// or warm and lucky (1/128), so that an attacker cannot pin a victim by flooding its counters.
  @inlinable
  mutating func admits(candidate: UInt32, victim: UInt32) -> Bool {
    PolicyExpert.admits(
      candidateFrequency: admission.sketch.frequency(SegmentAdmission.sketchKey(of: nodes[Int(candidate)].key)),
      victimFrequency: admission.sketch.frequency(SegmentAdmission.sketchKey(of: nodes[Int(victim)].key)),
      by: admission.admissionRule, random: &admission.random)
  }

  /// The next candidate after `candidate`: older in probation, newer in the window.
  @inlinable
  func nextCandidate(after candidate: UInt32, in region: SegmentRegion) -> UInt32 {
    region == .window ? nodes[Int(candidate)].newer : nodes[Int(candidate)].older
  }

  /// Evicts while `overLimit` names a limit the totals exceed, never the node at `spared` (the
  /// entry just written, or ``none``), handing each node that leaves to `evicted` with the
  /// limit.
  ///
  /// LRU evicts from the LRU end. W-TinyLFU first moves window overflow to probation, then
  /// runs Caffeine's `evictFromMain`: candidates are taken from probation's MRU end (where the
  /// window overflow just went), then from the window's LRU end; victims from probation's LRU
  /// end, then protected's, then the window's. A candidate and a victim duel by frequency;
  /// when only one of them exists, it leaves. Over the cost limit, entries of cost 0 are
  /// skipped: evicting them frees nothing. Stops when every list was walked (the rest of the
  /// excess is in other segments).
  @inlinable
  mutating func evict(
    sparing spared: UInt32,
    while overLimit: () -> EvictionReason?,
    _ evicted: (consuming Node, EvictionReason) -> Void
  ) {
    guard admission.isEnabled else {
      while windowLRU != Self.none, windowLRU != spared, let reason = overLimit() {
        evicted(remove(slot: Int(windowLRU)), reason)
      }
      return
    }
    admission.startRefereeIfDue()
    admission.countPendingUses()
    if admission.refereeSwitched { applyRefereeChoice() }
    drainWindowOverflow()
    var victimRegion = SegmentRegion.probation
    var candidateRegion = SegmentRegion.probation
    var victim = probationLRU
    var candidate = probationMRU
    while let reason = overLimit() {
      if candidate == Self.none && candidateRegion == .probation {
        candidate = windowLRU
        candidateRegion = .window
      }
      if candidate == Self.none && victim == Self.none {
        switch victimRegion {
        case .probation:
          victim = protectedLRU
          victimRegion = .protected
          continue
        case .protected:
          victim = windowLRU
          victimRegion = .window
          continue
        case .window:
          return
        }
      }
      if victim != Self.none && victim == spared {
        victim = nodes[Int(victim)].newer
        continue
      }
      if candidate != Self.none && candidate == spared {
        candidate = nextCandidate(after: candidate, in: candidateRegion)
        continue
      }
      if reason == .costLimit {
        if victim != Self.none && nodes[Int(victim)].cost == 0 {
          victim = nodes[Int(victim)].newer
          continue
        }
        if candidate != Self.none && nodes[Int(candidate)].cost == 0 {
          candidate = nextCandidate(after: candidate, in: candidateRegion)
          continue
        }
      }
      let leaving: UInt32
      // A candidate that wins moves on only after the victim left: the victim may be its
      // neighbour.
      var advanceCandidate = false
      // Whether the entry leaving is a candidate turned away (else it leaves the main region).
      var turnedAway = true
      if victim == Self.none {
        leaving = candidate
        candidate = nextCandidate(after: candidate, in: candidateRegion)
      } else if candidate == Self.none {
        leaving = victim
        victim = nodes[Int(victim)].newer
        turnedAway = false
      } else if candidate == victim {
        leaving = victim
        victim = nodes[Int(victim)].newer
        candidate = Self.none
      } else if admits(candidate: candidate, victim: victim) {
        leaving = victim
        victim = nodes[Int(victim)].newer
        advanceCandidate = true
        turnedAway = false
      } else {
        leaving = candidate
        candidate = nextCandidate(after: candidate, in: candidateRegion)
      }
      // Its ghost (``WindowGhosts``): a candidate turned away, or an entry evicted from the
      // main region. (Only the ghosts need the leaving key's hash.)
      admission.ghosts?.recordExit(tag: Self.tag(of: nodes[Int(leaving)].key.hashValue), fromWindow: turnedAway)
      evicted(remove(slot: Int(leaving)), reason)
      if advanceCandidate { candidate = nextCandidate(after: candidate, in: candidateRegion) }
    }
  }

  /// Sizes the window and protected for the layer's window share (``WindowTarget/share``): the
  /// window gets `share` of each of the segment's limits (at least 1), protected 80% of the
  /// rest, and the window keeps room for ``SegmentAdmission/appliedFloor`` entries. Entries that
  /// no longer fit move down (protected to probation, window to probation as candidates); the
  /// eviction that follows the insert duels them out.
  @inlinable
  mutating func applyWindowShare(_ share: Double) {
    admission.appliedShare = share
    sizeWindow()
  }

  /// Keeps room in the window for `entries` entries at least (the segment's part of the
  /// prefetchers' reservations, see ``MemoryStore/reserveWindow(entries:)``), 0 for none: at
  /// most half of each of the segment's limits, counted in cost by the segment's mean cost.
  @inlinable
  mutating func applyWindowFloor(_ entries: Int) {
    admission.appliedFloor = entries
    sizeWindow()
  }

  /// Sets the window's and protected's maximums: the policy's (a fixed window's as Caffeine
  /// rounds it, an adaptive one's from ``SegmentAdmission/appliedShare`` and
  /// ``SegmentAdmission/appliedProtectedShare``), the window raised to the floor, protected its
  /// share of what the window leaves.
  @inlinable
  mutating func sizeWindow() {
    let fixed = admission.hasFixedWindow
    let floor = admission.appliedFloor
    let share = admission.appliedShare
    let protectedShare = admission.appliedProtectedShare
    if admission.countShare != .max {
      let limit = admission.countShare
      var sizes =
        fixed
        ? SegmentAdmission.maximums(share: limit)
        : SegmentAdmission.maximums(windowShare: share, protectedShare: protectedShare, of: limit)
      let room = Swift.min(floor, limit / 2)
      if room > sizes.window {
        sizes = (room, Int(Double(limit &- room) * protectedShare))
      }
      (admission.windowCountMaximum, admission.protectedCountMaximum) = sizes
    }
    if admission.costShare != .max {
      let limit = admission.costShare
      var sizes =
        fixed
        ? SegmentAdmission.maximums(share: limit)
        : SegmentAdmission.maximums(windowShare: share, protectedShare: protectedShare, of: limit)
      let meanCost = count > 0 ? totalCost / Int64(count) : 0
      // Checked by division: a 128-bit product is a runtime call where `Int` has 32 bits.
      let floorCost = meanCost > 0 && Int64(floor) > Int64.max / meanCost ? Int64.max : Int64(floor) &* meanCost
      let room = Swift.min(floorCost, limit / 2)
      if room > sizes.window {
        sizes = (room, Int64(Double(limit &- room) * protectedShare))
      }
      (admission.windowCostMaximum, admission.protectedCostMaximum) = sizes
    }
    demoteProtectedOverflow()
    drainWindowOverflow()
  }

  /// Makes the lists follow the expert the referee chose (``SegmentAdmission/refereeSwitched``):
  /// its window and protected shares and its admission rule. Entries that no longer fit move
  /// down, as for a new window share.
  @usableFromInline
  mutating func applyRefereeChoice() {
    admission.refereeSwitched = false
    let expert = PolicyExpert.all[admission.refereeExpert]
    admission.appliedShare = expert.windowShare
    admission.appliedProtectedShare = expert.protectedShare
    admission.admissionRule = expert.admission
    sizeWindow()
  }

  /// The vote of a new key with hash tag `tag` for the layer's ``WindowTarget`` (+1, -1 or 0;
  /// see ``WindowGhosts/vote(tag:)``); 0 unless the policy is ``EvictionPolicy/adaptive``.
  @inlinable
  mutating func windowVote(tag: UInt32) -> Int {
    admission.ghosts?.vote(tag: tag) ?? 0
  }
}
