import AsyncCache
import Foundation
import PersistenceTestSupport

/// A root directory for a `LinuxMemoryPressureSource`: the tests write the `proc` and
/// `sys/fs/cgroup` files it reads under it.
struct MemoryPressureFixture {
  let directory: TemporaryDirectory

  init() throws { directory = try TemporaryDirectory("memory-pressure") }

  func path(_ relative: String) -> String { directory.appending(relative).path }

  func source(
    clock: any CacheClock = WallClock(), logger: CacheLogger = .disabled
  ) throws -> LinuxMemoryPressureSource {
    try LinuxMemoryPressureSource(
      configuration: .init(interval: .seconds(1), clock: clock, root: directory.url.path, logger: logger))
  }

  func write(_ relative: String, _ text: String) {
    let url = directory.appending(relative)
    try! FileManager.default.createDirectory(at: url.deletingLastPathComponent(), withIntermediateDirectories: true)
    try! Data(text.utf8).write(to: url)
  }

  func writeCgroupV2(used: Int, limit: Int) {
    write("sys/fs/cgroup/memory.max", "\(limit)\n")
    write("sys/fs/cgroup/memory.current", "\(used)\n")
  }

  /// Writes a cgroup v2 group's `memory.max` (`nil` for `max`) and `memory.current`, `group`
  /// relative to the mount (`""` for its root).
  func writeCgroupV2(group: String, used: Int, limit: Int?) {
    let directory = group.isEmpty ? "sys/fs/cgroup" : "sys/fs/cgroup/\(group)"
    write("\(directory)/memory.max", limit.map { "\($0)\n" } ?? "max\n")
    write("\(directory)/memory.current", "\(used)\n")
  }

  /// Writes a cgroup v1 memory group's `memory.limit_in_bytes` (`nil` for v1's "no limit") and
  /// `memory.usage_in_bytes`, `group` relative to the mount (`""` for its root).
  func writeCgroupV1(group: String, used: Int, limit: Int?) {
    let directory = group.isEmpty ? "sys/fs/cgroup/memory" : "sys/fs/cgroup/memory/\(group)"
    write("\(directory)/memory.limit_in_bytes", "\(limit ?? 9_223_372_036_854_771_712)\n")
    write("\(directory)/memory.usage_in_bytes", "\(used)\n")
  }

  func writeMeminfo(totalKB: Int, availableKB: Int) {
    write("proc/meminfo", "MemTotal:       \(totalKB) kB\nMemFree:        1 kB\nMemAvailable:   \(availableKB) kB\n")
  }

  func remove(_ relative: String) {
    try? FileManager.default.removeItem(at: directory.appending(relative))
  }

  func remove() { directory.remove() }
}
