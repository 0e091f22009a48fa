/// Chooses the ``PolicyExpert`` a small layer under ``EvictionPolicy/adaptive`` runs, from the hits
/// every expert scores on the layer's own accesses.
///
/// Each expert runs on a ``ShadowCache`` of the layer's capacity that sees every access, so the
/// comparison is exact, whatever the workload: no sample, no extrapolation from a few returning
/// keys (ghosts price keys, and a loop one key longer than the cache talks them into LRU, whose
/// hit ratio there is 0), no step that noise can take in the wrong direction. The layer switches
/// to another expert only on evidence that outweighs what a switch costs:
///
/// - Scores are the hits of each period (a quarter of the capacity in accesses, at least 16),
///   decayed over a horizon of 32 capacities (and at least 8,192 accesses), so a lasting change
///   of workload moves them and a cycle of the workload (sweeps up and down, a loop) averages out.
/// - A change of workload is seen sooner on scores decayed over half the horizon: when they
///   alone pass the test below, the layer switches, and the change is on trial for 2 horizons,
///   during which only those recent scores decide. If the workload goes back within the trial
///   (the recent scores favour the expert the change left), so does the layer, and changes are
///   off for 8 horizons: that was a phase of a cycle, which the full horizon weighs. If it
///   lasts, the lasting scores restart from the recent ones.
///   Without this, the variance of a lead whose sign flipped at the change hid the new lead: at
///   1,000 entries, after a recency phase, a frequency phase ran 4 to 9 points below W-TinyLFU
///   for 60 to 100 capacities before the layer followed it, and now for 40 to 80 (at 200
///   entries the mean gap over 160 capacities went from 4.6 to 2.4 points; at 64 entries or
///   fewer, whose horizons are the 8,192-access floor, little changes). Recency and frequency
///   phases that take turns every horizon cost about a point against a referee without changes,
///   from 16 to 256 entries; a change that restarted the scores without a trial chased each
///   phase one phase late there and scored 31% at 16 entries, against LRU's 49.6% and 54%
///   without changes.
/// - Nothing is decided until the shadows have been full for 3 capacities of accesses: the first
///   turnovers of a cache favour recency (a frequency sketch is still empty) in a way that does
///   not last, and on sweeps and loops the first pass misleads.
/// - The leader must beat the running expert by more than the noise of their difference: three
///   times its standard deviation per period, times the square root of the decayed number of
///   periods (over a long run, about four deviations of the decayed lead), with a prior of a
///   quarter of a period's accesses as variance for 8 periods, so that a few calm periods do not
///   make it certain; plus 5% of the capacity and 8 hits. Every switch doubles that margin, and
///   the doubling fades over a horizon, so that two experts that take turns do not drag the layer
///   back and forth.
///
/// Each of these guards was measured on the LIRS suite, the ARC paper's traces and database,
/// web, storage and recommendation traces, against the worst of several runs: without the
/// warm-up, sweeps (LIRS2's `backf`) switch to recency in their first pass and lose 3 to 5 points;
/// with two deviations instead of three, a phase of the C preprocessor's trace (LIRS `cpp`) at 200
/// entries pulls the layer to recency and back, 4 points below ARC; without the noise term, two
/// experts that take turns on a periodic trace flip hundreds of times.
///
/// Costs: each access is an access to every shadow (six), which a small cache can afford and a
/// large one cannot, so only layers of at most ``maximumCapacity`` entries in one segment, bounded
/// by their count alone, are refereed; the shadows are created at the layer's first insert.
/// Pure and single-threaded: owned by the segment, under its lock.
struct PolicyReferee {
  /// The largest layer that is refereed: 4,096 entries, whose six shadows take 384 KiB.
  static var maximumCapacity: Int { 4_096 }

  /// The horizon over which scores fade, in capacities of accesses.
  static var horizonCapacities: Double { 32 }
  /// The shortest horizon, in accesses.
  static var minimumHorizon: Double { 8_192 }
  /// The horizon over which a change of workload is seen, as a share of the horizon.
  static var recentHorizonShare: Double { 0.5 }
  /// How long a change of workload is on trial, in horizons.
  static var trialHorizons: Double { 2 }
  /// How long changes are off after one turned out to be a phase of a cycle, in horizons.
  static var cycleHorizons: Double { 8 }
  /// How long the shadows must have been full before the first decision, in capacities.
  static var warmUpCapacities: Int { 3 }
  /// The noise term: standard deviations of the leader's lead over the running expert.
  static var noiseDeviations: Double { 3 }
  /// The prior of the lead's variance per period, as a share of the period's accesses, and how
  /// many periods it weighs.
  static var priorVarianceShare: Double { 0.25 }
  static var priorPeriods: Double { 8 }
  /// The fixed part of the margin, as a share of the capacity, and in hits.
  static var marginShare: Double { 0.05 }
  static var marginHits: Double { 8 }

