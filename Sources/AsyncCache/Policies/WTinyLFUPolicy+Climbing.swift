/// The hill climber of a ``WTinyLFUPolicy``: after each sample of accesses it compares the hit
/// rate with the previous sample's, and moves capacity between the admission window and the
/// main region in the direction that helped, with a step that decays while the hit rate is
/// steady and restarts when it jumps (Caffeine's `climb`, after "Adaptive Software Cache
/// Management", Einziger, Eytan, Friedman and Manes).
///
/// A recency-biased workload (a loop, a burst of new keys) grows the window towards LRU; a
/// frequency-biased one shrinks it towards plain TinyLFU.
@usableFromInline
struct WindowClimber: Sendable {
  /// A hit-rate change of at least this much restarts the step at its full size.
  @usableFromInline static var restartThreshold: Double { 0.05 }
  /// The full step, as a share of the capacity.
  @usableFromInline static var stepShare: Double { 0.0625 }
  /// How much the step shrinks after each sample with a steady hit rate.
  @usableFromInline static var stepDecay: Double { 0.98 }

  /// The accesses per sample: the sketch's sample size (10 × the capacity).
  @usableFromInline let sampleSize: Int
  /// The capacity, for the full step.
  @usableFromInline let maximumWeight: Int
  /// Hits in the current sample.
  @usableFromInline var hits = 0
  /// Misses in the current sample.
  @usableFromInline var misses = 0
  /// The previous sample's hit rate.
  @usableFromInline var previousHitRate = 0.0
  /// The next move, in weight: negative shrinks the window. The first move shrinks it.
  @usableFromInline var step: Double

  @usableFromInline
  init(maximumWeight: Int, sampleSize: Int) {
    self.maximumWeight = maximumWeight
    self.sampleSize = Swift.max(sampleSize, 1)
    self.step = -Self.stepShare * Double(maximumWeight)
  }

  /// Closes the sample when it is complete. Returns the weight to move into the window
  /// (negative: out of it), 0 when the sample is not complete.
  @usableFromInline
  mutating func adjustment() -> Int {
    let requests = hits &+ misses
    guard requests >= sampleSize else { return 0 }
    let hitRate = Double(hits) / Double(requests)
    let change = hitRate - previousHitRate
    let amount = change >= 0 ? step : -step
    step =
      Swift.abs(change) >= Self.restartThreshold
      ? Self.stepShare * Double(maximumWeight) * (amount >= 0 ? 1 : -1)
      : Self.stepDecay * amount
    previousHitRate = hitRate
    hits = 0
    misses = 0
    return Int(amount)
  }
}

extension WTinyLFUPolicy {
  /// Lets the climber move the boundary between the window and the main region, when a sample
  /// is complete. Moves the entries that no longer fit at once, so that every list stays within
  /// its size.
  @usableFromInline
  mutating func climb() {
    guard let amount = climber?.adjustment(), amount != 0 else { return }
    if amount > 0 {
      // Capacity comes out of protected; its overflow is demoted to probation.
      let quota = Swift.min(amount, protectedMaximum)
      windowMaximum += quota
      protectedMaximum -= quota
      demoteProtectedOverflow()
    } else {
      let quota = Swift.min(-amount, Swift.max(0, windowMaximum - 1))
      windowMaximum -= quota
      protectedMaximum += quota
      while windowWeight > windowMaximum, windowLRU != Self.none {
        move(windowLRU, toMRUOf: .probation)
      }
    }
  }
}
