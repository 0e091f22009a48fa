import Testing

@testable import AsyncCache

/// The test watchers of a ``LoadTable`` (``LoadTable/waitUntil(orCancellation:_:)``), which the
/// tests wait on instead of polling: every change they can see resumes them.
@Suite("LoadTable watchers")
struct LoadTableWatcherTests {
  /// Starts each load's task at once, a task that does nothing.
  final class ImmediateRunner: LoadRunner, Sendable {
    func beginRead(_ key: String) -> ReadToken<String> { ReadToken(key: key, id: 0) }

    func launch(_ loads: [LoadTable<String, Int>.Machine.StartedLoad]) -> [LoadLaunch] {
      loads.map { LoadLaunch(ids: [$0.id], task: Task {}, priority: $0.priority, isBatch: false) }
    }
  }

  /// Found in a full test run: a test waiting for a load's task hung until its time limit,
  /// because the task is attached after the change that registered the load, under the lock
  /// but outside ``LoadTable/withLock(_:first:)``, and the watchers were not told.
  @Test("a watcher waiting for a load's task is resumed when the task is attached", .timeLimit(.minutes(1)))
  func attachingATaskResumesWatchers() async {
    let table = LoadTable<String, Int>()
    let runner = ImmediateRunner()
    table.setRunner(runner)
    async let attached: Void = table.waitUntil(orCancellation: true) { machine in
      machine.joinable["k"].flatMap { machine.loads[$0]?.task } != nil
    }
    // Once the watcher waits (no change can resume it before the join below)…
    while table.state.withLock({ $0.watchers.isEmpty }) { await Task.yield() }
    // …a request starts the load: its change registers the load, whose task is attached after.
    let result = table.withLock {
      $0.join("k", waiter: 1, continuation: .bulk(BulkCollector(keys: ["k"], failsFast: false)), priority: .medium)
    }
    guard case .started = result else {
      Issue.record("the request did not start a load: \(result)")
      return
    }
    await attached
    #expect(
      table.state.withLock { state in state.machine.joinable["k"].flatMap { state.machine.loads[$0]?.task } } != nil)
    withExtendedLifetime(runner) {}
  }
}
