import Testing

@testable import AsyncCache

/// `WindowGhosts`, the memory of the entries that left a segment: which returning keys vote,
/// which way, and for how long.
@Suite struct WindowGhostsTests {
  /// `count` tags whose ghosts sit at pairwise different positions of `ghosts`' tables, none at
  /// the positions of `avoiding`, so that they never overwrite one another.
  private func tags(_ count: Int, in ghosts: WindowGhosts, avoiding avoided: [UInt32] = []) -> [UInt32] {
    precondition(count + avoided.count <= ghosts.windowGhosts.count, "more tags than positions")
    var taken = Set(avoided.map { ghosts.position(of: $0) })
    var tags: [UInt32] = []
    var candidate: UInt32 = 0x1234_5678
    while tags.count < count {
      candidate &+= 0x9E37_79B9
      if !avoided.contains(candidate), taken.insert(ghosts.position(of: candidate)).inserted { tags.append(candidate) }
    }
    return tags
  }

  /// A tag other than `tag` whose ghosts sit at the same position.
  private func collidingTag(with tag: UInt32, in ghosts: WindowGhosts) -> UInt32 {
    var candidate = tag
    repeat { candidate &+= 1 } while ghosts.position(of: candidate) != ghosts.position(of: tag)
    return candidate
  }

  /// Records a ghost of `tag`, then one exit of the same kind for each of `others`.
  private func recordExit(
    of tag: UInt32, followedBy others: ArraySlice<UInt32>, fromWindow: Bool, in ghosts: inout WindowGhosts
  ) {
    ghosts.recordExit(tag: tag, fromWindow: fromWindow)
    for other in others { ghosts.recordExit(tag: other, fromWindow: fromWindow) }
  }

  @Test("the depth is 1% of the entries (at least 3); the tables hold two words per shallow ghost, at least 16")
  func sizes() {
    for (entries, depth, length) in [(0, 3, 16), (100, 3, 16), (1_000, 10, 32), (10_000, 100, 256)] {
      let ghosts = WindowGhosts(entries: entries)
      #expect(ghosts.depth == UInt64(depth), "\(entries) entries")
      #expect(ghosts.windowGhosts.count == length && ghosts.mainGhosts.count == length, "\(entries) entries")
      #expect(ghosts.ghostMask == length - 1)
    }
  }

  @Test(
    "a shallow ghost votes: +1 from the window's exits, -1 from the main region's",
    arguments: [(1_000, true), (1_000, false), (5_000, true), (5_000, false)] as [(Int, Bool)]
  )
  func shallowGhostsVote(entries: Int, fromWindow: Bool) {
    let expected = fromWindow ? 1 : -1
    var ghosts = WindowGhosts(entries: entries)
    let depth = Int(ghosts.depth)
    let all = tags(depth + 1, in: ghosts)
    // Straight away.
    recordExit(of: all[0], followedBy: [], fromWindow: fromWindow, in: &ghosts)
    #expect(ghosts.vote(tag: all[0]) == expected)
    // Behind depth - 2 later exits of its kind: still among the latest, still votes.
    recordExit(of: all[0], followedBy: all[1...(depth - 2)], fromWindow: fromWindow, in: &ghosts)
    #expect(ghosts.vote(tag: all[0]) == expected)
    // The later exits' ghosts vote too.
    #expect(ghosts.vote(tag: all[depth - 2]) == expected)
  }

  @Test(
    "a ghost behind depth or more exits of its kind votes 0",
    arguments: [(1_000, true), (1_000, false), (5_000, true), (5_000, false)] as [(Int, Bool)]
  )
  func deepGhostsDoNotVote(entries: Int, fromWindow: Bool) {
    var ghosts = WindowGhosts(entries: entries)
    let depth = Int(ghosts.depth)
    let all = tags(2 * depth + 1, in: ghosts)
    recordExit(of: all[0], followedBy: all[1...depth], fromWindow: fromWindow, in: &ghosts)
    #expect(ghosts.vote(tag: all[0]) == 0, "behind exactly depth exits")
    recordExit(of: all[0], followedBy: all[1...(2 * depth)], fromWindow: fromWindow, in: &ghosts)
    #expect(ghosts.vote(tag: all[0]) == 0, "behind twice depth exits")
    // The latest exit is still shallow: the tables did not forget it, only the old one aged out.
    #expect(ghosts.vote(tag: all[2 * depth]) == (fromWindow ? 1 : -1))
  }

