@testable import AsyncCache

/// The reference model of W-TinyLFU (Einziger, Friedman and Manes; Caffeine's design) over
/// weighted keys: which entries stay resident and which leave when the weights overflow.
///
/// Written for clarity (a dictionary, an array of nodes, `Int` links, one weight), it is what
/// ``MemorySegment``'s W-TinyLFU must match step for step, and it is checked itself against its
/// invariants. A key's sketch key is the low 32 bits of its hash, as in the segment.
///
/// The policy tracks keys and weights only; its owner stores the values and removes what the
/// policy returns. Entries live in one of three LRU lists:
/// - the **window** (about 1% of the capacity) takes every new entry, so that a burst of new
///   keys can stay a little while;
/// - the **main** region holds the rest: **probation** (LRU) for entries that have not been
///   used since they entered main, and **protected** (LRU, about 80% of main) for entries that
///   were used while in probation. Protected overflow is demoted to probation's MRU end.
///
/// When the window overflows, its least recently used entries move to probation as
/// *candidates*. The entry just inserted or updated is never evicted by that call. While the total weight is over ``maximumWeight``, the newest candidate duels
/// probation's least recently used *victim*: the one the ``FrequencySketch`` finds less popular
/// leaves (the candidate only wins when strictly more popular, or with a 1/128 chance when it
/// is warm, Caffeine's defence against hash flooding, drawn from the injected `Random`).
/// So a scan of one-hit keys passes through without flushing a popular working set.
///
/// In count mode every weight is 1 and ``maximumWeight`` is the entry limit. Weights may be 0:
/// such entries are never evicted for size (their owner must bound them another way, e.g. by
/// count), and an eviction steps over those at probation's LRU end. The window is 1% of the
/// capacity, or moved by the ``WindowClimber``.
///
/// Not thread-safe: a value type, guarded by its owner. Every operation is O(1) amortized,
/// plus O(evicted or demoted entries); the sketch ages in O(its table) once per 10 × its size
/// increments.
struct WTinyLFUPolicy<Key: Hashable, Random: RandomNumberGenerator> {
  /// The list an entry is in.
  enum Region: UInt8, Sendable, CaseIterable {
    /// The admission window, where new entries start.
    case window
    /// The main region's entries that were not used since they entered it.
    case probation
    /// The main region's entries that were used while in probation.
    case protected
  }

  /// One resident entry.
  struct Node {
    /// The entry's key.
    var key: Key
    /// The key's sketch key: the low 32 bits of its hash.
    var hash: Int
    /// The entry's weight (cost), 0 or more.
    var weight: Int
    /// The list the entry is in.
    var region: Region
    /// The neighbour closer to the most recently used end, or ``WTinyLFUPolicy/none``.
    var newer: Int
    /// The neighbour closer to the least recently used end, or ``WTinyLFUPolicy/none``.
    var older: Int

    /// Creates an unlinked node.
    init(key: Key, hash: Int, weight: Int, region: Region) {
      self.key = key
      self.hash = hash
      self.weight = weight
      self.region = region
      self.newer = WTinyLFUPolicy.none
      self.older = WTinyLFUPolicy.none
    }
  }

  /// The absent link.
  static var none: Int { -1 }
  /// The share of the capacity that goes to the main region (Caffeine's `PERCENT_MAIN`).
  static var mainShare: Double { 0.99 }
  /// The share of the main region that goes to protected (Caffeine's `PERCENT_MAIN_PROTECTED`).
  static var protectedShare: Double { 0.8 }
  /// A candidate at least this popular may win a lost duel by chance (Caffeine's
  /// `ADMIT_HASHDOS_THRESHOLD`).
  static var warmFrequency: Int { 6 }

