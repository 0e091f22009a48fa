import Testing

@testable import AsyncCache

/// The test watchers of a ``LoadTable`` (``LoadTable/waitUntil(orCancellation:_:)``), which the
/// tests wait on instead of polling: every change they can see resumes them.
@Suite("LoadTable watchers")
struct LoadTableWatcherTests {
  /// Starts each load's task at once, a task that does nothing.
  final class ImmediateRunner: LoadRunner, Sendable {
    func beginRead(_ key: String) -> ReadToken<String> { ReadToken(key: key, id: 0) }

    func overtake(_ token: ReadToken<String>) {}

    func launch(_ loads: [LoadTable<String, Int>.StartedLoad]) -> [LoadLaunch] {
      loads.map { LoadLaunch(ids: [$0.id], task: Task {}, isBatch: false) }
    }
  }

  /// Found in a full test run: a test waiting for a load's task hung until its time limit,
  /// because the task was attached after the change that registered the load, and the watchers
  /// were not told. The task is now attached in the change that registers the load
  /// (``LoadTable/update(_:then:)``), which tells the watchers.
  @Test("a watcher waiting for a load's task is resumed when the task is attached", .timeLimit(.minutes(3)))
  func attachingATaskResumesWatchers() async {
    let table = LoadTable<String, Int>()
    let runner = ImmediateRunner()
    table.setRunner(runner)
    async let attached: Void = table.waitUntil(orCancellation: true) { machine in
      machine.joinable["k"].flatMap { machine.loads[$0]?.task } != nil
    }
    // Once the watcher waits (no change can resume it before the join below)…
    while table.state.withLock({ $0.watchers.isEmpty }) { await Task.yield() }
    // …a request starts the load: its change registers the load and attaches its task.
    var dependencies: [LoadIdentity] = []
    let refusal = table.join(
      "k", waiter: 1, as: .bulk(BulkCollector(keys: ["k"], failsFast: false)), negativeNow: nil,
      dependencies: &dependencies)
    if let refusal {
      Issue.record("the request did not start a load: \(refusal)")
      return
    }
    await attached
    #expect(
      table.state.withLock { state in state.machine.joinable["k"].flatMap { state.machine.loads[$0]?.task } } != nil)
    withExtendedLifetime(runner) {}
  }
}