  let experts: [PolicyExpert]
  /// Owns ``shadows``.
  private let shadowSet: ShadowSet
  /// The shadows, one per expert, in the order of ``experts``.
  private let shadows: UnsafeMutablePointer<ShadowCache>
  /// The index in ``experts`` of the expert the layer runs.
  private(set) var current: Int
  /// How many times the layer switched experts.
  private(set) var switches = 0
  let capacity: Int
  /// Accesses per period.
  let period: Int
  let horizon: Double
  /// The horizon of ``recent``, in accesses.
  let recentHorizon: Double
  private var accessesInPeriod = 0
  /// Accesses since the shadows were created, counted at the ends of periods (64 bits on every
  /// platform: a 32-bit count would wrap after 2^31 accesses and stop the referee).
  private var accesses: Int64 = 0
  /// The accesses at the end of the period in which the shadows became full, if they are.
  private var filledAt: Int64?
  private var periodHits: [Int]
  /// The periods' hits, faded over ``horizon``.
  private(set) var lasting: Scoreboard
  /// The same, faded over ``recentHorizon``: sees a change of workload sooner.
  private var recent: Scoreboard
  /// Recent switches, decayed: each doubles the margin of the next.
  private var recentSwitches = 0.0
  /// A change of workload on trial: the expert it left, and when.
  private var trial: (left: Int, at: Int64)?
  /// Until when changes of workload are off, after one turned out to be a phase of a cycle.
  private var changesResumeAt: Int64 = 0

  /// Hits per expert, decayed.
  var scores: [Double] { lasting.scores }

  /// A referee for a layer of `capacity` entries (at most ``maximumCapacity``), starting with
  /// the expert at `initial`; `seed` draws the shadows' rare random admissions.
  init(
    capacity: Int, seed: UInt64, experts: [PolicyExpert] = PolicyExpert.all,
    initial: Int = PolicyExpert.initialIndex
  ) {
    self.experts = experts
    self.capacity = capacity
    current = initial
    precondition((1...Self.maximumCapacity).contains(capacity), "a referee weighs 1 to 4,096 entries")
    shadowSet = ShadowSet(capacity: capacity, experts: experts, seed: seed)
    shadows = shadowSet.shadows
    period = Swift.max(16, capacity / 4)
    horizon = Swift.max(Self.horizonCapacities * Double(capacity), Self.minimumHorizon)
    periodHits = Array(repeating: 0, count: experts.count)
    lasting = Scoreboard(experts: experts.count, fade: Double(period) / horizon)
    recentHorizon = Self.recentHorizonShare * horizon
    recent = Scoreboard(experts: experts.count, fade: Double(period) / recentHorizon)
  }

  /// The expert the layer runs.
  var expert: PolicyExpert { experts[current] }

  /// The expert the shadow at `index` runs, for tests.
  func expert(ofShadow index: Int) -> PolicyExpert { shadows[index].expert }

  /// Records an access to the key with hash tag `tag` (the sketch already counts it) in every
  /// shadow, and at the end of a period weighs the experts.
  /// - Returns: Whether the layer should now run another expert (``expert``).
  mutating func record(_ tag: UInt32, sketch: borrowing FrequencySketch) -> Bool {
    periodHits.withUnsafeMutableBufferPointer { hits in
      for index in hits.indices where shadows[index].access(tag, sketch: sketch) { hits[index] &+= 1 }
    }
    accessesInPeriod &+= 1
    guard accessesInPeriod == period else { return false }
    accessesInPeriod = 0
    return endPeriod()
  }