  /// The most the weights of all resident entries sum to.
  let maximumWeight: Int
  /// The window's target weight: overflow moves to probation. The adaptation moves it.
  var windowMaximum: Int
  /// The protected list's target weight: overflow is demoted to probation. The adaptation
  /// moves it with the window, the other way.
  var protectedMaximum: Int
  /// The ghosts whose votes size the window (``EvictionPolicy/adaptive``), or `nil` for a fixed
  /// window.
  var ghosts: WindowGhosts?
  /// The window's share of the capacity that the votes move.
  var target = WindowTarget()
  /// The number of entries the votes' steps are a share of: the entry limit, or with weights
  /// (``followsCount``), the entries held, at least 256 and at most the entry limit.
  let entries: Int
  /// Whether the weights bound the cache, below an entry limit of their own: the steps, the
  /// spans and the ghosts' depth then follow the entries held, as a layer bounded by cost does.
  let followsCount: Bool
  /// New keys since the current span began.
  var spanInserts = 0
  /// Votes for a larger and for a smaller window in the current span.
  var spanVotes = (up: 0, down: 0)
  /// Hits on window entries in the current span.
  var spanWindowHits = 0
  /// Hits on main-region entries in the current span.
  var spanMainHits = 0
  /// How many spans ended, how many of them relaxed the window, and how many would have but
  /// for their votes. For tests.
  var spans = (ended: 0, relaxed: 0, keptByVotes: 0)

  /// The slot of every resident key in ``nodes``.
  var slots: [Key: Int]
  /// The resident entries, densely (a removal moves the last node into the hole).
  var nodes: [Node]
  /// How often keys were used recently.
  var sketch: FrequencySketch
  /// The source of the random admissions.
  var random: Random

  /// The window's weight.
  var windowWeight = 0
  /// The probation list's weight.
  var probationWeight = 0
  /// The protected list's weight.
  var protectedWeight = 0

  // The ends of the three lists; `none` when a list is empty.
  var windowMRU = Self.none
  var windowLRU = Self.none
  var probationMRU = Self.none
  var probationLRU = Self.none
  var protectedMRU = Self.none
  var protectedLRU = Self.none

  /// Creates an empty policy.
  ///
  /// - Parameters:
  ///   - maximumWeight: The most the weights of resident entries may sum to (0 or more); in
  ///     count mode, the entry limit.
  ///   - maximumEntryCount: The number of entries the cache holds at most, which sizes the
  ///     frequency sketch; `nil` uses `maximumWeight` (right in count mode; with weights such as
  ///     bytes, pass an estimate, or the sketch grows to its own maximum size of 2^24).
  ///   - adaptsWindow: Whether the window's size follows the ghosts' votes
  ///     (``EvictionPolicy/adaptive``), from 1% of the capacity; `false` keeps it at 1%.
  ///   - random: The source of the rare random admission of a warm candidate.
  init(maximumWeight: Int, maximumEntryCount: Int? = nil, adaptsWindow: Bool = true, random: Random) {
    precondition(maximumWeight >= 0, "maximumWeight is \(maximumWeight); it must be 0 or more")
    self.maximumWeight = maximumWeight
    let mainMaximum = Int(Double(maximumWeight) * Self.mainShare)
    windowMaximum = maximumWeight - mainMaximum
    protectedMaximum = Int(Double(mainMaximum) * Self.protectedShare)
    slots = [:]
    nodes = []
    let entries = maximumEntryCount ?? maximumWeight
    // As a segment's: sized for at most 131,072 entries at first (the replays stay below).
    let sketchEntries = Swift.min(entries, SegmentAdmission.initialBoundedSketchSize)
    sketch = FrequencySketch(maximumSize: sketchEntries, compact: adaptsWindow)
    ghosts = adaptsWindow ? WindowGhosts(entries: sketchEntries) : nil
    self.entries = entries
    followsCount = maximumEntryCount != nil
    self.random = random
  }

  // MARK: Reading

  /// The number of resident entries.
  @inlinable var count: Int { nodes.count }

  /// The sum of the weights of all resident entries.
  @inlinable var totalWeight: Int { windowWeight &+ probationWeight &+ protectedWeight }

  /// Whether `key` is resident.
  func contains(_ key: Key) -> Bool { slots[key] != nil }

  /// The list `key` is in, or `nil` when it is not resident.
  func region(of key: Key) -> Region? { slots[key].map { nodes[$0].region } }

  /// The weight of `key`, or `nil` when it is not resident.
  func weight(of key: Key) -> Int? { slots[key].map { nodes[$0].weight } }

  /// The weight of the entries in `region`.
  func weight(of region: Region) -> Int {
    switch region {
    case .window: windowWeight
    case .probation: probationWeight
    case .protected: protectedWeight
    }
  }

  /// The estimated recent popularity of `key`, 0 to 15.
  func frequency(of key: Key) -> Int { sketch.frequency(Self.sketchKey(key)) }

  /// The sketch's key for `key`: the low 32 bits of its hash, the tag a segment keeps.
  static func sketchKey(_ key: Key) -> Int { Int(UInt32(truncatingIfNeeded: key.hashValue)) }

