import AsyncCache
import Testing

@Suite("PrefetchWindow")
struct PrefetchWindowTests {
  @Test(
    "windows in every direction and offset, nearest first",
    arguments: [
      (PrefetchWindow(direction: .upcoming, range: 3, offset: 1), 10, [11, 12, 13]),
      (PrefetchWindow(direction: .upcoming, range: 3, offset: 0), 10, [10, 11, 12]),
      (PrefetchWindow(direction: .upcoming, range: 2, offset: 3), 10, [13, 14]),
      (PrefetchWindow(direction: .preceding, range: 3, offset: 1), 10, [9, 8, 7]),
      (PrefetchWindow(direction: .preceding, range: 3, offset: 0), 10, [10, 9, 8]),
      (PrefetchWindow(direction: .both, range: 2, offset: 1), 10, [11, 9, 12, 8]),
      (PrefetchWindow(direction: .both, range: 2, offset: 0), 10, [10, 11, 9]),
      (PrefetchWindow(direction: .both, range: 3, offset: 0), 10, [10, 11, 9, 12, 8]),
    ] as [(PrefetchWindow, Int, [Int])])
  func middle(window: PrefetchWindow, current: Int, expected: [Int]) {
    #expect(window.indices(around: current, count: 100) == expected)
  }

  @Test(
    "windows are cut at both ends of the list",
    arguments: [
      (PrefetchWindow(direction: .upcoming, range: 5, offset: 1), 0, [1, 2, 3, 4, 5]),
      (PrefetchWindow(direction: .upcoming, range: 5, offset: 1), 98, [99]),
      (PrefetchWindow(direction: .upcoming, range: 5, offset: 1), 99, []),
      (PrefetchWindow(direction: .preceding, range: 5, offset: 1), 0, []),
      (PrefetchWindow(direction: .preceding, range: 5, offset: 1), 2, [1, 0]),
      (PrefetchWindow(direction: .both, range: 3, offset: 1), 0, [1, 2, 3]),
      (PrefetchWindow(direction: .both, range: 3, offset: 1), 99, [98, 97, 96]),
      (PrefetchWindow(direction: .both, range: 3, offset: 0), 1, [1, 2, 0, 3]),
    ] as [(PrefetchWindow, Int, [Int])])
  func ends(window: PrefetchWindow, current: Int, expected: [Int]) {
    #expect(window.indices(around: current, count: 100) == expected)
  }

  @Test("empty lists, empty windows and positions outside the list")
  func edgeCases() {
    let window = PrefetchWindow(direction: .both, range: 2, offset: 1)
    #expect(window.indices(around: 0, count: 0).isEmpty)
    #expect(PrefetchWindow(range: 0).indices(around: 5, count: 10).isEmpty)
    #expect(PrefetchWindow(range: -3).indices(around: 5, count: 10).isEmpty)
    #expect(window.indices(around: 500, count: 10) == [8, 7], "clamped to the last item")
    #expect(window.indices(around: -4, count: 10) == [1, 2], "clamped to the first item")
    #expect(PrefetchWindow(direction: .upcoming, range: 2, offset: -5).indices(around: 3, count: 10) == [3, 4])
    #expect(PrefetchWindow(direction: .upcoming, range: 3, offset: Int.max - 1).indices(around: 3, count: 10).isEmpty)
    #expect(PrefetchWindow(direction: .both, range: .max, offset: 1).indices(around: 1, count: 4) == [2, 0, 3])
  }

  @Test(
    "every index is in the list and appears once", arguments: [PrefetchWindow.Direction.upcoming, .preceding, .both])
  func properties(direction: PrefetchWindow.Direction) {
    for count in [1, 2, 7] {
      for current in -1...count {
        for offset in 0...3 {
          let indices = PrefetchWindow(direction: direction, range: 4, offset: offset).indices(
            around: current, count: count)
          #expect(indices.allSatisfy { (0..<count).contains($0) })
          #expect(Set(indices).count == indices.count)
        }
      }
    }
  }
}
