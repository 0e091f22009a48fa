// Stands in for Memory/KeySample.swift in the 32-bit check: `Locked` and `Atomic` are not in
// Embedded Swift. The same interface over the real `KeySampleState` (Memory/KeySampleState.swift),
// without a lock: the check runs one thread.

@usableFromInline
final class KeySample {
  @usableFromInline let threshold: UInt64
  @usableFromInline let scale: Int
  @usableFromInline let countedFrom: Int
  let horizon: Int
  var state: KeySampleState

  init(capacity: Int, parameters: Parameters = .standard) {
    threshold = parameters.threshold(capacity: capacity)
    scale = parameters.scale(capacity: capacity)
    countedFrom = parameters.countedFrom
    horizon = parameters.horizon(capacity: capacity)
    state = KeySampleState(horizon: horizon)
  }

  @usableFromInline var position: Int { state.sequence }

  @usableFromInline func access(_ mixed: UInt64) { state.access(mixed, horizon: horizon) }

  @usableFromInline func keys(since start: Int) -> Int? { state.keys(since: start) }
}