  /// The keys in `region`, from the least to the most recently used. O(n); for tests.
  func keys(in region: Region) -> [Key] {
    var keys: [Key] = []
    var cursor = lru(region)
    while cursor != Self.none {
      keys.append(nodes[cursor].key)
      cursor = nodes[cursor].newer
    }
    return keys
  }

  // MARK: Operations

  /// Records a use of `key`: counts it in the sketch and moves it up its lists (window to
  /// the window's MRU end, probation to protected, protected to protected's MRU end).
  ///
  /// The call of the hit path. O(1) amortized; never evicts.
  /// - Returns: Whether `key` is resident (a miss changes nothing).
  @discardableResult
  mutating func recordAccess(_ key: Key) -> Bool {
    guard let slot = slots[key] else { return false }
    sketch.increment(nodes[slot].hash)
    if nodes[slot].region == .window { spanWindowHits += 1 } else { spanMainHits += 1 }
    onAccess(slot)
    return true
  }

  /// Adds `key` with `weight` to the window, or changes its weight when it is resident (as
  /// ``update(_:weight:)``), and returns the keys that must leave, in eviction order.
  ///
  /// An entry heavier than ``maximumWeight`` is not admitted: its key is returned at once.
  /// - Parameters:
  ///   - key: The key of the new entry.
  ///   - weight: Its weight (cost), 0 or more; 1 in count mode.
  /// - Returns: The keys that are no longer resident (possibly `key` itself).
  @discardableResult
  mutating func insert(_ key: Key, weight: Int) -> [Key] {
    precondition(weight >= 0, "weight is \(weight); it must be 0 or more")
    if slots[key] != nil { return update(key, weight: weight) }
    let hash = Self.sketchKey(key)
    sketch.increment(hash)
    guard weight <= maximumWeight else { return [key] }
    let slot = nodes.count
    nodes.append(Node(key: key, hash: hash, weight: weight, region: .window))
    slots[key] = slot
    link(slot, atMRUOf: .window)
    windowWeight &+= weight
    adaptWindow(hash: hash)
    var evicted: [Key] = []
    evictEntries(sparing: slot, into: &evicted)
    return evicted
  }

  /// Changes the weight of a resident `key`, counts as a use of it, and returns the keys that
  /// must leave, in eviction order.
  ///
  /// A weight above ``maximumWeight`` evicts the entry itself. A window entry that grew past
  /// the window's size moves to the window's LRU end, to leave the window first.
  /// - Returns: The keys that are no longer resident (possibly `key` itself); empty when `key`
  ///   is not resident.
  @discardableResult
  mutating func update(_ key: Key, weight: Int) -> [Key] {
    precondition(weight >= 0, "weight is \(weight); it must be 0 or more")
    guard let slot = slots[key] else { return [] }
    sketch.increment(nodes[slot].hash)
    guard weight <= maximumWeight else {
      removeNode(at: slot)
      return [key]
    }
    let region = nodes[slot].region
    addWeight(weight &- nodes[slot].weight, to: region)
    nodes[slot].weight = weight
    if region == .window && weight > windowMaximum {
      unlink(slot)
      link(slot, atLRUOf: .window)
    } else {
      onAccess(slot)
    }
    demoteProtectedOverflow()
    var evicted: [Key] = []
    evictEntries(sparing: slot, into: &evicted)
    return evicted
  }

  /// Forgets `key` (its popularity stays in the sketch).
  ///
  /// O(1) amortized.
  /// - Returns: Whether `key` was resident.
  @discardableResult
  mutating func remove(_ key: Key) -> Bool {
    guard let slot = slots[key] else { return false }
    removeNode(at: slot)
    return true
  }

  // MARK: Lists

  /// The most recently used slot of `region`.
  func mru(_ region: Region) -> Int {
    switch region {
    case .window: windowMRU
    case .probation: probationMRU
    case .protected: protectedMRU
    }
  }

  /// The least recently used slot of `region`.
  func lru(_ region: Region) -> Int {
    switch region {
    case .window: windowLRU
    case .probation: probationLRU
    case .protected: protectedLRU
    }
  }

  /// Sets the most recently used slot of `region`.
  mutating func setMRU(_ region: Region, _ slot: Int) {
    switch region {
    case .window: windowMRU = slot
    case .probation: probationMRU = slot
    case .protected: protectedMRU = slot
    }
  }