  /// The type's documentation: a ghost votes while fewer than `depth` exits of its kind, its
  /// own included, followed... so a ghost followed by `depth - 2` later exits votes and one
  /// followed by `depth - 1` does not. The depth is at least 3, so the two latest ghosts of a
  /// kind always vote, in the smallest segment too.
  @Test(
    "a ghost's own exit counts in its age: depth - 2 later exits still vote, depth - 1 do not",
    arguments: [100, 199, 300, 1_000]
  )
  func ghostsBehindDepthMinusOneExitsVote(entries: Int) {
    for fromWindow in [true, false] {
      var ghosts = WindowGhosts(entries: entries)
      let depth = Int(ghosts.depth)
      #expect(depth >= 3)
      let all = tags(depth + 1, in: ghosts)
      recordExit(of: all[0], followedBy: all[1..<(depth - 1)], fromWindow: fromWindow, in: &ghosts)
      #expect(ghosts.vote(tag: all[0]) == (fromWindow ? 1 : -1), "depth \(depth), fromWindow \(fromWindow)")
      recordExit(of: all[1], followedBy: all[2...depth], fromWindow: fromWindow, in: &ghosts)
      #expect(ghosts.vote(tag: all[1]) == 0, "depth \(depth), fromWindow \(fromWindow)")
    }
  }

  @Test("a ghost votes once: its vote consumes it", arguments: [true, false])
  func aGhostIsConsumedByItsVote(fromWindow: Bool) {
    var ghosts = WindowGhosts(entries: 1_000)
    let tag: UInt32 = 0xABCD_EF01
    ghosts.recordExit(tag: tag, fromWindow: fromWindow)
    #expect(ghosts.vote(tag: tag) == (fromWindow ? 1 : -1))
    #expect(ghosts.vote(tag: tag) == 0)
    #expect(ghosts.windowGhosts.words[ghosts.position(of: tag)] == 0)
    #expect(ghosts.mainGhosts.words[ghosts.position(of: tag)] == 0)
    // A deep ghost is consumed too, without a vote.
    var deep = WindowGhosts(entries: 1_000)
    deep.recordExit(tag: tag, fromWindow: fromWindow)
    for other in tags(Int(deep.depth) + 1, in: deep, avoiding: [tag]) {
      deep.recordExit(tag: other, fromWindow: fromWindow)
    }
    #expect(deep.vote(tag: tag) == 0)
    #expect(deep.windowGhosts.words[deep.position(of: tag)] == 0)
    #expect(deep.mainGhosts.words[deep.position(of: tag)] == 0)
  }

