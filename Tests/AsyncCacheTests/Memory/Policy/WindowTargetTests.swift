import Testing

@testable import AsyncCache

/// `WindowTarget`, the layer's window share that the ghosts' votes move.
@Suite struct WindowTargetTests {
  /// Counts `vote` and returns how far the share moved.
  private func step(_ target: inout WindowTarget, vote: Int, entries: Int) -> Double {
    let before = target.share
    let moved = target.count(vote: vote, entries: entries)
    #expect(moved == (target.share != before), "count(vote:entries:) says whether the share moved")
    return target.share - before
  }

  @Test("a new target is at the minimum share, 1%, with no trend")
  func startsAtTheMinimum() {
    let target = WindowTarget()
    #expect(target.share == 0.01)
    #expect(WindowTarget.minimumShare == 0.01 && WindowTarget.maximumShare == 0.99)
    #expect(target.trend == 0)
  }

  @Test("a vote of 0 changes nothing and says so")
  func zeroVotes() {
    var target = WindowTarget()
    for _ in 0..<10 { _ = target.count(vote: 1, entries: 1_000) }
    let before = target
    let moved = target.count(vote: 0, entries: 1_000)
    #expect(!moved)
    #expect(target.share == before.share && target.trend == before.trend)
  }

  @Test("+1 grows the share, -1 shrinks it, by one entry of the capacity when the trend is new")
  func votesMoveTheShare() {
    let entries = 10_000
    var target = WindowTarget()
    let up = step(&target, vote: 1, entries: entries)
    // The first vote's trend is 1/64: its boost is 0.2% × (1/64)², far below one entry.
    #expect(abs(up - 1.0 / Double(entries)) < 1e-6)
    var down = WindowTarget()
    down.share = 0.5
    #expect(abs(step(&down, vote: -1, entries: entries) + 1.0 / Double(entries)) < 1e-6)
    // Any positive or negative vote counts as one vote of its sign.
    var strong = WindowTarget()
    #expect(abs(step(&strong, vote: 7, entries: entries) - up) < 1e-12)
  }

  @Test("the share never leaves 1%...99%; at either end a vote that would leave it does not move it")
  func staysWithinItsBounds() {
    for entries in [1, 50, 1_000] {
      var target = WindowTarget()
      let movedBelow = target.count(vote: -1, entries: entries)
      #expect(!movedBelow, "at the minimum")
      #expect(target.share == WindowTarget.minimumShare)
      var moves = 0
      var outside: [Double] = []
      for _ in 0..<20_000 {
        if target.count(vote: 1, entries: entries) { moves += 1 }
        if target.share < 0.01 || target.share > 0.99 { outside.append(target.share) }
      }
      #expect(target.share == WindowTarget.maximumShare, "\(entries) entries")
      let movedAbove = target.count(vote: 1, entries: entries)
      #expect(moves < 20_000 && !movedAbove, "at the maximum")
      for _ in 0..<20_000 {
        _ = target.count(vote: -1, entries: entries)
        if target.share < 0.01 || target.share > 0.99 { outside.append(target.share) }
      }
      #expect(outside.isEmpty, "\(entries) entries")
      #expect(target.share == WindowTarget.minimumShare, "\(entries) entries")
      let movedBelowAgain = target.count(vote: -1, entries: entries)
      #expect(!movedBelowAgain)
    }
  }

  @Test("votes that alternate move the share by one entry each way and leave it where it was")
  func alternatingVotesTakeSmallSteps() {
    let entries = 10_000
    var target = WindowTarget()
    target.share = 0.3
    // Settle the trend, then watch.
    for index in 0..<1_000 { _ = target.count(vote: index.isMultiple(of: 2) ? 1 : -1, entries: entries) }
    #expect(abs(target.trend) < 0.02)
    let start = target.share
    for index in 0..<1_000 {
      let vote = index.isMultiple(of: 2) ? 1 : -1
      let moved = step(&target, vote: vote, entries: entries)
      #expect(abs(moved - Double(vote) / Double(entries)) < 0.01 / Double(entries), "vote \(index)")
    }
    #expect(abs(target.share - start) < 1.0 / Double(entries))
  }

  @Test("votes that agree take larger and larger steps (the boost), up to one entry plus 0.2%")
  func agreeingVotesAreBoosted() {
    let entries = 10_000
    let unit = 1.0 / Double(entries)
    for direction in [1, -1] {
      var target = WindowTarget()
      target.share = direction > 0 ? 0.01 : 0.99
      var previous = 0.0
      var total = 0.0
      for index in 0..<300 {
        let moved = step(&target, vote: direction, entries: entries) * Double(direction)
        #expect(moved >= previous && moved <= unit + WindowTarget.boostShare + 1e-12, "vote \(index)")
        previous = moved
        total += moved
      }
      // After 300 agreeing votes the trend is 1 - (63/64)^300 ≈ 0.99: each step about 20 entries.
      #expect(previous > 15 * unit, "direction \(direction)")
      #expect(total > 3 * 300 * unit, "far beyond one entry per vote")
      #expect(abs(target.trend) > 0.98 && (target.trend > 0) == (direction > 0))
    }
  }

