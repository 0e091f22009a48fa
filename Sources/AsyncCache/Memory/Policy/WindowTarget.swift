/// The admission window's share of the capacity under ``EvictionPolicy/adaptive``: moved by the
/// votes of returning keys (``WindowGhosts``), one layer-wide target for all of its segments.
///
/// Each vote moves the share by one entry of the layer's capacity, plus a boost when the
/// recent votes agree (their moving average, squared, times 0.2% of the capacity), so that a
/// shift in the workload (a new hot set, a burst of new keys) moves the window within a few
/// thousand misses, while votes that balance out leave it nearly still. Unlike a hill climber,
/// nothing waits for a sample of many times the capacity: every returning miss is evidence.
///
/// The target is the layer's, not a segment's: every segment votes into it and sizes its window
/// from it. A segment sees only its share of the votes and holds only its share of the
/// entries, so a target of its own would move in coarse steps on sparse evidence; measured on
/// `cache.hitRatio` with 32 segments, it lost up to 3 points on loops and shifting hot sets that
/// the shared target keeps.
///
/// The ghosts' votes alone can leave a window too large: a mildly skewed hot set as large as the
/// cache, after a recency phase grew the window, turns away and evicts keys that return only
/// much later, so few ghosts vote either way, and the few that do roughly balance. So the layer
/// also weighs its regions over *spans* of a capacity of new keys each (a layer bounded by cost:
/// as many as it holds): at the end of a span
/// whose votes did not ask for a larger window (more votes up than down by more than twice
/// their noise, ``votesAskForLargerWindow(up:down:)``), the window is weighed against the main
/// region by the hits each earned per entry, and when it earned clearly less (under half of
/// main's, ``clearlyLessShare``) the share goes halfway back to 1% (``relax()``), W-TinyLFU's
/// default. A window that earns its hits is never relaxed, whatever the votes, one that the
/// votes ask for keeps growing, and the rule only ever shrinks the window, so a loop cannot
/// grow it. (It first weighed only spans without a single
/// vote: in a layer of more than a few thousand entries a capacity of inserts always brings
/// some vote, and after a recency phase the window of a layer of 4,800 entries stayed where it
/// grew, several points below W-TinyLFU.)
///
/// The share stays within 1% (Caffeine's window) and 99% (LRU, keeping 1% of main). Pure and
/// single-threaded: ``MemoryStore`` guards it with a lock taken only on votes and at the end of
/// a span.
@usableFromInline
struct WindowTarget: Sendable {
  /// The window's share of the capacity, in ``minimumShare``...``maximumShare``.
  @usableFromInline var share: Double
  /// The moving average of recent votes, in -1...1 (+1: all for a larger window).
  @usableFromInline var trend = 0.0

  @usableFromInline static var minimumShare: Double { 0.01 }
  @usableFromInline static var maximumShare: Double { 0.99 }
  /// The weight of each vote in ``trend``.
  @usableFromInline static var trendWeight: Double { 1.0 / 64 }
  /// The largest boost of a vote, as a share of the capacity (when every recent vote agreed).
  @usableFromInline static var boostShare: Double { 0.002 }

  @usableFromInline
  init() {
    share = Self.minimumShare
  }

  /// Whether a window of about `windowEntries` entries that earned `windowHits` hits earned
  /// clearly fewer per entry than a main region of `mainEntries` entries that earned
  /// `mainHits`: less than ``clearlyLessShare`` of main's. A region with no entries counts as
  /// one.
  @inlinable
  static func windowEarnsLess(windowHits: Int64, windowEntries: Int, mainHits: Int64, mainEntries: Int) -> Bool {
    Double(windowHits) * Double(Swift.max(mainEntries, 1))
      < clearlyLessShare * Double(mainHits) * Double(Swift.max(windowEntries, 1))
  }

  /// The share of main's hits per entry below which the window earns clearly less: near a tie
  /// the averages say nothing of which region the next entry is worth more in. Relaxing on
  /// any shortfall cost 0.3 point on OLTP at 5,000 to 15,000 entries and 0.5 on the shifting
  /// hot set at 50,000 (ARC's rows: a large window pays there); at three quarters, 0.2 to 0.3;
  /// at half, within 0.25 of the old rule on every row, and the window still comes back after a
  /// recency phase (there the window earns a tenth of main per entry).
  @usableFromInline static var clearlyLessShare: Double { 0.5 }

  /// The entries of a layer's window and main region when it holds `count` entries of at most
  /// `entries` and the window has `share` of them: the window fills first.
  @inlinable
  static func regionEntries(share: Double, count: Int, entries: Int) -> (window: Int, main: Int) {
    let window = Swift.min(count, Swift.max(1, Int(share * Double(entries))))
    return (window, Swift.max(count &- window, 0))
  }

  /// Whether `up` votes for a larger window against `down` for a smaller one, over a span, are
  /// more than noise: the lead of `up` exceeds twice the standard deviation it would have if
  /// every vote were a coin toss.
  @inlinable
  static func votesAskForLargerWindow(up: Int, down: Int) -> Bool {
    let lead = Double(up) - Double(down)
    return lead > 0 && lead * lead > 4 * (Double(up) + Double(down))
  }

  /// Moves the share halfway back to ``minimumShare`` and forgets the trend: the end of a span
  /// whose votes did not ask for a larger window, in which the window earned clearly fewer hits
  /// per entry than the main region.
  /// - Returns: Whether ``share`` moved.
  @inlinable
  mutating func relax() -> Bool {
    trend = 0
    let relaxed = Self.minimumShare + (share - Self.minimumShare) / 2
    guard relaxed != share else { return false }
    share = relaxed
    return true
  }

  /// Counts a vote (+1 for a larger window, -1 for a smaller one) in a layer that holds about
  /// `entries` entries when full.
  /// - Returns: Whether ``share`` moved.
  @inlinable
  mutating func count(vote: Int, entries: Int) -> Bool {
    guard vote != 0 else { return false }
    let direction: Double = vote > 0 ? 1 : -1
    let entries = Double(Swift.max(entries, 1))
    trend += Self.trendWeight * (direction - trend)
    var step = 1 / entries
    if (trend > 0) == (direction > 0) { step += Self.boostShare * trend * trend }
    let moved = Swift.min(Swift.max(share + direction * step, Self.minimumShare), Self.maximumShare)
    guard moved != share else { return false }
    share = moved
    return true
  }
}
