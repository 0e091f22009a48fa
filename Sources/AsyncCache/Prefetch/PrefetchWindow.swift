/// Which items around a current position to prefetch, nearest first.
///
/// A gallery showing item `current` wants the next few items cached before the user gets there
/// (``Direction-swift.enum/upcoming``), the previous few when scrolling back
/// (``Direction-swift.enum/preceding``), or both. ``offset`` skips the items nearest to the
/// current one (the one on screen, already requested urgently, is usually skipped with an
/// offset of 1); ``range`` is how many items the window holds on each side it covers.
///
/// ```swift
/// let window = PrefetchWindow(direction: .both, range: 2, offset: 1)
/// let middle = window.indices(around: 10, count: 100)  // [11, 9, 12, 8]
/// let first = window.indices(around: 0, count: 100)    // [1, 2]: nothing precedes the first item
/// ```
public struct PrefetchWindow: Sendable, Hashable {
  /// The side of the current item the window covers.
  public enum Direction: Sendable, Hashable {
    /// Items after the current one.
    case upcoming
    /// Items before the current one.
    case preceding
    /// Items on both sides, alternating from the nearest, upcoming first at each distance.
    case both
  }

  /// The side of the current item the window covers.
  public var direction: Direction
  /// How many items the window holds on each side it covers; 0 or less makes it empty.
  public var range: Int
  /// How far from the current item the window starts: 0 includes the current item, 1 starts
  /// with its neighbours. Negative values count as 0.
  public var offset: Int

  /// Creates a window.
  ///
  /// - Parameters:
  ///   - direction: The side of the current item the window covers. Default `.upcoming`.
  ///   - range: How many items on each side covered. Default 5.
  ///   - offset: How far from the current item the window starts. Default 1.
  public init(direction: Direction = .upcoming, range: Int = 5, offset: Int = 1) {
    self.direction = direction
    self.range = range
    self.offset = offset
  }

  /// The room a walk through the window needs in a memory layer's admission window: twice the
  /// distance to the window's far end (the keys loaded ahead, and those read since the oldest
  /// of them was loaded), on each side the window has; `Int.max` when that overflows.
  var admissionRoom: Int {
    let (far, farOverflow) = Swift.max(offset, 0).addingReportingOverflow(Swift.max(range, 0))
    let (room, roomOverflow) = far.multipliedReportingOverflow(by: direction == .both ? 4 : 2)
    return farOverflow || roomOverflow ? .max : room
  }

  /// The indices of the window around `current` in a list of `count` items, nearest first,
  /// each once, all in `0..<count`. A `current` outside the list is clamped to it.
  ///
  /// O(range).
  public func indices(around current: Int, count: Int) -> [Int] {
    guard count > 0, range > 0 else { return [] }
    let current = Swift.min(Swift.max(current, 0), count - 1)
    // No item lies further than count - 1 from the current one, so larger ranges and offsets
    // change nothing (and must not overflow).
    let start = Swift.min(Swift.max(offset, 0), count)
    let width = Swift.min(range, count)
    let end = Swift.min(start + width, count)
    var indices: [Int] = []
    indices.reserveCapacity(direction == .both ? 2 * width : width)
    for distance in start..<end {
      let (after, afterOverflow) = current.addingReportingOverflow(distance)
      let (before, beforeOverflow) = current.subtractingReportingOverflow(distance)
      if direction != .preceding, !afterOverflow, after < count { indices.append(after) }
      if direction != .upcoming, !beforeOverflow, before >= 0, distance > 0 || direction == .preceding {
        indices.append(before)
      }
    }
    return indices
  }
}
