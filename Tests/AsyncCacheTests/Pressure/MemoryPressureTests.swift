import AsyncCacheTesting
import Foundation
import PersistenceTestSupport
import Testing

@testable import AsyncCache

@Suite("MemoryPressure", .timeLimit(.minutes(3)))
struct MemoryPressureTests {
  // MARK: Following a source

  @Test("each level a source reports reaches every layer of a loading cache, in order")
  func levelsReachEveryLayer() async throws {
    let source = ScriptedPressureSource()
    let memory = try MemoryLayer<String, Int>(configuration: .init(countLimit: 8, warningTrimFraction: 0.5))
    let signal = SignalLayer()
    let recorder = RecordingLayer(signal)
    let cache = try LoadingCache(layers: [memory, recorder], origin: ClosureFetcher { _ in 0 })
    for index in 0..<8 { try memory.insert(index, for: "k\(index)") }
    var delivered = signal.levels.makeAsyncIterator()

    let listening = Task { await cache.followMemoryPressure(source) }
    source.send(.warning)
    #expect(await delivered.next() == .warning)
    #expect(memory.count == 4, "warning trims to half the count limit")
    source.send(.critical)
    #expect(await delivered.next() == .critical)
    #expect(memory.count == 0, "critical empties the memory layer")
    source.send(.normal)
    #expect(await delivered.next() == .normal)
    #expect(recorder.calls == [.memoryPressure(.warning), .memoryPressure(.critical), .memoryPressure(.normal)])
    listening.cancel()
    await listening.value
  }

  @Test("following the platform's source runs until its task is cancelled, for a cache and a chain")
  func systemSource() async throws {
    let cache = try LoadingCache(layers: [MemoryLayer<String, Int>()], origin: ClosureFetcher { _ in 0 })
    let chain = try CacheChain<String, Int>([MemoryLayer<String, Int>()])
    let listening = [
      Task { await cache.followSystemMemoryPressure() }, Task { await chain.followSystemMemoryPressure() },
    ]
    for task in listening {
      task.cancel()
      await task.value
    }
    #if canImport(Darwin)
      #expect(systemMemoryPressureSource(logger: .disabled) is DispatchMemoryPressureSource)
    #else
      #expect(systemMemoryPressureSource(logger: .disabled) is LinuxMemoryPressureSource)
    #endif
  }

  @Test("cancelling the listening task stops delivery and ends the source's sequence")
  func stopListening() async throws {
    let source = ScriptedPressureSource()
    let memory = try MemoryLayer<String, Int>()
    let signal = SignalLayer()
    let recorder = RecordingLayer(signal)
    let cache = try LoadingCache(layers: [memory, recorder], origin: ClosureFetcher { _ in 0 })
    var delivered = signal.levels.makeAsyncIterator()

    let listening = Task { await cache.followMemoryPressure(source) }
    source.send(.warning)
    #expect(await delivered.next() == .warning)
    listening.cancel()
    await listening.value
    #expect(source.isTerminated, "the source's sequence ended with the listening")

    try memory.insert(1, for: "a")
    source.send(.critical)
    await cache.chain.handleMemoryPressure(.normal)  // a marker: the next delivery the signal sees
    #expect(await delivered.next() == .normal, "critical was not delivered")
    #expect(memory.value(for: "a") == 1)
    #expect(recorder.calls == [.memoryPressure(.warning), .memoryPressure(.normal)])
  }

  // MARK: Reading the usage

