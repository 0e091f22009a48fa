import AsyncCacheTesting
import Foundation
import Testing

@testable import AsyncCache

/// How a `LinuxMemoryPressureSource` finds the process's cgroup from `proc/self/cgroup`, on
/// fixture roots (and, read-only, on this machine).
@Suite("LinuxMemoryPressureSource: the process's cgroup")
struct LinuxMemoryPressureSourceCgroupTests {
  private static let mebibyte = 1 << 20

  @Test("a service's own cgroup v2 group is read, not the root of the mount, and followed when the process moves")
  func ownGroupV2() throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    let logs = RecordingLogHandler()
    root.writeMeminfo(totalKB: 16_000_000, availableKB: 8_000_000)
    root.write("sys/fs/cgroup/cgroup.procs", "1\n")  // the host's root group: no memory.max
    root.writeCgroupV2(group: "system.slice", used: 3000 * Self.mebibyte, limit: nil)
    root.writeCgroupV2(group: "system.slice/app.service", used: 512 * Self.mebibyte, limit: 1024 * Self.mebibyte)
    root.write("proc/self/cgroup", "0::/system.slice/app.service\n")
    let source = try root.source(logger: logs.logger())

    #expect(
      try source.readUsage()
        == MemoryUsage(source: .cgroupV2, usedBytes: 512 << 20, limitBytes: 1024 << 20))

    // A limit at the root of the mount is not the service's.
    root.writeCgroupV2(group: "", used: 100, limit: 1000)
    #expect(try source.readUsage().limitBytes == 1024 << 20)

    // Each reading reads proc/self/cgroup again.
    root.writeCgroupV2(group: "system.slice/other.service", used: 10 * Self.mebibyte, limit: 40 * Self.mebibyte)
    root.write("proc/self/cgroup", "0::/system.slice/other.service\n")
    #expect(try source.readUsage() == MemoryUsage(source: .cgroupV2, usedBytes: 10 << 20, limitBytes: 40 << 20))
    #expect(logs.records.isEmpty)
  }

  @Test("a cgroup v2 group without a limit is measured by its ancestors' limits")
  func limitedAncestorV2() throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    root.writeMeminfo(totalKB: 16_000_000, availableKB: 8_000_000)
    root.write("sys/fs/cgroup/cgroup.procs", "1\n")
    // The grandparent is further from its limit than the parent (49% against 75%): the parent
    // binds.
    root.writeCgroupV2(group: "system.slice", used: 500 * Self.mebibyte, limit: 1024 * Self.mebibyte)
    root.writeCgroupV2(group: "system.slice/apps.slice", used: 1536 * Self.mebibyte, limit: 2048 * Self.mebibyte)
    root.writeCgroupV2(group: "system.slice/apps.slice/app.service", used: 300 * Self.mebibyte, limit: nil)
    root.write("proc/self/cgroup", "0::/system.slice/apps.slice/app.service\n")
    let source = try root.source()
    let parent = MemoryUsage(source: .cgroupV2, usedBytes: 1536 << 20, limitBytes: 2048 << 20)

    #expect(try source.readUsage() == parent, "the parent's usage against the parent's limit")

    // No memory.max of its own (the parent does not delegate the controller): the same.
    root.remove("sys/fs/cgroup/system.slice/apps.slice/app.service/memory.max")
    #expect(try source.readUsage() == parent)

    // A limit of the whole machine is no limit.
    root.write("sys/fs/cgroup/system.slice/apps.slice/app.service/memory.max", "\(16_000_000 * 1024)\n")
    #expect(try source.readUsage() == parent)

    // Without the parent's limit, the grandparent's.
    root.write("sys/fs/cgroup/system.slice/apps.slice/memory.max", "max\n")
    #expect(try source.readUsage() == MemoryUsage(source: .cgroupV2, usedBytes: 500 << 20, limitBytes: 1024 << 20))

    // Without any, the machine's figures.
    root.write("sys/fs/cgroup/system.slice/memory.max", "max\n")
    #expect(try source.readUsage().source == .procMeminfo)
  }

  @Test("in a container with a cgroup namespace, 0::/ reads the group at the root of the mount")
  func namespacedRoot() throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    let logs = RecordingLogHandler()
    root.writeMeminfo(totalKB: 16_000_000, availableKB: 8_000_000)
    root.write("sys/fs/cgroup/cgroup.procs", "1\n")
    root.writeCgroupV2(group: "", used: 256 * Self.mebibyte, limit: 512 * Self.mebibyte)
    root.write("proc/self/cgroup", "0::/\n")
    let source = try root.source(logger: logs.logger())

    #expect(try source.readUsage() == MemoryUsage(source: .cgroupV2, usedBytes: 256 << 20, limitBytes: 512 << 20))
    root.writeCgroupV2(group: "", used: 256 * Self.mebibyte, limit: nil)
    #expect(try source.readUsage().source == .procMeminfo, "a container without a limit")
    #expect(logs.records.isEmpty)
  }

  @Test("cgroup v1: the memory controller's line names the group; its ancestors' limits apply to it")
  func memoryControllerV1() throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    let logs = RecordingLogHandler()
    root.writeMeminfo(totalKB: 16_000_000, availableKB: 8_000_000)
    // A hybrid host: sys/fs/cgroup is a tmpfs, the v2 hierarchy (without the memory
    // controller) is at sys/fs/cgroup/unified, the v1 memory hierarchy at sys/fs/cgroup/memory.
    root.write("sys/fs/cgroup/unified/cgroup.procs", "1\n")
    root.write("sys/fs/cgroup/memory/cgroup.procs", "1\n")
    root.writeCgroupV1(group: "", used: 6000 * Self.mebibyte, limit: nil)
    root.writeCgroupV1(group: "user.slice", used: 300 * Self.mebibyte, limit: 1024 * Self.mebibyte)
    root.writeCgroupV1(group: "user.slice/job.scope", used: 128 * Self.mebibyte, limit: 256 * Self.mebibyte)
    root.write(
      "proc/self/cgroup",
      """
      12:pids:/user.slice/user-1000.slice
      7:memory:/user.slice/job.scope
      1:name=systemd:/user.slice/job.scope
      0::/user.slice/job.scope

      """)
    let source = try root.source(logger: logs.logger())

    #expect(try source.readUsage() == MemoryUsage(source: .cgroupV1, usedBytes: 128 << 20, limitBytes: 256 << 20))
    root.writeCgroupV1(group: "user.slice/job.scope", used: 128 * Self.mebibyte, limit: nil)
    #expect(try source.readUsage() == MemoryUsage(source: .cgroupV1, usedBytes: 300 << 20, limitBytes: 1024 << 20))
    #expect(logs.records.isEmpty, "sys/fs/cgroup is no v2 hierarchy here: its missing group is not news")
  }

  @Test(
    "a group that is not under its mount falls back to the root of the mount, and says why once",
    arguments: [
      (
        "0::/system.slice/gone.service\n", MemoryUsage.Source.cgroupV2, "/system.slice/gone.service",
        "no such directory"
      ),
      (
        "0::/system.slice/app.service (deleted)\n", .cgroupV2, "/system.slice/app.service (deleted)",
        "no such directory"
      ),
      (
        "0::/../../host.slice/x.scope\n", .cgroupV2, "/../../host.slice/x.scope",
        "outside the process's view of the hierarchy"
      ),
      // Docker on cgroup v1 without a cgroup namespace: the mount is the container's group.
      ("4:memory:/docker/0123abcd\n", .cgroupV1, "/docker/0123abcd", "no such directory"),
    ])
  func staleGroup(line: String, hierarchy: MemoryUsage.Source, group: String, reason: String) throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    let logs = RecordingLogHandler()
    root.writeMeminfo(totalKB: 16_000_000, availableKB: 8_000_000)
    let mount = hierarchy == .cgroupV2 ? "sys/fs/cgroup" : "sys/fs/cgroup/memory"
    root.write("\(mount)/cgroup.procs", "1\n")
    root.write("\(mount)/system.slice/app.service/cgroup.procs", "2\n")
    if hierarchy == .cgroupV2 {
      root.writeCgroupV2(group: "", used: 256 * Self.mebibyte, limit: 1024 * Self.mebibyte)
    } else {
      root.writeCgroupV1(group: "", used: 256 * Self.mebibyte, limit: 1024 * Self.mebibyte)
    }
    root.write("proc/self/cgroup", line)
    let source = try root.source(logger: logs.logger())

    for _ in 0..<3 {
      #expect(try source.readUsage() == MemoryUsage(source: hierarchy, usedBytes: 256 << 20, limitBytes: 1024 << 20))
    }
    let note = try #require(logs.records.only)
    #expect(note.level == .debug && note.source == "LinuxMemoryPressureSource")
    #expect(
      note.message == "cannot find the process's cgroup under its mount; reading the group at the root of the mount")
    #expect(
      note.metadata == [
        "hierarchy": "\(hierarchy)", "group": group, "mount": root.path(mount), "reason": reason,
      ])
  }

  @Test(
    "malformed proc/self/cgroup content reads the groups at the roots of the mounts, and says so once",
    arguments: [
      "", "garbage", "\u{0}\u{1}\u{2}", "0:/two-fields\n", "::\n", "x::/letters\n", "0::relative/path\n", "0::\n",
      "0::/a\r\n", String(repeating: "9:memory:", count: 3),
    ])
  func malformedProcessCgroups(text: String) throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    let logs = RecordingLogHandler()
    root.writeMeminfo(totalKB: 16_000_000, availableKB: 8_000_000)
    root.write("sys/fs/cgroup/cgroup.procs", "1\n")
    root.writeCgroupV2(group: "", used: 256 * Self.mebibyte, limit: 1024 * Self.mebibyte)
    root.write("proc/self/cgroup", text)
    let source = try root.source(logger: logs.logger())

    let expected = MemoryUsage(source: .cgroupV2, usedBytes: 256 << 20, limitBytes: 1024 << 20)
    #expect(try source.readUsage() == expected)
    let logged = logs.records
    #expect(logged.allSatisfy { $0.level == .debug })
    #expect(try source.readUsage() == expected)
    #expect(logs.records.count == logged.count, "logged once, not at each reading")
  }

  @Test("without proc/self/cgroup, the groups at the roots of the mounts are read, silently")
  func missingProcessCgroups() throws {
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    let logs = RecordingLogHandler()
    root.writeMeminfo(totalKB: 16_000_000, availableKB: 8_000_000)
    root.writeCgroupV1(group: "", used: 1024, limit: 4096)
    #expect(
      try root.source(logger: logs.logger()).readUsage()
        == MemoryUsage(source: .cgroupV1, usedBytes: 1024, limitBytes: 4096))
    #expect(logs.records.isEmpty)
  }

  @Test("on this machine, a reading succeeds and uses the process's own group when that has a limit")
  func thisMachine() throws {
    #if os(Linux)
      let cgroupFile = try String(contentsOfFile: "/proc/self/cgroup", encoding: .utf8)
      let cgroups = ProcessCgroups(parsing: cgroupFile)
      #expect(cgroups.malformedLineCount == 0, "\(cgroupFile)")
      #expect(cgroups.unified != nil || cgroups.memory != nil, "\(cgroupFile)")

      let usage = try LinuxMemoryPressureSource().readUsage()
      let meminfo = try String(contentsOfFile: "/proc/meminfo", encoding: .utf8)
      let totalKB = try #require(
        meminfo.split(separator: "\n").first { $0.hasPrefix("MemTotal:") }?.split(separator: " ").dropFirst().first
          .flatMap { UInt64($0) })
      #expect(usage.limitBytes > 0 && usage.limitBytes <= totalKB * 1024)
      if usage.source != .procMeminfo { #expect(usage.limitBytes < totalKB * 1024) }

      // Where the process's own group has a limit of its own (a limited service or
      // container), the reading is against it; elsewhere this checks nothing more.
      func ownLimit(_ group: ProcessCgroups.Group?, mount: String, file: String) -> UInt64? {
        guard case .path(let components)? = group else { return nil }
        let directory = ([mount] + components).joined(separator: "/")
        guard let text = try? String(contentsOfFile: "\(directory)/\(file)", encoding: .utf8),
          let limit = UInt64(text.trimmingCharacters(in: .whitespacesAndNewlines)), limit < totalKB * 1024
        else { return nil }
        return limit
      }
      if let limit = ownLimit(cgroups.unified, mount: "/sys/fs/cgroup", file: "memory.max") {
        #expect(usage.source == .cgroupV2 && usage.limitBytes == limit)
      } else if let limit = ownLimit(cgroups.memory, mount: "/sys/fs/cgroup/memory", file: "memory.limit_in_bytes") {
        #expect(usage.source == .cgroupV1 && usage.limitBytes == limit)
      }
    #endif
  }

  /// A slice's smaller limit binds its children whatever their own (a service with MemoryMax=2G
  /// in a slice with MemoryMax=1G): the slice at 98% is the reading, not the service's 44%.
  @Test func aTighterAncestorBinds() throws {
    let mebibyte = 1 << 20
    let root = try MemoryPressureFixture()
    defer { root.remove() }
    root.writeMeminfo(totalKB: 16_000_000, availableKB: 8_000_000)
    root.write("sys/fs/cgroup/cgroup.procs", "1\n")
    root.writeCgroupV2(group: "apps.slice", used: 1000 * mebibyte, limit: 1024 * mebibyte)
    root.writeCgroupV2(group: "apps.slice/app.service", used: 900 * mebibyte, limit: 2048 * mebibyte)
    root.write("proc/self/cgroup", "0::/apps.slice/app.service\n")
    let usage = try root.source().readUsage()
    #expect(usage.limitBytes == UInt64(1024 * mebibyte) && usage.usedBytes == UInt64(1000 * mebibyte), "\(usage)")
  }
}