  /// Sets the least recently used slot of `region`.
  mutating func setLRU(_ region: Region, _ slot: Int) {
    switch region {
    case .window: windowLRU = slot
    case .probation: probationLRU = slot
    case .protected: protectedLRU = slot
    }
  }

  /// Adds `delta` to the weight of `region`.
  mutating func addWeight(_ delta: Int, to region: Region) {
    switch region {
    case .window: windowWeight &+= delta
    case .probation: probationWeight &+= delta
    case .protected: protectedWeight &+= delta
    }
  }

  /// Takes `slot` out of its list (its region and weight accounting stay).
  mutating func unlink(_ slot: Int) {
    let region = nodes[slot].region
    let newer = nodes[slot].newer
    let older = nodes[slot].older
    if newer != Self.none { nodes[newer].older = older } else { setMRU(region, older) }
    if older != Self.none { nodes[older].newer = newer } else { setLRU(region, newer) }
  }

  /// Puts an unlinked `slot` at the most recently used end of `region`.
  mutating func link(_ slot: Int, atMRUOf region: Region) {
    let head = mru(region)
    nodes[slot].region = region
    nodes[slot].newer = Self.none
    nodes[slot].older = head
    if head != Self.none { nodes[head].newer = slot } else { setLRU(region, slot) }
    setMRU(region, slot)
  }

  /// Puts an unlinked `slot` at the least recently used end of `region`.
  mutating func link(_ slot: Int, atLRUOf region: Region) {
    let tail = lru(region)
    nodes[slot].region = region
    nodes[slot].older = Self.none
    nodes[slot].newer = tail
    if tail != Self.none { nodes[tail].older = slot } else { setMRU(region, slot) }
    setLRU(region, slot)
  }

  /// Moves `slot` to the most recently used end of `region`, carrying its weight over.
  mutating func move(_ slot: Int, toMRUOf region: Region) {
    let weight = nodes[slot].weight
    addWeight(-weight, to: nodes[slot].region)
    unlink(slot)
    link(slot, atMRUOf: region)
    addWeight(weight, to: region)
  }

  /// Moves `slot` up after a use; a probation entry is promoted to protected unless it is
  /// heavier than protected's whole size.
  mutating func onAccess(_ slot: Int) {
    let region = nodes[slot].region
    switch region {
    case .window, .protected:
      if mru(region) != slot { move(slot, toMRUOf: region) }
    case .probation:
      if nodes[slot].weight > protectedMaximum {
        move(slot, toMRUOf: .probation)
      } else {
        move(slot, toMRUOf: .protected)
        demoteProtectedOverflow()
      }
    }
  }

  /// Demotes protected's least recently used entries to probation's MRU end while protected
  /// is over its size.
  mutating func demoteProtectedOverflow() {
    while protectedWeight > protectedMaximum, protectedLRU != Self.none {
      move(protectedLRU, toMRUOf: .probation)
    }
  }

  /// Removes the node at `slot` from its list, the accounting and the index.
  ///
  /// - Returns: The slot whose node moved into `slot` to keep the storage dense, or `nil`
  ///   when `slot` was the last one. Slots held across the call must be renamed.
  @discardableResult
  mutating func removeNode(at slot: Int) -> Int? {
    unlink(slot)
    addWeight(-nodes[slot].weight, to: nodes[slot].region)
    slots[nodes[slot].key] = nil
    let last = nodes.count - 1
    guard slot != last else {
      nodes.removeLast()
      return nil
    }
    nodes.swapAt(slot, last)
    nodes.removeLast()
    let newer = nodes[slot].newer
    let older = nodes[slot].older
    if newer != Self.none { nodes[newer].older = slot } else { setMRU(nodes[slot].region, slot) }
    if older != Self.none { nodes[older].newer = slot } else { setLRU(nodes[slot].region, slot) }
    slots[nodes[slot].key] = slot
    return last
  }

  // MARK: Eviction

  /// Whether `candidate` should enter main in place of `victim`: it must be strictly more
  /// popular, or warm and lucky (1/128), so that an attacker cannot pin a victim by flooding
  /// its counters.
  mutating func admit(candidate: Int, victim: Int) -> Bool {
    let victimFrequency = sketch.frequency(nodes[victim].hash)
    let candidateFrequency = sketch.frequency(nodes[candidate].hash)
    if candidateFrequency > victimFrequency { return true }
    guard candidateFrequency >= Self.warmFrequency else { return false }
    return random.next() & 127 == 0
  }

