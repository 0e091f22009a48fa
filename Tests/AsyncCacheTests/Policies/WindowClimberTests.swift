import Testing

@testable import AsyncCache

/// The hill climber that sizes W-TinyLFU's admission window from the hit rate.
@Suite struct WindowClimberTests {
  /// Feeds one complete sample with `hitRate` and returns the climber's move.
  private func sample(_ climber: inout WindowClimber, hitRate: Double) -> Int {
    let hits = Int((hitRate * Double(climber.sampleSize)).rounded())
    climber.hits = hits
    climber.misses = climber.sampleSize - hits
    return climber.adjustment()
  }

  @Test("no move until a sample is complete; the first move shrinks the window by the full step")
  func firstMove() {
    var climber = WindowClimber(maximumWeight: 1_000, sampleSize: 100)
    climber.hits = 50
    climber.misses = 49
    #expect(climber.adjustment() == 0, "99 of 100 accesses")
    climber.misses = 50
    #expect(climber.adjustment() == -62, "6.25% of the capacity, towards a smaller window")
    #expect(climber.hits == 0 && climber.misses == 0, "a new sample starts")
  }

  @Test("a move that helped is repeated with a decaying step; one that hurt is reversed")
  func followsTheHitRate() {
    var climber = WindowClimber(maximumWeight: 1_000, sampleSize: 100)
    #expect(sample(&climber, hitRate: 0.50) == -62)  // 0 → 0.50: a jump, full step next
    #expect(sample(&climber, hitRate: 0.52) == -62, "it helped: same way")
    let third = sample(&climber, hitRate: 0.53)  // steady: the step decays
    #expect(third < 0 && third > -62)
    let fourth = sample(&climber, hitRate: 0.52)  // worse: back the other way
    #expect(fourth > 0)
    #expect(abs(climber.step) < 62.5)
    _ = sample(&climber, hitRate: 0.70)  // a jump of 18 points
    #expect(abs(climber.step) == 62.5, "a change of 5 points or more restarts the full step")
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
