/// One configuration of W-TinyLFU that ``EvictionPolicy/adaptive`` can run a small layer with:
/// the admission window's share, the rule a candidate must pass to displace a victim, and the
/// share of the main region that is protected.
///
/// The set (``all``) spans what the classic policies do well, each within a point of the best of
/// them on the workloads that favour it (`cache.hitRatio`, and the traces in the issue that chose
/// them): frequency with a small window (Zipf, scans, loops), the same with a stricter admission
/// (loops and sweeps whose keys are read equally often: a candidate that is only one count ahead,
/// a sketch's noise, no longer churns the main region), a fifth of the cache for recency (database
/// and web traces), nearly all of it (LRU's behaviour: recency-biased traffic, keys re-read soon
/// after they appear), ARC's behaviour (every candidate admitted into a probation half the cache,
/// which hits promote), and a lenient admission that lets ties in (storage traces, whose new keys
/// tie with the old ones). ``PolicyReferee`` runs every one on shadow lists and the layer takes
/// the one that hits most.
@usableFromInline
struct PolicyExpert: Sendable, Hashable {
  /// When a candidate leaving the window takes the place of the main region's victim.
  @usableFromInline
  enum Admission: UInt8, Sendable {
    /// When the sketch counts it more often than the victim (W-TinyLFU's rule).
    case moreFrequent
    /// When the sketch counts it at least two more times: one count ahead is within the
    /// sketch's noise, and letting it in churns the main region of a loop or a sweep.
    case clearlyMoreFrequent
    /// When the sketch counts it at least as often (ties go to the newer key).
    case asFrequent
    /// Always: ARC-like segmented LRU.
    case always
  }

  /// The admission window's share of the capacity, in `0...1`.
  @usableFromInline let windowShare: Double
  /// The protected region's share of what the window leaves, in `0...1`.
  @usableFromInline let protectedShare: Double
  @usableFromInline let admission: Admission
  /// A short name for diagnostics and tests, e.g. `frequency`.
  let name: String

  init(_ name: String, windowShare: Double, protectedShare: Double = 0.8, admission: Admission) {
    self.name = name
    self.windowShare = windowShare
    self.protectedShare = protectedShare
    self.admission = admission
  }

  /// Every configuration the referee weighs, in a fixed order (its indices are the experts'
  /// identities).
  static let all: [PolicyExpert] = [
    PolicyExpert("frequency", windowShare: 0.01, admission: .moreFrequent),
    PolicyExpert("strict frequency", windowShare: 0.01, admission: .clearlyMoreFrequent),
    PolicyExpert("balanced", windowShare: 0.2, admission: .moreFrequent),
    PolicyExpert("recency", windowShare: 0.99, admission: .moreFrequent),
    PolicyExpert("segmented LRU", windowShare: 0.01, protectedShare: 0.5, admission: .always),
    PolicyExpert("lenient frequency", windowShare: 0.01, admission: .asFrequent),
  ]

  /// The index in ``all`` of the configuration a layer starts with: strict frequency, which
  /// keeps what W-TinyLFU keeps on skewed traffic and, unlike it, holds a loop or a sweep still
  /// from the first pass (the others are chosen only on evidence).
  static var initialIndex: Int { 1 }

  /// The window's and protected's sizes in a segment whose limit is `limit`: ``windowShare`` of
  /// it for the window (at least 1, at most all of it), ``protectedShare`` of the rest for
  /// protected.
  func maximums<Size: FixedWidthInteger & SignedInteger>(of limit: Size) -> (window: Size, protected: Size) {
    SegmentAdmission.maximums(windowShare: windowShare, protectedShare: protectedShare, of: limit)
  }

  /// Whether a candidate the sketch counts `candidateFrequency` times takes the place of a victim
  /// it counts `victimFrequency` times, under `admission`.
  ///
  /// Besides the rule, a candidate at least ``SegmentAdmission/warmFrequency`` popular that loses
  /// wins anyway one time in 128 (Caffeine's defence against hash flooding: an attacker who pins a
  /// victim's counters cannot keep every popular key out).
  @inlinable
  static func admits(
    candidateFrequency: Int, victimFrequency: Int, by admission: Admission, random: inout SplitMix64
  ) -> Bool {
    switch admission {
    case .always: return true
    case .moreFrequent: if candidateFrequency > victimFrequency { return true }
    case .clearlyMoreFrequent: if candidateFrequency > victimFrequency &+ 1 { return true }
    case .asFrequent: if candidateFrequency >= victimFrequency { return true }
    }
    guard candidateFrequency >= SegmentAdmission.warmFrequency else { return false }
    return random.next() & 127 == 0
  }
}