  /// The next candidate after `candidate`: older in probation, newer in the window.
  func nextCandidate(after candidate: Int, in region: Region) -> Int {
    region == .window ? nodes[candidate].newer : nodes[candidate].older
  }

  /// Moves window overflow to probation, then evicts until the total weight fits, appending
  /// the keys that leave to `evicted`.
  ///
  /// Caffeine's `evictFromMain`: candidates are taken from probation's MRU end (where window
  /// overflow just went), then from the window's LRU end; victims from probation's LRU end,
  /// then protected's, then the window's. A candidate and a victim duel by frequency; when only
  /// one of them exists, it leaves. Entries of weight 0 are skipped: evicting them frees
  /// nothing (so many of them at probation's LRU end lengthen the walk, as in Caffeine).
  /// With the window and protected within their sizes, emptying probation always suffices;
  /// the walk over protected and the window is a safety net, as in Caffeine.
  mutating func evictEntries(sparing spared: Int, into evicted: inout [Key]) {
    var spared = spared
    while windowWeight > windowMaximum, windowLRU != Self.none {
      move(windowLRU, toMRUOf: .probation)
    }
    var victimRegion = Region.probation
    var candidateRegion = Region.probation
    var victim = probationLRU
    var candidate = probationMRU
    while totalWeight > maximumWeight {
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
          // Unreachable: every list was walked and each entry with weight left.
          // Only the spared entry is left with weight.
          return
        }
      }
      if victim != Self.none && victim == spared {
        victim = nodes[victim].newer
        continue
      }
      if candidate != Self.none && candidate == spared {
        candidate = nextCandidate(after: candidate, in: candidateRegion)
        continue
      }
      if victim != Self.none && nodes[victim].weight == 0 {
        victim = nodes[victim].newer
        continue
      }
      if candidate != Self.none && nodes[candidate].weight == 0 {
        candidate = nextCandidate(after: candidate, in: candidateRegion)
        continue
      }
      let evict: Int
      // A candidate that wins moves on only after the victim left: the victim may be its
      // neighbour, whose slot the removal frees or gives to another node.
      var advanceCandidate = false
      // Whether the entry leaving is a candidate turned away (else it leaves the main region).
      var turnedAway = true
      if victim == Self.none {
        evict = candidate
        candidate = nextCandidate(after: candidate, in: candidateRegion)
      } else if candidate == Self.none {
        evict = victim
        victim = nodes[victim].newer
        turnedAway = false
      } else if candidate == victim {
        evict = victim
        victim = nodes[victim].newer
        candidate = Self.none
      } else if admit(candidate: candidate, victim: victim) {
        evict = victim
        victim = nodes[victim].newer
        advanceCandidate = true
        turnedAway = false
      } else {
        evict = candidate
        candidate = nextCandidate(after: candidate, in: candidateRegion)
      }
      evicted.append(nodes[evict].key)
      ghosts?.recordExit(tag: UInt32(truncatingIfNeeded: nodes[evict].hash), fromWindow: turnedAway)
      if let moved = removeNode(at: evict) {
        if victim == moved { victim = evict }
        if candidate == moved { candidate = evict }
        if spared == moved { spared = evict }
      }
      if advanceCandidate { candidate = nextCandidate(after: candidate, in: candidateRegion) }
    }
  }
}

extension WTinyLFUPolicy where Random == SystemRandomNumberGenerator {
  /// Creates an empty policy whose rare random admissions use the system's generator.
  ///
  /// - Parameters:
  ///   - maximumWeight: The most the weights of resident entries may sum to (0 or more).
  ///   - maximumEntryCount: The number of entries the cache holds at most, which sizes the
  ///     frequency sketch; `nil` uses `maximumWeight`.
  init(maximumWeight: Int, maximumEntryCount: Int? = nil) {
    self.init(maximumWeight: maximumWeight, maximumEntryCount: maximumEntryCount, random: SystemRandomNumberGenerator())
  }
}

extension WTinyLFUPolicy.Node: Sendable where Key: Sendable {}

