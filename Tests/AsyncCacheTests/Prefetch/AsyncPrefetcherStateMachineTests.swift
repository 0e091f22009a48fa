import Testing

@testable import AsyncCache

@Suite("AsyncPrefetcherStateMachine")
struct AsyncPrefetcherStateMachineTests {
  typealias Machine = AsyncPrefetcherStateMachine<String>

  @Test("loads start nearest first, at most the limit at a time, and the next one when one ends")
  func limit() {
    var machine = Machine(limit: 2)
    #expect(machine.moveWindow(to: ["a", "b", "c", "d"]).isEmpty)
    #expect(machine.nextLoads() == ["a", "b"])
    #expect(machine.nextLoads().isEmpty, "the limit is reached")
    #expect(machine.loadEnded("b", .loaded) == true)
    #expect(machine.nextLoads() == ["c"])
    #expect(machine.loadEnded("a", .skipped) == true)
    #expect(machine.nextLoads() == ["d"])
    #expect(machine.loadEnded("c", .failed) == true)
    #expect(machine.loadEnded("d", .loaded) == true)
    #expect(machine.nextLoads().isEmpty, "failed keys are not retried in the same window")
    #expect(machine.progress == (4, 4))
  }

  @Test("moving the window cancels the loads that left it and keeps the others and their outcomes")
  func move() {
    var machine = Machine(limit: 3)
    _ = machine.moveWindow(to: ["a", "b", "c"])
    #expect(machine.nextLoads() == ["a", "b", "c"])
    #expect(machine.loadEnded("a", .loaded) == true)
    #expect(machine.moveWindow(to: ["b", "d", "e", "a"]) == ["c"])
    #expect(machine.nextLoads() == ["d", "e"], "c stopped counting when it left")
    #expect(machine.progress == (1, 4), "a stays done, b still loads")
    #expect(machine.loadEnded("c", .cancelled) == false, "a cancelled load that left is forgotten")
    #expect(machine.loading == ["b", "d", "e"])
  }

  @Test("a key that leaves and comes back loads again; its old outcome is forgotten")
  func comeBack() {
    var machine = Machine(limit: 1)
    _ = machine.moveWindow(to: ["a"])
    #expect(machine.nextLoads() == ["a"])
    #expect(machine.loadEnded("a", .loaded) == true)
    #expect(machine.moveWindow(to: ["b"]).isEmpty, "a finished load is not cancelled")
    #expect(machine.moveWindow(to: ["a"]).isEmpty)
    #expect(machine.nextLoads() == ["a"])
  }

  @Test("while paused nothing starts; resuming fills up to the limit")
  func pause() {
    var machine = Machine(limit: 2)
    machine.setPaused(true)
    _ = machine.moveWindow(to: ["a", "b", "c"])
    #expect(machine.nextLoads().isEmpty)
    machine.setPaused(false)
    #expect(machine.nextLoads() == ["a", "b"])
    machine.setPaused(true)
    #expect(machine.loadEnded("a", .loaded) == true)
    #expect(machine.nextLoads().isEmpty, "a load that ends while paused starts no other")
    machine.setPaused(false)
    #expect(machine.nextLoads() == ["c"])
  }

  @Test("a key cancelled from outside while still in the window is tried again; duplicates count once")
  func retryAndDuplicates() {
    var machine = Machine(limit: 1)
    _ = machine.moveWindow(to: ["a", "a", "b"])
    #expect(machine.nextLoads() == ["a"])
    #expect(machine.loadEnded("a", .cancelled) == true)
    #expect(machine.nextLoads() == ["a"])
    #expect(machine.loadEnded("a", .loaded) == true)
    #expect(machine.nextLoads() == ["b"])
    #expect(machine.loadEnded("zzz", .loaded) == false, "an unknown key changes nothing")
    #expect(machine.progress == (1, 2))
  }

  @Test("an empty window cancels everything; a limit below 1 counts as 1")
  func emptyWindow() {
    var machine = Machine(limit: 0)
    _ = machine.moveWindow(to: ["a", "b"])
    #expect(machine.nextLoads() == ["a"])
    #expect(machine.moveWindow(to: []) == ["a"])
    #expect(machine.nextLoads().isEmpty)
    #expect(machine.moveWindow(to: ["b"]).isEmpty)
    #expect(machine.nextLoads() == ["b"], "a's cancelled load holds no slot")
    #expect(machine.moveWindow(to: []) == ["b"])
    #expect(machine.progress == (0, 0))
    #expect(machine.loading.isEmpty)
  }

  @Test("loads of keys on screen are kept outside the window, and cancelled once they leave the screen")
  func onScreen() {
    var machine = Machine(limit: 2)
    _ = machine.moveWindow(to: ["a", "b"])
    #expect(machine.nextLoads() == ["a", "b"])
    #expect(machine.moveWindow(to: ["b", "c"], keeping: ["a"]).isEmpty, "a is on screen now")
    #expect(machine.loading == ["a", "b"] && machine.nextLoads().isEmpty, "a still holds a slot")
    #expect(machine.progress == (0, 2), "a does not count in the window")
    #expect(machine.loadEnded("a", .loaded) == true)
    #expect(machine.progress == (0, 2))
    #expect(machine.nextLoads() == ["c"])
    #expect(machine.moveWindow(to: ["c", "d"], keeping: ["b"]).isEmpty)
    #expect(machine.moveWindow(to: ["e"], keeping: ["x"]) == ["c", "b"], "b left the screen, c the window")
  }
}