  /// Scores the period that ended and decides whether to switch.
  private mutating func endPeriod() -> Bool {
    accesses &+= Int64(period)
    if filledAt == nil, shadows[0].count >= capacity {
      // Everything before is the fill, the same for every expert: start counting.
      filledAt = accesses
      lasting.reset()
      recent.reset()
    }
    lasting.add(periodHits, fading: Double(accesses) > horizon)
    recent.add(periodHits, fading: Double(accesses) > recentHorizon)
    for index in periodHits.indices { periodHits[index] = 0 }
    let fade = Double(period) / horizon
    recentSwitches = Swift.max(0, recentSwitches * (1 - fade))

    guard let filledAt, accesses &- filledAt >= Int64(Self.warmUpCapacities * capacity) else { return false }
    let margin = Self.marginShare * Double(capacity) * Self.doubling(recentSwitches) + Self.marginHits
    let prior = Double(period) * Self.priorVarianceShare
    if let trial {
      if recent.leads(trial.left, over: current, margin: margin, prior: prior) {
        // The workload went back: a cycle, which the lasting scores (kept through the trial)
        // weigh; no change for a while.
        self.trial = nil
        changesResumeAt = accesses &+ Int64(Self.cycleHorizons * horizon)
        return switchTo(trial.left)
      } else if accesses &- trial.at >= Int64(Self.trialHorizons * horizon) {
        // The change lasted: what came before it no longer counts.
        self.trial = nil
        lasting = recent
        lasting.fade = fade
      } else {
        // On trial, only the recent scores decide, and never for the expert the change left.
        guard let leader = recent.leader(over: current, margin: margin, prior: prior), leader != trial.left
        else { return false }
        return switchTo(leader)
      }
    }
    if let leader = lasting.leader(over: current, margin: margin, prior: prior) {
      return switchTo(leader)
    }
    // A change of workload (after a trial, or none for a while after a cycle).
    if accesses >= changesResumeAt, let leader = recent.leader(over: current, margin: margin, prior: prior) {
      trial = (current, accesses)
      return switchTo(leader)
    }
    return false
  }

  private mutating func switchTo(_ leader: Int) -> Bool {
    current = leader
    switches &+= 1
    recentSwitches += 1
    return true
  }

  /// 2 to the power of `exponent`, for the margin's doubling per recent switch.
  private static func doubling(_ exponent: Double) -> Double {
    var result = 1.0
    var remaining = exponent
    while remaining >= 1 {
      result *= 2
      remaining -= 1
    }
    // Between two powers, linearly: the margin only needs to grow, not to be exact.
    return result * (1 + remaining)
  }

  /// Each expert's hits per period and each pair's lead, faded at every period.
  struct Scoreboard {
    let experts: Int
    /// The share of the sums each period takes away.
    var fade: Double
    /// Hits per expert, decayed.
    private(set) var scores: [Double]
    /// For each pair `(i, j)` at `i * experts + j`: the decayed sum of `hits(i) - hits(j)` per
    /// period, and of its square.
    private var leadSums: [Double]
    private var leadSquares: [Double]
    /// The number of periods scored, decayed.
    private var periods = 0.0

    init(experts: Int, fade: Double) {
      self.experts = experts
      self.fade = Swift.min(1, fade)
      scores = Array(repeating: 0, count: experts)
      leadSums = Array(repeating: 0, count: experts * experts)
      leadSquares = leadSums
    }

    mutating func reset() {
      for index in scores.indices { scores[index] = 0 }
      for index in leadSums.indices {
        leadSums[index] = 0
        leadSquares[index] = 0
      }
      periods = 0
    }

    /// Adds a period's hits per expert, fading what came before if `fading`.
    mutating func add(_ hits: [Int], fading: Bool) {
      let keep = fading ? Swift.max(0, 1 - fade) : 1
      for first in 0..<experts {
        for second in 0..<experts where second != first {
          let lead = Double(hits[first] &- hits[second])
          leadSums[first * experts + second] = leadSums[first * experts + second] * keep + lead
          leadSquares[first * experts + second] = leadSquares[first * experts + second] * keep + lead * lead
        }
      }
      periods = periods * keep + 1
      for index in scores.indices { scores[index] = scores[index] * keep + Double(hits[index]) }
    }

    /// The expert that scores most, if it leads `current` by more than `margin` plus the noise
    /// of their lead; `prior` is the lead's variance per period assumed before it is measured.
    func leader(over current: Int, margin: Double, prior: Double) -> Int? {
      var leader = current
      for index in scores.indices where scores[index] > scores[leader] { leader = index }
      guard leader != current, leads(leader, over: current, margin: margin, prior: prior) else { return nil }
      return leader
    }

    /// Whether `leader` leads `current` by more than `margin` plus the noise of their lead.
    func leads(_ leader: Int, over current: Int, margin: Double, prior: Double) -> Bool {
      guard leader != current else { return false }
      let pair = leader * experts + current
      let mean = leadSums[pair] / periods
      let variance = Swift.max(
        0,
        (leadSquares[pair] + PolicyReferee.priorPeriods * prior) / (periods + PolicyReferee.priorPeriods) - mean * mean)
      let noise = PolicyReferee.noiseDeviations * (periods * variance).squareRoot()
      return scores[leader] - scores[current] >= margin + noise
    }
  }
}