  @Test("a vote against the trend takes no boost")
  func votesAgainstTheTrendAreNotBoosted() {
    let entries = 10_000
    var target = WindowTarget()
    for _ in 0..<200 { _ = target.count(vote: 1, entries: entries) }
    #expect(target.trend > 0.9)
    // The first vote against pulls the trend down but not across 0: a plain step.
    #expect(abs(step(&target, vote: -1, entries: entries) + 1.0 / Double(entries)) < 1e-12)
  }

  @Test("random votes: the share stays in bounds, follows each vote's sign, by at most one entry plus 0.2%")
  func randomVotes() {
    var random = SeededGenerator(seed: 0x20)
    for entries in [10, 999, 50_000] {
      var target = WindowTarget()
      var problems: [String] = []
      for index in 0..<1_000 {
        // Runs of agreeing votes, so that the trend swings both ways.
        let vote = Int.random(in: -1...1, using: &random)
        for _ in 0..<Int.random(in: 1...40, using: &random) {
          let before = target.share
          let said = target.count(vote: vote, entries: entries)
          let moved = target.share - before
          if said != (moved != 0) { problems.append("run \(index): count said \(said), moved \(moved)") }
          if target.share < WindowTarget.minimumShare || target.share > WindowTarget.maximumShare {
            problems.append("run \(index): share \(target.share)")
          }
          if abs(target.trend) > 1 { problems.append("run \(index): trend \(target.trend)") }
          if moved != 0 && (moved > 0) != (vote > 0) { problems.append("run \(index): vote \(vote) moved \(moved)") }
          if abs(moved) > 1.0 / Double(entries) + WindowTarget.boostShare + 1e-12 {
            problems.append("run \(index): a step of \(moved)")
          }
        }
      }
      #expect(problems.isEmpty, "\(entries) entries: \(problems.prefix(5))")
    }
  }

  @Test("votes ask for a larger window only when up leads down by more than twice their noise")
  func votesAskForMoreOnlyBeyondTheirNoise() {
    // No votes, or more down than up: never.
    #expect(!WindowTarget.votesAskForLargerWindow(up: 0, down: 0))
    #expect(!WindowTarget.votesAskForLargerWindow(up: 3, down: 10))
    // A lead of 2 in 4 votes is a coin toss's noise (2 × √4 = 4); 4 of 4 is not.
    #expect(!WindowTarget.votesAskForLargerWindow(up: 3, down: 1))
    #expect(WindowTarget.votesAskForLargerWindow(up: 5, down: 0))
    // At the edge: a lead of exactly 2√n does not ask, one more does.
    #expect(!WindowTarget.votesAskForLargerWindow(up: 60, down: 40))
    #expect(WindowTarget.votesAskForLargerWindow(up: 61, down: 39))
    // Large counts do not overflow.
    #expect(WindowTarget.votesAskForLargerWindow(up: Int(Int32.max), down: 0))
    #expect(!WindowTarget.votesAskForLargerWindow(up: Int(Int32.max), down: Int(Int32.max)))
  }

  @Test("the window earns less only when clearly below main's hits per entry, not at a near tie")
  func earningLessNeedsAClearGap() {
    // 100 window entries against 900 main ones; main earns 1 hit per entry.
    func earnsLess(_ windowHits: Int64) -> Bool {
      WindowTarget.windowEarnsLess(windowHits: windowHits, windowEntries: 100, mainHits: 900, mainEntries: 900)
    }
    #expect(!earnsLess(100), "a tie")
    #expect(!earnsLess(70), "70% of main's rate is within the margin")
    #expect(!earnsLess(50), "exactly at the margin")
    #expect(earnsLess(49))
    #expect(earnsLess(0))
    // A region without entries counts as one: no division by zero, and no hits earn nothing.
    #expect(!WindowTarget.windowEarnsLess(windowHits: 0, windowEntries: 0, mainHits: 0, mainEntries: 0))
    #expect(WindowTarget.windowEarnsLess(windowHits: 0, windowEntries: 0, mainHits: 5, mainEntries: 0))
    // Counts of a long span beyond 32 bits (the sums are 64-bit on every platform).
    #expect(
      !WindowTarget.windowEarnsLess(
        windowHits: 3_000_000_000, windowEntries: 1, mainHits: 5_000_000_000, mainEntries: 1))
    #expect(
      WindowTarget.windowEarnsLess(windowHits: 2_000_000_000, windowEntries: 1, mainHits: 5_000_000_000, mainEntries: 1)
    )
  }
}