extension WTinyLFUPolicy {
  /// Checks every structural invariant and returns the violations (empty when sound). O(n).
  /// For tests.
  func invariantViolations() -> [String] {
    var problems: [String] = []
    var seen = Set<Int>()
    for region in Region.allCases {
      var weight = 0
      var cursor = lru(region)
      var previous = Self.none
      while cursor != Self.none, seen.count <= nodes.count {
        if !seen.insert(cursor).inserted { problems.append("slot \(cursor) is linked twice") }
        if nodes[cursor].region != region {
          problems.append("slot \(cursor) in \(region) says \(nodes[cursor].region)")
        }
        if nodes[cursor].older != previous { problems.append("slot \(cursor) has a wrong older link") }
        weight += nodes[cursor].weight
        previous = cursor
        cursor = nodes[cursor].newer
      }
      if previous != mru(region) { problems.append("\(region) ends at \(previous), its MRU is \(mru(region))") }
      if weight != self.weight(of: region) {
        problems.append("\(region) weighs \(self.weight(of: region)), its entries sum to \(weight)")
      }
    }
    if seen.count != nodes.count { problems.append("lists hold \(seen.count) of \(nodes.count) entries") }
    if slots.count != nodes.count { problems.append("\(slots.count) keys index \(nodes.count) entries") }
    for (key, slot) in slots where slot < 0 || slot >= nodes.count || nodes[slot].key != key {
      problems.append("the index of a key points at slot \(slot), which holds another key")
    }
    for node in nodes where node.weight < 0 || node.hash != Self.sketchKey(node.key) {
      problems.append("an entry has weight \(node.weight) or a stale hash")
    }
    if totalWeight > maximumWeight { problems.append("total weight \(totalWeight) exceeds \(maximumWeight)") }
    if windowWeight > windowMaximum { problems.append("window weight \(windowWeight) exceeds \(windowMaximum)") }
    if protectedWeight > protectedMaximum {
      problems.append("protected weight \(protectedWeight) exceeds \(protectedMaximum)")
    }
    if windowMaximum < 0 || protectedMaximum < 0 || windowMaximum + protectedMaximum > maximumWeight {
      problems.append("window \(windowMaximum) and protected \(protectedMaximum) do not fit \(maximumWeight)")
    }
    return problems
  }
}
extension WTinyLFUPolicy {
  /// Lets a new key whose sketch key is `hash` vote with its ghost and, when the window's
  /// share moved, resizes the window (the share of the weight limit, at least 1) and protected
  /// (80% of the rest), moving what no longer fits down to probation at once, so that every
  /// list stays within its size.
  ///
  /// A capacity of new keys ends a span: when its votes did not ask for a larger window and the
  /// window earned fewer hits per entry than the main region over it, the share goes halfway
  /// back to 1% (``WindowTarget/relax()``).
  mutating func adaptWindow(hash: Int) {
    guard ghosts != nil else { return }
    let entries = followsCount ? Swift.min(self.entries, Swift.max(count, 256)) : self.entries
    if followsCount {
      let held = count
      ghosts?.follow(entries: held)
    }
    guard let vote = ghosts?.vote(tag: UInt32(truncatingIfNeeded: hash)) else { return }
    var moved = false
    if vote != 0 {
      if vote > 0 { spanVotes.up += 1 } else { spanVotes.down += 1 }
      moved = target.count(vote: vote, entries: entries)
    }
    spanInserts += 1
    if spanInserts >= entries {
      let regions = WindowTarget.regionEntries(share: target.share, count: count, entries: entries)
      let earnsLess = WindowTarget.windowEarnsLess(
        windowHits: Int64(spanWindowHits), windowEntries: regions.window, mainHits: Int64(spanMainHits),
        mainEntries: regions.main)
      let asksForMore = WindowTarget.votesAskForLargerWindow(up: spanVotes.up, down: spanVotes.down)
      (spanInserts, spanVotes, spanWindowHits, spanMainHits) = (0, (0, 0), 0, 0)
      let relaxed = !asksForMore && earnsLess && target.relax()
      spans.ended += 1
      if relaxed { spans.relaxed += 1 }
      if asksForMore && earnsLess && target.share > WindowTarget.minimumShare { spans.keptByVotes += 1 }
      moved = moved || relaxed
    }
    guard moved else { return }
    windowMaximum = Swift.min(Swift.max(1, Int(target.share * Double(maximumWeight))), maximumWeight)
    protectedMaximum = Int(Double(maximumWeight - windowMaximum) * Self.protectedShare)
    demoteProtectedOverflow()
    while windowWeight > windowMaximum, windowLRU != Self.none {
      move(windowLRU, toMRUOf: .probation)
    }
  }
}
