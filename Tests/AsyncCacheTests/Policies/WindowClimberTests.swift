import Testing

@testable import AsyncCache

/// The hill climber that sizes W-TinyLFU's admission window from the hit rate.
@Suite struct WindowClimberTests {
  /// Feeds one complete sample of 100 000 requests with `hitRate` and returns the climber's move.
  private func sample(_ climber: inout WindowClimber, hitRate: Double) -> Double? {
    let requests = 100_000
    let hits = Int((hitRate * Double(requests)).rounded())
    return climber.adjustment(hits: hits, misses: requests - hits)
  }

  @Test("no move until a sample is complete; the first move shrinks the window by the full step")
  func firstMove() {
    var climber = WindowClimber(sampleSize: 100)
    #expect(climber.adjustment(hits: 50, misses: 49) == nil, "99 of 100 accesses")
    #expect(climber.adjustment(hits: 50, misses: 50) == -0.0625, "6.25% of the capacity, towards a smaller window")
  }

  @Test("a move that helped is repeated with a decaying step; one that hurt is reversed")
  func followsTheHitRate() throws {
    var climber = WindowClimber(sampleSize: 100_000)
    #expect(sample(&climber, hitRate: 0.50) == -0.0625)  // 0 → 0.50: a jump, full step next
    #expect(sample(&climber, hitRate: 0.52) == -0.0625, "it helped: same way")
    let third = try #require(sample(&climber, hitRate: 0.53))  // steady: the step decays
    #expect(third < 0 && third > -0.0625)
    let fourth = try #require(sample(&climber, hitRate: 0.52))  // worse: back the other way
    #expect(fourth > 0)
    #expect(abs(climber.step) < 0.0625)
    _ = sample(&climber, hitRate: 0.70)  // a jump of 18 points
    #expect(abs(climber.step) == 0.0625, "a change of 5 points or more restarts the full step")
  }

  @Test("after the first move, a change within the noise of two samples keeps the window where it is")
  func noiseKeepsTheWindow() throws {
    var climber = WindowClimber(sampleSize: 100_000)
    #expect(sample(&climber, hitRate: 0.60) == -0.0625)
    // Two standard errors of the difference at 60% over 100 000 requests: about 0.0044.
    #expect(sample(&climber, hitRate: 0.603) == 0, "0.3 points is noise")
    #expect(sample(&climber, hitRate: 0.597) == 0, "and so is -0.3: the reference stays at 0.60")
    #expect(climber.previousHitRate == 0.60)
    let move = try #require(sample(&climber, hitRate: 0.59))
    #expect(move > 0, "1 point worse than before the first move: back towards a larger window")
  }

  @Test("when the hit rate falls (a hot set gives way to a loop), the window grows; every list stays within its size")
  func fallingHitRateGrowsTheWindow() {
    var policy = WTinyLFUPolicy<Int, SeededGenerator>(maximumWeight: 100, random: SeededGenerator(seed: 3))
    func access(_ key: Int) {
      if !policy.recordAccess(key) { policy.insert(key, weight: 1) }
      #expect(policy.invariantViolations().isEmpty)
    }
    for _ in 0..<100 {
      for key in 0..<50 { access(key) }  // a hot set that fits: a high hit rate
    }
    #expect(policy.windowMaximum == 1, "a smaller window was tried first, and 1 is as small as it gets")
    var largestWindow = policy.windowMaximum
    for _ in 0..<100 {
      for key in 1_000..<1_120 {  // a loop larger than the cache
        access(key)
        largestWindow = max(largestWindow, policy.windowMaximum)
      }
    }
    // Later samples may move it back: hashes, and so the sketch's estimates, differ per process.
    #expect(largestWindow > 1, "the hit rate fell: the climber grew the window")
    #expect(policy.windowMaximum + policy.protectedMaximum <= 100)
  }

  @Test("a fixed window stays at 1%")
  func fixedWindow() {
    var policy = WTinyLFUPolicy<Int, SeededGenerator>(
      maximumWeight: 100, adaptsWindow: false, random: SeededGenerator(seed: 3))
    for _ in 0..<50 {
      for key in 0..<120 where !policy.recordAccess(key) { policy.insert(key, weight: 1) }
    }
    #expect(policy.windowMaximum == 1 && policy.protectedMaximum == 79)
  }
}
