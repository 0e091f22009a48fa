/// SplitMix64 (Steele, Lea and Flood, 2014): a tiny, fast, seedable generator.
///
/// The memory layer draws W-TinyLFU's rare random admissions from it (one 64-bit state per
/// segment, no locks, no system calls); tests and benchmarks seed it to replay a run.
@usableFromInline
package struct SplitMix64: RandomNumberGenerator, Sendable {
  @usableFromInline var state: UInt64

  /// Creates a generator whose sequence is determined by `seed`.
  @inlinable
  package init(seed: UInt64) {
    state = seed
  }

  @inlinable
  package mutating func next() -> UInt64 {
    state &+= 0x9E37_79B9_7F4A_7C15
    var mixed = state
    mixed = (mixed ^ (mixed >> 30)) &* 0xBF58_476D_1CE4_E5B9
    mixed = (mixed ^ (mixed >> 27)) &* 0x94D0_49BB_1331_11EB
    return mixed ^ (mixed >> 31)
  }
}
