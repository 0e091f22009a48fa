import Testing

@testable import AsyncCache

@Suite("AsyncPrefetcherStateMachine")
struct AsyncPrefetcherStateMachineTests {
  typealias Machine = AsyncPrefetcherStateMachine<String>

  @Test("loads start nearest first, at most the limit at a time, and the next one when one ends")
  func limit() {
    var machine = Machine(limit: 2)
    #expect(machine.moveWindow(to: ["a", "b", "c", "d"]) == [.start("a"), .start("b")])
    #expect(machine.loadEnded("b", .loaded) == [.start("c")])
    #expect(machine.loadEnded("a", .skipped) == [.start("d")])
    #expect(machine.loadEnded("c", .failed).isEmpty)
    #expect(machine.loadEnded("d", .loaded).isEmpty)
    #expect(machine.progress == (4, 4))
  }

  @Test("moving the window cancels the loads that left it and keeps the others and their outcomes")
  func move() {
    var machine = Machine(limit: 3)
    #expect(machine.moveWindow(to: ["a", "b", "c"]) == [.start("a"), .start("b"), .start("c")])
    #expect(machine.loadEnded("a", .loaded).isEmpty)
    let actions = machine.moveWindow(to: ["b", "d", "e", "a"])
    #expect(Set(actions) == [.cancel("c"), .start("d"), .start("e")])
    #expect(machine.progress == (1, 4), "a stays done, b still loads")
    #expect(machine.loadEnded("c", .cancelled).isEmpty, "a cancelled load that left is forgotten")
    #expect(machine.loading == ["b", "d", "e"])
  }

  @Test("while paused nothing starts; resuming fills up to the limit")
  func pause() {
    var machine = Machine(limit: 2)
    #expect(machine.setPaused(true).isEmpty)
    #expect(machine.moveWindow(to: ["a", "b", "c"]).isEmpty)
    #expect(machine.setPaused(false) == [.start("a"), .start("b")])
    #expect(machine.setPaused(true).isEmpty)
    #expect(machine.loadEnded("a", .loaded).isEmpty, "a load that ends while paused starts no other")
    #expect(machine.setPaused(false) == [.start("c")])
  }

  @Test("a key cancelled from outside while still in the window is tried again; duplicates count once")
  func retryAndDuplicates() {
    var machine = Machine(limit: 1)
    #expect(machine.moveWindow(to: ["a", "a", "b"]) == [.start("a")])
    #expect(machine.loadEnded("a", .cancelled) == [.start("a")])
    #expect(machine.loadEnded("a", .loaded) == [.start("b")])
    #expect(machine.loadEnded("zzz", .loaded).isEmpty, "an unknown key changes nothing")
    #expect(machine.progress == (1, 2))
  }

  @Test("an empty window cancels everything; a limit below 1 counts as 1")
  func emptyWindow() {
    var machine = Machine(limit: 0)
    #expect(machine.moveWindow(to: ["a", "b"]) == [.start("a")])
    #expect(machine.moveWindow(to: []) == [.cancel("a")])
    #expect(machine.progress == (0, 0))
    #expect(machine.loading.isEmpty)
  }
}