  @Test("cgroup v2 is read first when it has a limit")
  func cgroupV2() throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    root.write("sys/fs/cgroup/memory.max", "1073741824\n")
    root.write("sys/fs/cgroup/memory.current", "536870912\n")
    root.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "2048\n")
    root.write("sys/fs/cgroup/memory/memory.usage_in_bytes", "1024\n")
    root.writeMeminfo(totalKB: 16_000_000, availableKB: 8_000_000)
    let usage = try root.source().readUsage()
    #expect(usage == MemoryUsage(source: .cgroupV2, usedBytes: 536_870_912, limitBytes: 1_073_741_824))
    #expect(usage.fractionUsed == 0.5)
  }

  @Test("a cgroup v2 limit of max, or at least the machine's memory, falls back to cgroup v1, then meminfo")
  func cgroupV2Unlimited() throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    root.write("sys/fs/cgroup/memory.max", "max\n")
    root.write("sys/fs/cgroup/memory.current", "536870912\n")
    root.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "4096\n")
    root.write("sys/fs/cgroup/memory/memory.usage_in_bytes", "1024\n")
    root.writeMeminfo(totalKB: 1000, availableKB: 250)
    #expect(try root.source().readUsage() == MemoryUsage(source: .cgroupV1, usedBytes: 1024, limitBytes: 4096))

    root.remove("sys/fs/cgroup/memory")
    #expect(
      try root.source().readUsage() == MemoryUsage(source: .procMeminfo, usedBytes: 750 * 1024, limitBytes: 1000 * 1024)
    )

    root.write("sys/fs/cgroup/memory.max", "\(1000 * 1024)\n")
    #expect(try root.source().readUsage().source == .procMeminfo, "a limit of the whole machine is no limit")
    root.write("sys/fs/cgroup/memory.max", "\(1000 * 1024 - 1)\n")
    #expect(try root.source().readUsage().source == .cgroupV2)
  }

  @Test("cgroup v1's unlimited sentinel, or a limit above the machine's memory, falls back to meminfo")
  func cgroupV1Unlimited() throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    root.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
    root.write("sys/fs/cgroup/memory/memory.usage_in_bytes", "1024\n")
    root.writeMeminfo(totalKB: 1000, availableKB: 900)
    #expect(
      try root.source().readUsage() == MemoryUsage(source: .procMeminfo, usedBytes: 100 * 1024, limitBytes: 1000 * 1024)
    )

    root.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "\(2000 * 1024)\n")
    #expect(try root.source().readUsage().source == .procMeminfo)

    root.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "\(500 * 1024)\n")
    #expect(try root.source().readUsage() == MemoryUsage(source: .cgroupV1, usedBytes: 1024, limitBytes: 500 * 1024))
  }

  @Test("the v1 sentinel counts as unlimited even when meminfo cannot be read")
  func cgroupV1SentinelWithoutMeminfo() throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    root.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n")
    root.write("sys/fs/cgroup/memory/memory.usage_in_bytes", "1024\n")
    #expect(throws: MemoryUsageReadError.self) { try root.source().readUsage() }

    root.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "4096\n")
    #expect(try root.source().readUsage() == MemoryUsage(source: .cgroupV1, usedBytes: 1024, limitBytes: 4096))
  }

  @Test("malformed cgroup files fall back to the next source")
  func malformedCgroup() throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    root.write("sys/fs/cgroup/memory.max", "lots\n")
    root.write("sys/fs/cgroup/memory.current", "1024\n")
    root.write("sys/fs/cgroup/memory/memory.limit_in_bytes", "4096\n")
    root.write("sys/fs/cgroup/memory/memory.usage_in_bytes", "")
    root.writeMeminfo(totalKB: 1000, availableKB: 500)
    #expect(try root.source().readUsage().source == .procMeminfo)

    root.write("sys/fs/cgroup/memory.max", "4096")
    root.write("sys/fs/cgroup/memory.current", "-1")
    #expect(try root.source().readUsage().source == .procMeminfo)
    root.write("sys/fs/cgroup/memory.current", " 2048 \n")
    #expect(try root.source().readUsage() == MemoryUsage(source: .cgroupV2, usedBytes: 2048, limitBytes: 4096))
  }

  @Test("meminfo is parsed by name; missing or malformed meminfo is a typed error")
  func meminfo() throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    let missing = MemoryUsageReadError(path: root.path("proc/meminfo"), reason: .unreadable(errno: ENOENT))
    #expect(throws: missing) { try root.source().readUsage() }

    root.write(
      "proc/meminfo",
      """
      MemTotal:        4000 kB
      MemFree:          100 kB
      MemAvailable:    1000 kB
      Buffers:           10 kB
      HugePages_Total:       0

      """)
    #expect(
      try root.source().readUsage()
        == MemoryUsage(source: .procMeminfo, usedBytes: 3000 * 1024, limitBytes: 4000 * 1024))

    let malformed: [(String, String)] = [
      ("MemTotal: 4000 kB\n", "no MemAvailable"),
      ("MemAvailable: 1000 kB\n", "no positive MemTotal"),
      ("MemTotal: 0 kB\nMemAvailable: 0 kB\n", "no positive MemTotal"),
      ("MemTotal: many kB\nMemAvailable: 1000 kB\n", "cannot read the value of MemTotal"),
      ("MemTotal: 4000 MB\nMemAvailable: 1000 kB\n", "cannot read the value of MemTotal"),
      ("MemTotal: 99999999999999999999 kB\nMemAvailable: 1 kB\n", "cannot read the value of MemTotal"),
      ("MemTotal: 18446744073709551 kB\nMemAvailable: 1 kB\n", "MemTotal is too large"),
      ("\u{0}\u{1}garbage", "no positive MemTotal"),
    ]
    for (text, detail) in malformed {
      root.write("proc/meminfo", text)
      #expect(throws: MemoryUsageReadError(path: root.path("proc/meminfo"), reason: .malformed(detail))) {
        try root.source().readUsage()
      }
    }

    root.write("proc/meminfo", "MemTotal: 1000 kB\nMemAvailable: 2000 kB\n")
    #expect(try root.source().readUsage().usedBytes == 0, "more available than total reads as none used")
  }

  @Test("thresholds map the share in use to levels; invalid configurations are refused")
  func thresholds() throws {
    let source = try LinuxMemoryPressureSource(configuration: .init(warningThreshold: 0.8, criticalThreshold: 0.95))
    func level(_ used: UInt64) -> MemoryPressureLevel {
      source.level(for: MemoryUsage(source: .procMeminfo, usedBytes: used, limitBytes: 100))
    }
    #expect(
      [0, 79, 80, 94, 95, 100, 120].map(level) == [
        .normal, .normal, .warning, .warning, .critical, .critical, .critical,
      ])

    for configuration in [
      LinuxMemoryPressureSource.Configuration(warningThreshold: 0.9, criticalThreshold: 0.8),
      .init(warningThreshold: -0.1),
      .init(criticalThreshold: 1.5),
      .init(interval: .zero),
    ] {
      #expect(throws: AsyncCacheError.self) { try LinuxMemoryPressureSource(configuration: configuration) }
    }
  }

  // MARK: Polling

  @Test("polling yields each threshold crossing once, on the clock's interval, and stops when the sequence ends")
  func polling() async throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    let clock = ManualClock()
    root.writeCgroupV2(used: 500, limit: 1000)
    let source = try root.source(clock: clock)
    let levels = source.levels()
    var iterator = levels.makeAsyncIterator()

    // The first reading is normal: nothing is yielded.
    await clock.waitForSleepers(1)
    root.writeCgroupV2(used: 850, limit: 1000)
    clock.advance(by: .seconds(1))
    #expect(await iterator.next() == .warning)

    // Still warning (and an unreadable tick) yields nothing; then critical.
    await poll(clock, after: { root.writeCgroupV2(used: 900, limit: 1000) })
    await poll(
      clock,
      after: {
        root.write("proc/meminfo", "broken")
        root.remove("sys/fs/cgroup")
      })
    await poll(clock, after: { root.writeCgroupV2(used: 940, limit: 1000) })
    root.writeCgroupV2(used: 950, limit: 1000)
    clock.advance(by: .seconds(1))
    #expect(await iterator.next() == .critical)

    await poll(clock, after: { root.writeCgroupV2(used: 1100, limit: 1000) })
    root.writeCgroupV2(used: 100, limit: 1000)
    clock.advance(by: .seconds(1))
    #expect(await iterator.next() == .normal)

    await poll(clock, after: { root.writeCgroupV2(used: 200, limit: 1000) })
    root.writeCgroupV2(used: 990, limit: 1000)
    clock.advance(by: .seconds(1))
    #expect(await iterator.next() == .critical, "normal to critical in one step")

    // The poll sleeps a full interval, not less.
    await clock.waitForSleepers(1)
    root.writeCgroupV2(used: 100, limit: 1000)
    clock.advance(by: .milliseconds(999))
    await clock.waitForSleepers(1)
    #expect(clock.nextDeadline == clock.now.advanced(by: .milliseconds(1)))
    clock.advance(by: .milliseconds(1))
    #expect(await iterator.next() == .normal)

    // Dropping the sequence (its last iterator too) cancels the poll task at once, and the
    // cancelled task stops sleeping on the clock.
    await clock.waitForSleepers(1)
    iterator = AsyncStream<MemoryPressureLevel> { $0.finish() }.makeAsyncIterator()
    _ = consume levels
    #expect(clock.sleeperCount == 0)
  }

  @Test("a reading above the thresholds at the start is yielded at once")
  func startsUnderPressure() async throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    let clock = ManualClock()
    root.writeCgroupV2(used: 960, limit: 1000)
    var iterator = try root.source(clock: clock).levels().makeAsyncIterator()
    #expect(await iterator.next() == .critical)
  }

  /// Waits until the poll loop sleeps, changes the files, and lets one reading happen that
  /// must yield nothing (the next `next()` proves it).
  private func poll(_ clock: ManualClock, after change: () -> Void) async {
    await clock.waitForSleepers(1)
    change()
    clock.advance(by: .seconds(1))
    await clock.waitForSleepers(1)
  }
}

