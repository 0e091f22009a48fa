import Testing

@testable import AsyncCache

/// The load table's named operations and what they count: the counters and negative caching's
/// errors live in the table, not in its machine, so these are the checks of the rules the
/// cache's statistics report.
@Suite struct LoadTableOperationsTests {
  typealias Table = LoadTable<String, Int>

  struct Oops: Error {}

  /// Records the loads it starts (each task does nothing) and the reads it overtakes.
  final class RecordingRunner: LoadRunner, Sendable {
    let started = Locked<[(id: UInt64, key: String, task: Task<Void, Never>)]>([])
    let overtaken = Locked<[ReadToken<String>]>([])

    func beginRead(_ key: String) -> ReadToken<String> { ReadToken(key: key, id: 7) }

    func overtake(_ token: ReadToken<String>) { overtaken.withLock { $0.append(token) } }

    func launch(_ loads: [Table.StartedLoad]) -> [LoadLaunch] {
      loads.map { load in
        let task = Task {}
        started.withLock { $0.append((load.id, load.key, task)) }
        return LoadLaunch(ids: [load.id], task: task, isBatch: false)
      }
    }

    /// The identifier of the last load started for `key`.
    func load(of key: String) throws -> UInt64 {
      try #require(started.withLock { $0.last { $0.key == key }?.id })
    }
  }

  let table = Table()
  let runner = RecordingRunner()

  init() {
    table.setRunner(runner)
  }

  /// Joins a bulk request's waiter `waiter` to the load of `key`; returns why it was refused.
  @discardableResult
  func join(_ key: String, waiter: UInt64, negativeNow: Int64? = nil) -> Table.Refusal? {
    var dependencies: [LoadIdentity] = []
    return table.join(
      key, waiter: waiter, as: .bulk(BulkCollector(keys: [key], failsFast: false)),
      negativeNow: negativeNow, dependencies: &dependencies)
  }

  var counters: LoadCounters {
    var loadTime = LoadTimeHistogram.allocated()
    return table.snapshot(into: &loadTime).counters
  }

  @Test func joiningCountsALoadOrACoalescedRequestAndFinishingCountsItsRequests() throws {
    #expect(join("k", waiter: 1) == nil)
    #expect(join("k", waiter: 2) == nil)
    var loadTime = LoadTimeHistogram.allocated()
    let snapshot = table.snapshot(into: &loadTime)
    #expect(snapshot.counters.loads == 1 && snapshot.counters.coalesced == 1)
    #expect(snapshot.loadsInFlight == 1 && snapshot.requestsWaiting == 2 && snapshot.urgentLoads == 1)
    let finished = table.finish(try runner.load(of: "k"), key: "k", .init(failed: false, duration: .seconds(1)))
    #expect(finished?.waiters.count == 2)
    #expect(counters.originAnswers == 2 && counters.failures == 0 && counters.loadTime.count == 1)
    #expect(table.isEmpty)
  }

  @Test func eachDepartureIsCountedApartAndTheLastAbandonsTheLoad() throws {
    for waiter in 1...4 as ClosedRange<UInt64> { join("k", waiter: waiter) }
    #expect(table.leave(1, key: "k", because: .cancelled).continuation != nil)
    #expect(table.leave(2, key: "k", because: .timedOut).continuation != nil)
    #expect(table.leave(3, key: "k", because: .refused).continuation != nil)
    #expect(counters.cancelledWaiters == 1 && counters.hardTimeouts == 1)
    #expect(counters.coalesced == 2, "a refused request counts as never having joined")
    #expect(runner.overtaken.withLock { $0.isEmpty })
    let last = table.leave(4, key: "k", because: .cancelled)
    let abandoned = try #require(last.abandoned)
    #expect(counters.cancelledLoads == 1 && counters.cancelledWaiters == 2)
    #expect(runner.overtaken.withLock { $0.count } == 1, "the abandoned load's read is overtaken")
    #expect(abandoned.task?.isCancelled == true, "and its task cancelled")
    #expect(table.leave(4, key: "k", because: .cancelled).continuation == nil, "leaving twice finds nothing")
    #expect(table.finish(abandoned.id, key: "k", .init(failed: true, duration: .zero)) == nil)
    #expect(counters.failures == 0, "an abandoned load is not counted")
  }

  @Test func aRememberedErrorRefusesJoinsUntilItExpiresOrAWriteForgetsIt() throws {
    join("k", waiter: 1)
    let ending = Table.Ending(failed: true, duration: .zero, negative: (Oops(), 100, 10))
    _ = table.finish(try runner.load(of: "k"), key: "k", ending)
    guard case .remembered(let error)? = join("k", waiter: 2, negativeNow: 99) else {
      Issue.record("a remembered error refuses the join")
      return
    }
    #expect(error is Oops)
    #expect(counters.negativeHits == 1 && counters.loads == 1)
    #expect(join("k", waiter: 3) == nil, "a cache that remembers no errors does not look")
    _ = table.finish(try runner.load(of: "k"), key: "k", .init(failed: false, duration: .zero))
    table.detach("k")
    #expect(join("k", waiter: 4, negativeNow: 99) == nil, "a write forgets the error")
    #expect(counters.loads == 3)
  }

  @Test func aLoadAWriteDetachedKeepsNothingForItsKey() throws {
    join("k", waiter: 1)
    table.detach("k")
    let ending = Table.Ending(
      failed: true, duration: .zero, servedStale: true, negative: (Oops(), .max, 10), thenRefresh: true)
    #expect(table.finish(try runner.load(of: "k"), key: "k", ending) != nil)
    #expect(counters.failures == 1 && counters.staleServed == 0 && counters.refreshes == 0)
    #expect(join("k", waiter: 2, negativeNow: 0) == nil, "no error was remembered")
  }

  @Test func aFinishedLoadStartsItsRefreshUnlessTheTableIsClosed() throws {
    join("k", waiter: 1)
    let refreshing = Table.Ending(failed: false, duration: .zero, servedStale: true, thenRefresh: true)
    _ = table.finish(try runner.load(of: "k"), key: "k", refreshing)
    #expect(counters.staleServed == 1 && counters.refreshes == 1 && counters.loads == 2)
    table.refresh("k", servedStale: false)
    #expect(counters.refreshesCoalesced == 1, "a refresh while one runs joins it")
    #expect(table.close())
    #expect(!table.close(), "closing twice")
    table.refresh("other", servedStale: false)
    #expect(counters.refreshes == 1, "a closed table starts no refresh")
    guard case .closed? = join("other", waiter: 2) else {
      Issue.record("a closed table refuses joins")
      return
    }
  }
}