  @Test("unknown tags vote 0, and neither a miss nor a colliding tag takes another key's ghost")
  func unknownTagsDoNotVote() {
    var ghosts = WindowGhosts(entries: 1_000)
    for tag in tags(ghosts.windowGhosts.count, in: ghosts) { #expect(ghosts.vote(tag: tag) == 0) }
    let window: UInt32 = 0x0BAD_CAFE
    let main = tags(1, in: ghosts, avoiding: [window])[0]
    ghosts.recordExit(tag: window, fromWindow: true)
    ghosts.recordExit(tag: main, fromWindow: false)
    #expect(ghosts.vote(tag: collidingTag(with: window, in: ghosts)) == 0)
    #expect(ghosts.vote(tag: collidingTag(with: main, in: ghosts)) == 0)
    #expect(ghosts.vote(tag: 0) == 0)
    #expect(ghosts.vote(tag: window) == 1)
    #expect(ghosts.vote(tag: main) == -1)
  }

  @Test("a newer ghost of the same kind at the same position forgets the older one")
  func aCollisionForgetsTheOlderGhost() {
    var ghosts = WindowGhosts(entries: 1_000)
    let older: UInt32 = 0x5151_5151
    let newer = collidingTag(with: older, in: ghosts)
    ghosts.recordExit(tag: older, fromWindow: true)
    ghosts.recordExit(tag: newer, fromWindow: true)
    #expect(ghosts.vote(tag: older) == 0)
    #expect(ghosts.vote(tag: newer) == 1)
  }

  @Test("the two kinds live apart: one kind's exits neither overwrite the other's ghosts")
  func kindsDoNotOverwriteEachOther() {
    var ghosts = WindowGhosts(entries: 1_000)
    let window: UInt32 = 0x7777_0001
    let main = collidingTag(with: window, in: ghosts)
    // Same position, different kinds, in both orders.
    ghosts.recordExit(tag: window, fromWindow: true)
    ghosts.recordExit(tag: main, fromWindow: false)
    #expect(ghosts.vote(tag: window) == 1)
    #expect(ghosts.vote(tag: main) == -1)
    ghosts.recordExit(tag: main, fromWindow: false)
    ghosts.recordExit(tag: window, fromWindow: true)
    #expect(ghosts.vote(tag: main) == -1)
    #expect(ghosts.vote(tag: window) == 1)
    // One key with a ghost of each kind: each is there for a vote of its own.
    let both: UInt32 = 0x4242_4242
    ghosts.recordExit(tag: both, fromWindow: false)
    ghosts.recordExit(tag: both, fromWindow: true)
    #expect(Set([ghosts.vote(tag: both), ghosts.vote(tag: both)]) == [1, -1])
    #expect(ghosts.vote(tag: both) == 0)
  }

  @Test("exits of one kind do not age the other kind's ghosts", arguments: [true, false])
  func exitsOfOneKindDoNotAgeTheOther(fromWindow: Bool) {
    var ghosts = WindowGhosts(entries: 1_000)
    let tag: UInt32 = 0x3C3C_3C3C
    ghosts.recordExit(tag: tag, fromWindow: fromWindow)
    // Ten times the depth of exits of the other kind, at every position of its table.
    var random = SeededGenerator(seed: 20)
    for _ in 0..<(10 * Int(ghosts.depth)) {
      ghosts.recordExit(tag: UInt32.random(in: .min ... .max, using: &random), fromWindow: !fromWindow)
    }
    #expect(ghosts.vote(tag: tag) == (fromWindow ? 1 : -1))
  }

  @Test("resize(entries:) deepens the ghosts and grows the tables; it never shrinks them")
  func resizeGrowsDepthAndTables() throws {
    var ghosts = WindowGhosts(entries: SegmentAdmission.initialUnboundedSketchSize)
    #expect(ghosts.depth == 3 && ghosts.windowGhosts.count == 16)
    // At depth 3 a ghost behind 5 exits is deep.
    let few = tags(6, in: ghosts)
    recordExit(of: few[0], followedBy: few[1...5], fromWindow: true, in: &ghosts)
    #expect(ghosts.vote(tag: few[0]) == 0)

    ghosts.resize(entries: 20_000)
    #expect(ghosts.depth == 200)
    try #require(ghosts.windowGhosts.count == 512 && ghosts.mainGhosts.count == 512 && ghosts.ghostMask == 511)
    let all = tags(151, in: ghosts)
    for fromWindow in [true, false] {
      recordExit(of: all[0], followedBy: all[1...150], fromWindow: fromWindow, in: &ghosts)
      #expect(ghosts.vote(tag: all[0]) == (fromWindow ? 1 : -1), "behind 150 exits at depth 200")
    }

    // Fewer entries: a smaller depth, the same tables (and their ghosts).
    ghosts.recordExit(tag: all[0], fromWindow: false)
    ghosts.resize(entries: 1_000)
    #expect(ghosts.depth == 10 && ghosts.windowGhosts.count == 512 && ghosts.ghostMask == 511)
    #expect(ghosts.vote(tag: all[0]) == -1)
  }
}