// MARK: - Test doubles

/// A memory pressure source whose levels the test sends; one observer at a time.
private final class ScriptedPressureSource: MemoryPressureSource {
  private let stream: AsyncStream<MemoryPressureLevel>
  private let continuation: AsyncStream<MemoryPressureLevel>.Continuation
  private let terminated = Locked(false)

  init() {
    (stream, continuation) = AsyncStream.makeStream(of: MemoryPressureLevel.self)
    continuation.onTermination = { [terminated] _ in terminated.withLock { $0 = true } }
  }

  func levels() -> AsyncStream<MemoryPressureLevel> { stream }

  func send(_ level: MemoryPressureLevel) { continuation.yield(level) }

  var isTerminated: Bool { terminated.withLock { $0 } }
}

/// A layer that stores nothing and reports each memory pressure level it receives.
private actor SignalLayer: AsyncCacheLayer {
  nonisolated let levels: AsyncStream<MemoryPressureLevel>
  private nonisolated let continuation: AsyncStream<MemoryPressureLevel>.Continuation

  init() {
    (levels, continuation) = AsyncStream.makeStream(of: MemoryPressureLevel.self)
  }

  func entry(for key: String) -> CacheEntry<Int>? { nil }
  func insert(_ entry: CacheEntry<Int>, for key: String) {}
  func removeValue(for key: String) {}
  func removeAll() {}
  nonisolated func handleMemoryPressure(_ level: MemoryPressureLevel) async { continuation.yield(level) }
}
