/// The hill climber of W-TinyLFU's admission window (``MemorySegment``): after each sample of accesses it compares the hit
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
  /// A change smaller than this many standard errors of the difference of two samples' hit
  /// rates is noise: the window stays where it is.
  @usableFromInline static var noiseThreshold: Double { 2 }

  /// The accesses per sample: the sketch's sample size (15 × the capacity).
  @usableFromInline let sampleSize: Int
  /// The hit rate the last move is judged against.
  @usableFromInline var previousHitRate = 0.0
  /// The next move, as a share of the capacity: negative shrinks the window. The first move
  /// shrinks it.
  @usableFromInline var step = -Self.stepShare
  /// Whether the climber has made its first move.
  @usableFromInline var hasMoved = false

  @usableFromInline
  init(sampleSize: Int) {
    self.sampleSize = Swift.max(sampleSize, 1)
  }

  /// Judges a sample of `hits` and `misses` once it is complete (at least ``sampleSize``
  /// requests).
  ///
  /// After the first move (which shrinks the window), a change in the hit rate smaller than
  /// ``noiseThreshold`` standard errors keeps the window where it is and the earlier hit rate
  /// as the reference, so that a steady workload does not walk the window about at random
  /// (Caffeine's climber moves on every sample). A real change moves it on the way that
  /// helped, or back when it hurt, by a step that decays while the changes are small and
  /// restarts after a jump of ``restartThreshold``.
  /// - Returns: `nil` while the sample is not complete (keep counting); otherwise the share of
  ///   the capacity to move into the window (negative: out of it), possibly 0. Start a new
  ///   sample then.
  @usableFromInline
  mutating func adjustment(hits: Int, misses: Int) -> Double? {
    let requests = hits &+ misses
    guard requests >= sampleSize else { return nil }
    let hitRate = Double(hits) / Double(requests)
    let change = hitRate - previousHitRate
    let noise = Self.noiseThreshold * (2 * hitRate * (1 - hitRate) / Double(requests)).squareRoot()
    if hasMoved, Swift.abs(change) < noise { return 0 }
    hasMoved = true
    let amount = change >= 0 ? step : -step
    step =
      Swift.abs(change) >= Self.restartThreshold
      ? Self.stepShare * (amount >= 0 ? 1 : -1)
      : Self.stepDecay * amount
    previousHitRate = hitRate
    return amount
  }
}
