/// A segment's memory of the entries that recently left it, whose votes size the admission
/// window of ``EvictionPolicy/adaptive`` (see ``WindowTarget``, which counts the votes).
///
/// Every entry that leaves a full segment leaves a *ghost*: its hash tag with the count of
/// exits of its kind at that moment.
/// - A **window ghost** for a candidate turned away at admission (it lost its duel, or there
///   was no main region to duel for): a larger window would have kept it longer.
/// - A **main ghost** for an entry evicted from the main region: a larger main region would
///   have kept it.
///
/// When a key is inserted again while its ghost is still *shallow* — fewer than ``depth`` exits
/// of its kind, its own included, since it left (``depth`` is 1% of the segment's entries, at
/// least 3) — it votes: a window ghost for a
/// larger window, a main ghost for a smaller one. Both sides answer the same question (would
/// 1% more room on my side have kept this key?), so the window settles where the two marginal
/// gains are equal. Keys that come back only after many exits (a loop longer than the cache)
/// do not vote, so a loop cannot talk the window into LRU's worst case.
///
/// Ghosts live in two direct-mapped tables, one per kind, so that the frequent exits of one
/// kind (on skewed traffic most candidates are turned away) never overwrite the other's; each
/// has two words per shallow ghost (about 0.3 byte per cached entry), and a collision forgets
/// the older ghost. They are read and written only when an entry leaves or a new key
/// arrives: a hit pays nothing for the adaptation.
@usableFromInline
struct WindowGhosts {
  /// Window ghosts, each `tag << 32 | marker | stamp` (``marker`` keeps it nonzero), 0 for
  /// none; a power-of-two number of words.
  @usableFromInline var windowGhosts: SketchTable
  /// Main ghosts, as ``windowGhosts``.
  @usableFromInline var mainGhosts: SketchTable
  @usableFromInline var ghostMask: Int
  /// A ghost votes while its age (exits of its kind since it was recorded, its own included) is
  /// below this.
  @usableFromInline var depth: UInt64
  @usableFromInline var windowExits: UInt64 = 0
  @usableFromInline var mainExits: UInt64 = 0

  /// The depth, as a share of the segment's entries.
  @usableFromInline static var depthShare: Double { 0.01 }
  @usableFromInline static var marker: UInt64 { 1 << 30 }
  @usableFromInline static var stampMask: UInt64 { (1 << 30) - 1 }

  /// The ghosts of a segment that holds about `entries` entries when full.
  init(entries: Int) {
    depth = Self.depth(forEntries: entries)
    let length = Self.tableLength(depth: depth)
    windowGhosts = SketchTable(count: length)
    mainGhosts = SketchTable(count: length)
    ghostMask = length &- 1
  }

  /// The depth for a segment of `entries` entries: 1% of them, and at least
  /// ``minimumDepth``, so that a small segment (an explicit `segmentCount` that leaves each a
  /// few hundred entries) still hears its votes.
  @inlinable
  static func depth(forEntries entries: Int) -> UInt64 {
    UInt64(Swift.max(minimumDepth, Int(Double(Swift.max(entries, 1)) * depthShare)))
  }

  /// The smallest depth, in exits.
  @usableFromInline static var minimumDepth: Int { 3 }

  /// Two words per shallow ghost, at least 16, so that collisions are rare.
  @usableFromInline
  static func tableLength(depth: UInt64) -> Int {
    var length = 16
    while length < 2 &* Int(depth), length < 1 << 26 { length &*= 2 }
    return length
  }

  /// The table word of a tag: its high bits after a multiplicative scramble (the low bits of a
  /// segment's tags also pick its home group).
  @inlinable
  func position(of tag: UInt32) -> Int {
    Int(truncatingIfNeeded: (UInt64(tag) &* 0x9E37_79B9_7F4A_7C15) >> 40) & ghostMask
  }

  /// Leaves the ghost of an entry with hash tag `tag` that was turned away at admission
  /// (`fromWindow`) or evicted from the main region.
  @inlinable
  mutating func recordExit(tag: UInt32, fromWindow: Bool) {
    let entry = UInt64(tag) << 32 | Self.marker
    if fromWindow {
      windowGhosts.words[position(of: tag)] = entry | windowExits & Self.stampMask
      windowExits &+= 1
    } else {
      mainGhosts.words[position(of: tag)] = entry | mainExits & Self.stampMask
      mainExits &+= 1
    }
  }

  /// The vote of a new key with hash tag `tag`: +1 (a larger window) when it has a shallow
  /// window ghost, -1 (a smaller one) for a shallow main ghost, 0 otherwise. Its ghost is
  /// forgotten either way.
  @inlinable
  mutating func vote(tag: UInt32) -> Int {
    let position = position(of: tag)
    if let age = Self.takeGhost(tag: tag, at: position, in: windowGhosts, exits: windowExits) {
      return age < depth ? 1 : 0
    }
    if let age = Self.takeGhost(tag: tag, at: position, in: mainGhosts, exits: mainExits) {
      return age < depth ? -1 : 0
    }
    return 0
  }

  /// Removes the ghost of `tag` at `position` of `table`, if there, and returns its age: the
  /// exits of its kind since it was recorded, its own included (so at least 1).
  @inlinable
  static func takeGhost(tag: UInt32, at position: Int, in table: SketchTable, exits: UInt64) -> UInt64? {
    let ghost = table.words[position]
    guard ghost != 0, UInt32(truncatingIfNeeded: ghost >> 32) == tag else { return nil }
    table.words[position] = 0
    return (exits &- ghost) & stampMask
  }

  /// Follows a segment of a layer bounded by cost, which holds `entries` entries, fewer than its
  /// share of the count limit that the ghosts were first sized for: ghosts as deep as 1% of that
  /// share would let keys vote that came back long after they left (with a count limit of
  /// 1,000,000 as a safety cap over a cost limit that holds 4,800 entries, every returning key
  /// voted for a larger window, and the layer ended as LRU, 17 points below W-TinyLFU).
  @inlinable
  mutating func follow(entries: Int) {
    guard Self.depth(forEntries: entries) != depth else { return }
    resize(entries: entries)
  }

  /// Follows a segment whose entries grew (or, bounded by cost, changed) to `entries`.
  @usableFromInline
  mutating func resize(entries: Int) {
    depth = Self.depth(forEntries: entries)
    let length = Self.tableLength(depth: depth)
    guard length > windowGhosts.count else { return }
    windowGhosts = SketchTable(count: length)
    mainGhosts = SketchTable(count: length)
    ghostMask = length &- 1
  }
}
